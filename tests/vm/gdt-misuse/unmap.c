// SPDX-License-Identifier: GPL-2.0
/*
 * gdt-misuse: unmaps and frees that do not match their map, and leaks
 * (see cmds.c for the conventions).
 */
#define pr_fmt(fmt) "gdt-misuse: " fmt

#include <linux/list.h>
#include <linux/slab.h>
#include <linux/version.h>

#include "gdt-misuse.h"

/*
 * Unmap twice. dma-debug: "device driver tries to free DMA memory it has not
 * allocated [device address=...] [size=...]". dma-iommu (intel since 5.11)
 * finds no PTE for the second and returns after a WARN_ON(!phys) in
 * iommu_dma_unmap_page, strict or lazy; only this driver maps in the edu's
 * domain (under the command mutex), so the IOVA cannot have been reused in
 * between. dma-direct has nothing to undo.
 */
noinline int cmd_double_unmap(struct gdt_ctx *c, unsigned long arg)
{
#if LINUX_VERSION_CODE < KERNEL_VERSION(5, 11, 0)
	/*
	 * Before 5.11 intel-iommu had its own DMA ops: intel_unmap frees the
	 * IOVA again without looking, two later maps then share it ("DMA PTE
	 * for vPFN ... already set", seen on 5.10.0-32). Not on such a kernel.
	 */
	if (c->g->translated) {
		pr_warn("cmd=%s refused: this kernel's intel-iommu would free the IOVA twice\n",
			c->cmd);
		return -EOPNOTSUPP;
	}
#endif
	return GDT_MAPPED_SINGLE(c, a, 256, DMA_TO_DEVICE, {
		gdt_unmap_single(c, a, 256, DMA_TO_DEVICE, 0);
		gdt_unmap_single(c, a, 256, DMA_TO_DEVICE, 0);
	});
}

/*
 * Unmap with another size (256 mapped, 128 unmapped). dma-debug: "device
 * driver frees DMA memory with different size [device address=...] [map
 * size=256 bytes] [unmap size=128 bytes]". Both sizes round to the same one
 * IOVA page at a page-aligned buffer, so the IOMMU state stays exact.
 */
noinline int cmd_unmap_size(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_MAPPED_SINGLE(c, a, 256, DMA_TO_DEVICE, {
		gdt_unmap_single(c, a, 128, DMA_TO_DEVICE, 0);
	});
}

/*
 * Unmap with another direction (TO_DEVICE mapped, FROM_DEVICE unmapped).
 * dma-debug: "device driver frees DMA memory with different direction
 * [device address=...] [size=...] [mapped with DMA_TO_DEVICE] [unmapped
 * with DMA_FROM_DEVICE]". The direction only steers cache maintenance.
 */
noinline int cmd_unmap_dir(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_MAPPED_SINGLE(c, a, 256, DMA_TO_DEVICE, {
		gdt_unmap_single(c, a, 256, DMA_FROM_DEVICE, 0);
	});
}

/*
 * dma_map_single, then dma_unmap_resource. dma-debug: "device driver frees
 * DMA memory with wrong function [device address=...] [size=...] [mapped as
 * single] [unmapped as resource]". (map_single then unmap_page would not do:
 * both are class "single" in 6.x dma-debug.) Both unmaps end in
 * __iommu_dma_unmap of the same range; dma-direct's unmap_resource is empty.
 */
noinline int cmd_unmap_class_resource(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_MAPPED_SINGLE(c, a, 256, DMA_TO_DEVICE, {
		gdt_unmap_resource(c, a, 256, DMA_TO_DEVICE);
	});
}

/*
 * dma_map_resource of MMIO (the edu's BAR0), then dma_unmap_page. dma-debug:
 * "... wrong function ... [mapped as resource] [unmapped as single]". Under
 * VT-d unmap_page finds the BAR's PTE, syncs nothing (coherent) and frees
 * the same IOVA. Without an IOMMU the BAR is above the mask: -EIO.
 */
noinline int cmd_unmap_class_page(struct gdt_ctx *c, unsigned long arg)
{
	dma_addr_t a = gdt_map_resource(c, pci_resource_start(c->g->pdev, 0),
					PAGE_SIZE, DMA_BIDIRECTIONAL);

	if (gdt_failed(c, a))
		return -EIO;
	gdt_unmap_page(c, a, PAGE_SIZE, DMA_BIDIRECTIONAL);
	return 0;
}

/*
 * A streaming mapping of a whole page, released with dma_free_coherent.
 * dma-debug: "... wrong function ... [mapped as single] [unmapped as
 * coherent]". Safe only because the mapping is exactly one page that this
 * driver got from alloc_page: both dma-iommu (__iommu_dma_free) and
 * dma-direct end in dma_free_contiguous -> __free_pages(page, 0) after
 * unmapping it, so the page is freed once, by the kernel. Do not copy.
 */
noinline int cmd_free_coherent_streaming(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_MAPPED_PAGE(c, p, a,
			       gdt_map_page(c, p, 0, PAGE_SIZE, DMA_BIDIRECTIONAL), {
		gdt_free_coherent(c, PAGE_SIZE, page_address(p), a);
		p = NULL; /* the kernel freed it */
	});
}

/*
 * dma_map_sg of 4 entries, dma_unmap_sg with 5. dma-debug: "device driver
 * frees DMA sg list with different entry count [map count=4] [unmap
 * count=5]". The table has a 5th, never-mapped entry whose dma_length is 0:
 * dma-iommu stops at it (same IOVA range as a correct unmap), dma-direct
 * unmaps address 0 length 0, a no-op. Fewer entries than mapped would leave
 * IOMMU PTEs behind and recycle their IOVA, so it is not done.
 */
noinline int cmd_sg_unmap_nents(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_MAPPED_SG(c, s, 5, DMA_TO_DEVICE, {
		gdt_unmap_sg(c, &s, 5, DMA_TO_DEVICE);
	});
}

/* What `leak` left outstanding, given back by release-leaks or unload. */
struct gdt_leak {
	struct list_head node;
	struct device *dev;
	bool coherent;
	void *cpu;
	struct page *page;
	dma_addr_t addr;
	size_t size;
	enum dma_data_direction dir;
};
static LIST_HEAD(gdt_leaks);

/*
 * One streaming mapping and one coherent buffer left outstanding; unbind the
 * driver next (echo BDF > /sys/bus/pci/drivers/gdt-misuse/unbind). dma-debug
 * at BUS_NOTIFY_UNBOUND_DRIVER: "device driver has pending DMA allocations
 * while released from device [count=2] One of leaked entries details: ...".
 * The pages stay allocated while mapped, and remove() turns bus mastering
 * off, so nothing can DMA into them.
 */
noinline int cmd_leak(struct gdt_ctx *c, unsigned long arg)
{
	struct gdt_leak *m = kzalloc(sizeof(*m), GFP_KERNEL);
	struct gdt_leak *k = kzalloc(sizeof(*k), GFP_KERNEL);
	int rc = -ENOMEM;

	if (!m || !k)
		goto fail;
	m->page = new_page(c);
	if (!m->page)
		goto fail;
	m->size = 512;
	m->dir = DMA_FROM_DEVICE;
	m->addr = gdt_map_single(c, page_address(m->page), m->size, m->dir, 0);
	if (gdt_failed(c, m->addr)) {
		__free_page(m->page);
		rc = -EIO;
		goto fail;
	}
	m->dev = get_device(c->dev);
	list_add_tail(&m->node, &gdt_leaks);

	k->coherent = true;
	k->size = PAGE_SIZE;
	k->dir = DMA_BIDIRECTIONAL;
	k->cpu = gdt_alloc_coherent(c, k->size, &k->addr);
	if (!k->cpu) {
		kfree(k);
		return -EIO;
	}
	k->dev = get_device(c->dev);
	list_add_tail(&k->node, &gdt_leaks);
	return 0;
fail:
	kfree(m);
	kfree(k);
	return rc;
}

/* Called with the command mutex held, also from module exit. */
void gdt_release_leaks(struct gdt_ctx *c)
{
	struct gdt_leak *l, *t;

	list_for_each_entry_safe(l, t, &gdt_leaks, node) {
		c->dev = l->dev; /* the device stays, whoever drives it now */
		if (l->coherent) {
			gdt_free_coherent(c, l->size, l->cpu, l->addr);
		} else {
			gdt_unmap_single(c, l->addr, l->size, l->dir, 0);
			__free_page(l->page);
		}
		put_device(l->dev);
		list_del(&l->node);
		kfree(l);
	}
}

noinline int cmd_release_leaks(struct gdt_ctx *c, unsigned long arg)
{
	gdt_release_leaks(c);
	return 0;
}
