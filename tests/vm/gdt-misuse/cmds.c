// SPDX-License-Identifier: GPL-2.0
/*
 * gdt-misuse: the commands. Each performs its misuse exactly once with real
 * DMA-API calls, then puts things right so the guest goes on unharmed.
 * Above each: what the misuse is, the dma-debug check (kernel/dma/debug.c,
 * 6.1 and 6.12 wording) it corresponds to, and why it cannot hurt the guest
 * on x86 (DMA-coherent: syncs are no-ops unless swiotlb bounces, and this
 * device never bounces) under VT-d (dma-iommu) and without an IOMMU
 * (dma-direct). The edu never DMAs unless a command tells it to.
 *
 * Return value: 0 when the misuse was performed; -EIO when a mapping it
 * needs failed first (e.g. map_resource of the BAR without an IOMMU, whose
 * address is above the 28-bit mask), so nothing was misused.
 */
#define pr_fmt(fmt) "gdt-misuse: " fmt

#include <linux/kernel.h>
/* hex_asc (the map-rodata target) moved out of kernel.h into hex.h in 7.x. */
#if __has_include(<linux/hex.h>)
#include <linux/hex.h>
#endif
#include <linux/list.h>
#include <linux/slab.h>
#include <linux/sizes.h>

#include "gdt-misuse.h"

/*
 * Correct use, for the control: zero findings. Real edu DMA proves the
 * mappings work: RAM -> edu through a TO_DEVICE mapping, edu -> RAM through
 * a FROM_DEVICE one, an sg entry and a coherent buffer, each compared.
 */
noinline int cmd_control(struct gdt_ctx *c, unsigned long arg)
{
	struct page *pa = new_page(c), *pb = new_page(c);
	u8 *a, *b, *coh = NULL;
	dma_addr_t da, db, dp, dc, dr;
	struct gdt_sg s = {};
	int rc = -ENOMEM, i;

	if (!pa || !pb)
		goto out;
	a = page_address(pa);
	b = page_address(pb);
	for (i = 0; i < 64; i++)
		a[i] = 0xa0 + i;

	rc = -EIO;
	da = gdt_map_single(c, a, 64, DMA_TO_DEVICE, 0);
	if (gdt_failed(c, da))
		goto out;
	/* The CPU may touch a TO_DEVICE buffer between these two syncs. */
	GDT_SYNC(c, dma_sync_single_for_cpu, da, 64, DMA_TO_DEVICE);
	a[0] = 0x5a;
	GDT_SYNC(c, dma_sync_single_for_device, da, 64, DMA_TO_DEVICE);
	rc = gdt_edu_from_ram(c, da, 64);
	gdt_unmap_single(c, da, 64, DMA_TO_DEVICE, 0);
	if (rc)
		goto out;

	rc = -EIO;
	db = gdt_map_single(c, b, 64, DMA_FROM_DEVICE, 0);
	if (gdt_failed(c, db))
		goto out;
	GDT_SYNC(c, dma_sync_single_for_device, db, 64, DMA_FROM_DEVICE);
	rc = gdt_edu_to_ram(c, db, 64);
	GDT_SYNC(c, dma_sync_single_for_cpu, db, 64, DMA_FROM_DEVICE);
	gdt_unmap_single(c, db, 64, DMA_FROM_DEVICE, 0);
	if (!rc && memcmp(a, b, 64))
		rc = -EIO;
	pr_info("verify cmd=%s edu single %s\n", c->cmd, rc ? "FAILED" : "ok");
	if (rc)
		goto out;

	rc = -EIO;
	dp = gdt_map_page(c, pb, 128, 256, DMA_BIDIRECTIONAL);
	if (gdt_failed(c, dp))
		goto out;
	gdt_unmap_page(c, dp, 256, DMA_BIDIRECTIONAL);

	rc = gdt_sg_build(c, &s, 4, 4, 1);
	if (rc)
		goto out;
	rc = -EIO;
	if (gdt_map_sg(c, &s, 4, DMA_FROM_DEVICE) != 4)
		goto out;
	GDT_SYNC_SG(c, dma_sync_sg_for_device, &s, 4, DMA_FROM_DEVICE);
	rc = gdt_edu_to_ram(c, sg_dma_address(s.t.sgl), 64);
	GDT_SYNC_SG(c, dma_sync_sg_for_cpu, &s, 4, DMA_FROM_DEVICE);
	gdt_unmap_sg(c, &s, 4, DMA_FROM_DEVICE);
	if (!rc && memcmp(a, sg_virt(s.t.sgl), 64))
		rc = -EIO;
	pr_info("verify cmd=%s edu sg %s\n", c->cmd, rc ? "FAILED" : "ok");
	if (rc)
		goto out;

	rc = -EIO;
	coh = gdt_alloc_coherent(c, PAGE_SIZE, &dc);
	if (!coh)
		goto out;
	rc = gdt_edu_to_ram(c, dc, 64);
	if (!rc && memcmp(a, coh, 64))
		rc = -EIO;
	pr_info("verify cmd=%s edu coherent %s\n", c->cmd, rc ? "FAILED" : "ok");
	gdt_free_coherent(c, PAGE_SIZE, coh, dc);

	/* A peer's MMIO (here the edu's own BAR): only an IOMMU brings it
	 * under the 28-bit mask, so without one this part is left out. */
	if (!rc && c->g->translated) {
		dr = gdt_map_resource(c, pci_resource_start(c->g->pdev, 0),
				      PAGE_SIZE, DMA_BIDIRECTIONAL);
		if (gdt_failed(c, dr))
			rc = -EIO;
		else
			gdt_unmap_resource(c, dr, PAGE_SIZE, DMA_BIDIRECTIONAL);
	}
out:
	gdt_sg_free(&s);
	if (pa)
		__free_page(pa);
	if (pb)
		__free_page(pb);
	return rc;
}

/*
 * A real mapping failure: one page mapped with a length of 256 MiB + 4 KiB,
 * more than the whole 28-bit space. dma-iommu cannot allocate the IOVA
 * (alloc_iova_fast fails even after flushing its caches) and touches no
 * memory; dma-direct finds it not dma_capable and, with no swiotlb active
 * (a 1 GiB x86 guest has none), fails with a one-time "DMA addr ...
 * overflow" warning. Returns DMA_MAPPING_ERROR in both; the tracer counts
 * it as a mapping failure. 0 when the map failed as intended.
 */
noinline int cmd_map_fail(struct gdt_ctx *c, unsigned long arg)
{
	struct page *p = new_page(c);
	dma_addr_t a;
	int rc = 0;

	if (!p)
		return -ENOMEM;
	a = gdt_map_page(c, p, 0, SZ_256M + PAGE_SIZE, DMA_TO_DEVICE);
	if (!gdt_failed(c, a)) {
		pr_err("cmd=%s: the oversized map succeeded\n", c->cmd);
		gdt_unmap_page(c, a, SZ_256M + PAGE_SIZE, DMA_TO_DEVICE);
		rc = -EIO;
	}
	__free_page(p);
	return rc;
}

/*
 * A mapping of kernel text (64 bytes of dma_map_page_attrs itself) or
 * rodata (hex_asc, lib/hexdump.c), which /proc/iomem lists as "Kernel code"
 * and "Kernel rodata". dma-debug: "device driver maps memory from kernel
 * text or rodata [addr=...] [len=...]". TO_DEVICE: under VT-d the IOMMU maps
 * it read-only; the edu never reads it. Without an IOMMU the kernel's
 * physical address may lie above the mask (KASLR): then -EIO.
 */
static int map_kernel(struct gdt_ctx *c, const void *p, size_t len)
{
	dma_addr_t a = gdt_map_single(c, (void *)p, len, DMA_TO_DEVICE, 0);

	if (gdt_failed(c, a))
		return -EIO;
	gdt_unmap_single(c, a, len, DMA_TO_DEVICE, 0);
	return 0;
}

noinline int cmd_map_text(struct gdt_ctx *c, unsigned long arg)
{
	return map_kernel(c, (const void *)dma_map_page_attrs, 64);
}

noinline int cmd_map_rodata(struct gdt_ctx *c, unsigned long arg)
{
	return map_kernel(c, hex_asc, 16);
}

/*
 * A page freed while a FROM_DEVICE mapping still covers it, then unmapped
 * (CONFIG_IOMMU_DEBUG_PAGEALLOC's "DMA use-after-free"; dma-debug has no
 * such check). The edu never writes to it, and neither unmap path touches
 * the page's memory on a coherent device.
 */
noinline int cmd_free_mapped(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_MAPPED_PAGE(c, p, a,
			       gdt_map_page(c, p, 0, PAGE_SIZE, DMA_FROM_DEVICE), {
		pr_info("call cmd=%s n=%u fn=__free_page dev=%s addr=0x%llx size=%lu dir=%s phys=0x%llx\n",
			c->cmd, ++c->calls, dev_name(c->dev), (u64)a, PAGE_SIZE,
			gdt_dir(DMA_FROM_DEVICE), (u64)page_to_phys(p));
		__free_page(p);
		p = NULL; /* freed, still mapped: the misuse */
		gdt_unmap_page(c, a, PAGE_SIZE, DMA_FROM_DEVICE);
	});
}

/*
 * Correct use, at scale: dma_map_sg of an N-entry list (4 entries a page,
 * none mergeable, chained past 128 entries), then dma_unmap_sg. Prints the
 * exact entry count and byte total for tests of the tracer's sg accounting.
 */
noinline int cmd_sg_many(struct gdt_ctx *c, unsigned long n)
{
	struct gdt_sg s;
	int rc, m;

	if (n < 1 || n > 65536)
		return -EINVAL;
	rc = gdt_sg_build(c, &s, n, n, 4);
	if (rc)
		return rc;
	m = gdt_map_sg(c, &s, n, DMA_TO_DEVICE);
	pr_info("sg-many entries=%lu bytes=%llu mapped=%d pages=%u chained=%d\n",
		n, s.bytes, m, s.npages, n > SG_MAX_SINGLE_ALLOC);
	if (m > 0)
		gdt_unmap_sg(c, &s, n, DMA_TO_DEVICE);
	gdt_sg_free(&s);
	return m > 0 ? 0 : -EIO;
}

#define CMD(n, f, chk) { .name = n, .run = f, .check = chk }
const struct gdt_cmd gdt_cmds[] = {
	CMD("control", cmd_control, "none (correct use)"),
	CMD("double-unmap", cmd_double_unmap,
	    "device driver tries to free DMA memory it has not allocated"),
	CMD("unmap-size", cmd_unmap_size,
	    "device driver frees DMA memory with different size"),
	CMD("unmap-dir", cmd_unmap_dir,
	    "device driver frees DMA memory with different direction"),
	CMD("unmap-class-resource", cmd_unmap_class_resource,
	    "device driver frees DMA memory with wrong function (single/resource)"),
	CMD("unmap-class-page", cmd_unmap_class_page,
	    "device driver frees DMA memory with wrong function (resource/single)"),
	CMD("free-coherent-streaming", cmd_free_coherent_streaming,
	    "device driver frees DMA memory with wrong function (single/coherent)"),
	CMD("sg-unmap-nents", cmd_sg_unmap_nents,
	    "device driver frees DMA sg list with different entry count"),
	CMD("sync-after-unmap", cmd_sync_after_unmap,
	    "device driver tries to sync DMA memory it has not allocated"),
	CMD("sync-outside", cmd_sync_outside,
	    "device driver syncs DMA memory outside allocated range (printed as: tries to sync DMA memory it has not allocated)"),
	CMD("sync-dir-cpu", cmd_sync_dir_cpu,
	    "device driver syncs device read-only DMA memory for cpu"),
	CMD("sync-dir-device", cmd_sync_dir_device,
	    "device driver syncs device write-only DMA memory to device"),
	CMD("sync-sg-after-unmap", cmd_sync_sg_after_unmap,
	    "device driver tries to sync DMA memory it has not allocated (sg)"),
	CMD("sync-sg-count", cmd_sync_sg_count,
	    "device driver syncs DMA sg list count larger than map count"),
	CMD("overlap-first", cmd_overlap_first,
	    "cacheline tracking EEXIST, overlapping mappings aren't supported"),
	CMD("overlap-shared-line", cmd_overlap_shared_line,
	    "cacheline tracking EEXIST, overlapping mappings aren't supported"),
	CMD("overlap-later", cmd_overlap_later,
	    "overlapping mappings (not in the first cacheline: dma-debug misses it)"),
	CMD("overlap-bidir", cmd_overlap_bidir,
	    "overlapping mappings (not in the first cacheline: dma-debug misses it)"),
	CMD("overlap-skip-sync", cmd_overlap_skip_sync,
	    "none (DMA_ATTR_SKIP_CPU_SYNC exempts the overlap)"),
	CMD("overlap-to-device", cmd_overlap_to_device,
	    "none (the device only reads: TO_DEVICE is exempt)"),
	CMD("leak", cmd_leak,
	    "device driver has pending DMA allocations while released from device (at unbind)"),
	{ .name = "release-leaks", .run = cmd_release_leaks,
	  .check = "none (gives back what leak left)", .no_device = true },
	CMD("map-fail", cmd_map_fail, "none in dma-debug (DMA_MAPPING_ERROR returned)"),
	CMD("map-text", cmd_map_text,
	    "device driver maps memory from kernel text or rodata"),
	CMD("map-rodata", cmd_map_rodata,
	    "device driver maps memory from kernel text or rodata"),
	CMD("free-mapped", cmd_free_mapped,
	    "none in dma-debug (IOMMU_DEBUG_PAGEALLOC: DMA use-after-free)"),
	CMD("sg-many", cmd_sg_many, "none (correct use; arg: entry count)"),
	CMD("in-kprobe", cmd_in_kprobe,
	    "none (correct use inside a kprobe handler; arg: pairs, default 8)"),
#ifdef DMA_IOVA_USE_SWIOTLB /* the IOVA API (iova.c) */
	CMD("iova-control", cmd_iova_control,
	    "none (correct use of the IOVA API; VT-d, 6.17+)"),
	CMD("iova-link-outside", cmd_iova_link_outside,
	    "none in dma-debug (IOVA API: link past the state's allocation)"),
	CMD("iova-unlink-unlinked", cmd_iova_unlink_unlinked,
	    "none in dma-debug (IOVA API: unlink of unlinked space; the kernel WARNs)"),
	CMD("iova-sync-unlinked", cmd_iova_sync_unlinked,
	    "none in dma-debug (IOVA API: sync of unlinked space)"),
	CMD("iova-free-linked", cmd_iova_free_linked,
	    "none in dma-debug (IOVA API: free with links left)"),
	CMD("iova-double-free", cmd_iova_double_free,
	    "none in dma-debug (IOVA API: one state freed twice)"),
#endif
};
const size_t gdt_ncmds = ARRAY_SIZE(gdt_cmds);
