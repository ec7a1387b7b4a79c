// SPDX-License-Identifier: GPL-2.0
/*
 * gdt-misuse: syncs that do not match their mapping, and overlapping
 * mappings (see cmds.c for the conventions).
 */
#define pr_fmt(fmt) "gdt-misuse: " fmt

#include <linux/list.h>
#include <linux/slab.h>

#include "gdt-misuse.h"

/*
 * Sync after unmap. dma-debug: "device driver tries to sync DMA memory it
 * has not allocated [device address=...] [size=...]". On a coherent device
 * the sync touches nothing (6.11+ does not even make the call:
 * kernel_skips=1 in the log).
 */
noinline int cmd_sync_after_unmap(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_MAPPED_SINGLE(c, a, 256, DMA_FROM_DEVICE, {
		gdt_unmap_single(c, a, 256, DMA_FROM_DEVICE, 0);
		GDT_SYNC(c, dma_sync_single_for_cpu, a, 256, DMA_FROM_DEVICE);
	});
}

/*
 * Sync past the end: 256 mapped, [128, 384) synced. dma-debug has "device
 * driver syncs DMA memory outside allocated range [device address=...]
 * [allocation size=...] [sync offset+size=...]", but its lookup only
 * matches mappings that contain the whole synced range, so it prints
 * "device driver tries to sync DMA memory it has not allocated" instead.
 */
noinline int cmd_sync_outside(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_MAPPED_SINGLE(c, a, 256, DMA_FROM_DEVICE, {
		GDT_SYNC(c, dma_sync_single_for_cpu, a + 128, 256, DMA_FROM_DEVICE);
		gdt_unmap_single(c, a, 256, DMA_FROM_DEVICE, 0);
	});
}

/*
 * sync_for_cpu of a TO_DEVICE mapping, with FROM_DEVICE. dma-debug, both:
 * "device driver syncs DMA memory with different direction [...] [mapped
 * with DMA_TO_DEVICE] [synced with DMA_FROM_DEVICE]" and "device driver
 * syncs device read-only DMA memory for cpu [...]".
 */
noinline int cmd_sync_dir_cpu(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_MAPPED_SINGLE(c, a, 256, DMA_TO_DEVICE, {
		GDT_SYNC(c, dma_sync_single_for_cpu, a, 256, DMA_FROM_DEVICE);
		gdt_unmap_single(c, a, 256, DMA_TO_DEVICE, 0);
	});
}

/*
 * sync_for_device of a FROM_DEVICE mapping, with TO_DEVICE. dma-debug, both:
 * "... with different direction [...] [mapped with DMA_FROM_DEVICE] [synced
 * with DMA_TO_DEVICE]" and "device driver syncs device write-only DMA
 * memory to device [...]".
 */
noinline int cmd_sync_dir_device(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_MAPPED_SINGLE(c, a, 256, DMA_FROM_DEVICE, {
		GDT_SYNC(c, dma_sync_single_for_device, a, 256, DMA_TO_DEVICE);
		gdt_unmap_single(c, a, 256, DMA_FROM_DEVICE, 0);
	});
}

/*
 * dma_sync_sg_for_cpu of an sg list already unmapped. dma-debug (per
 * entry): "device driver tries to sync DMA memory it has not allocated".
 */
noinline int cmd_sync_sg_after_unmap(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_MAPPED_SG(c, s, 4, DMA_FROM_DEVICE, {
		gdt_unmap_sg(c, &s, 4, DMA_FROM_DEVICE);
		GDT_SYNC_SG(c, dma_sync_sg_for_cpu, &s, 4, DMA_FROM_DEVICE);
	});
}

/*
 * dma_sync_sg_for_cpu with 5 entries of a 4-entry mapping. dma-debug:
 * "device driver syncs DMA sg list count larger than map count [map
 * count=4] [sync count=5]". The 5th entry was never mapped (address and
 * length 0): nothing to sync on a coherent device.
 */
noinline int cmd_sync_sg_count(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_MAPPED_SG(c, s, 5, DMA_FROM_DEVICE, {
		GDT_SYNC_SG(c, dma_sync_sg_for_cpu, &s, 5, DMA_FROM_DEVICE);
		gdt_unmap_sg(c, &s, 4, DMA_FROM_DEVICE);
	});
}

/*
 * Two mappings of one page at [o1, o1+l1) and [o2, o2+l2), in that order,
 * then unmapped in reverse. dma-debug keys only the FIRST cacheline
 * (L1_CACHE_BYTES, 64 on x86) of each non-TO_DEVICE mapping and, on a
 * collision, says "cacheline tracking EEXIST, overlapping mappings aren't
 * supported" unless the second mapping has DMA_ATTR_SKIP_CPU_SYNC.
 */
static int overlap(struct gdt_ctx *c, size_t o1, size_t l1,
		   enum dma_data_direction d1, size_t o2, size_t l2,
		   enum dma_data_direction d2, unsigned long attrs)
{
	struct page *p = new_page(c);
	dma_addr_t a, b;
	int rc = -EIO;
	u8 *v;

	if (!p)
		return -ENOMEM;
	v = page_address(p);
	a = gdt_map_single(c, v + o1, l1, d1, attrs);
	if (gdt_failed(c, a))
		goto out;
	b = gdt_map_single(c, v + o2, l2, d2, attrs);
	if (!gdt_failed(c, b)) {
		gdt_unmap_single(c, b, l2, d2, attrs);
		rc = 0;
	}
	gdt_unmap_single(c, a, l1, d1, attrs);
out:
	__free_page(p);
	return rc;
}

/* FROM_DEVICE [0,128) and [32,96): same first cacheline; dma-debug sees it. */
noinline int cmd_overlap_first(struct gdt_ctx *c, unsigned long arg)
{
	return overlap(c, 0, 128, DMA_FROM_DEVICE, 32, 64, DMA_FROM_DEVICE, 0);
}

/* FROM_DEVICE [0,32) and [32,64): no byte in common, one cacheline (two
 * small kmalloc buffers side by side); dma-debug sees it. */
noinline int cmd_overlap_shared_line(struct gdt_ctx *c, unsigned long arg)
{
	return overlap(c, 0, 32, DMA_FROM_DEVICE, 32, 32, DMA_FROM_DEVICE, 0);
}

/* FROM_DEVICE [0,1024) and [512,576): the overlap is the first mapping's 9th
 * cacheline, not its first; dma-debug misses it. */
noinline int cmd_overlap_later(struct gdt_ctx *c, unsigned long arg)
{
	return overlap(c, 0, 1024, DMA_FROM_DEVICE, 512, 64, DMA_FROM_DEVICE, 0);
}

/* BIDIRECTIONAL [64,320) and [192,448): two cachelines in common, neither
 * the first of the first mapping; dma-debug misses it. */
noinline int cmd_overlap_bidir(struct gdt_ctx *c, unsigned long arg)
{
	return overlap(c, 64, 256, DMA_BIDIRECTIONAL, 192, 256,
		       DMA_BIDIRECTIONAL, 0);
}

/* Exempt, zero findings: the cmd_overlap_first pair, both with
 * DMA_ATTR_SKIP_CPU_SYNC (dma-debug honours it on the second). */
noinline int cmd_overlap_skip_sync(struct gdt_ctx *c, unsigned long arg)
{
	return overlap(c, 0, 128, DMA_FROM_DEVICE, 32, 64, DMA_FROM_DEVICE,
		       DMA_ATTR_SKIP_CPU_SYNC);
}

/* Exempt, zero findings: the device only reads. TO_DEVICE [0,128) twice,
 * then FROM_DEVICE over a TO_DEVICE one (a writer needs another writer or
 * reader-writer to conflict with; dma-debug does not track TO_DEVICE). */
noinline int cmd_overlap_to_device(struct gdt_ctx *c, unsigned long arg)
{
	int rc = overlap(c, 0, 128, DMA_TO_DEVICE, 0, 128, DMA_TO_DEVICE, 0);

	return rc ?: overlap(c, 0, 128, DMA_TO_DEVICE, 0, 128, DMA_FROM_DEVICE, 0);
}
