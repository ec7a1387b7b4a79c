// SPDX-License-Identifier: GPL-2.0
/*
 * gdt-misuse: the IOVA API (include/linux/dma-mapping.h, 6.17+). Built only
 * where the headers have it (DMA_IOVA_USE_SWIOTLB is defined with
 * struct dma_iova_state); elsewhere the commands are absent from the table.
 * dma-debug has no checks for this API; what each command breaks is the
 * rule the API's kernel-doc states. Under VT-d only: without an IOMMU
 * dma_iova_try_alloc() declines, and the commands return -EOPNOTSUPP.
 *
 * Each misuse is made once, with real calls, on the edu's own DMA domain
 * (its IOMMU group holds no other device), then put right so that the guest
 * and later commands go on unharmed.
 */
#define pr_fmt(fmt) "gdt-misuse: " fmt

#include <linux/iommu.h>
#include <linux/sizes.h>

#include "gdt-misuse.h"

#ifdef DMA_IOVA_USE_SWIOTLB

static __always_inline bool gdt_iova_alloc(struct gdt_ctx *c, struct dma_iova_state *st,
			   size_t size)
{
	bool ok = dma_iova_try_alloc(c->dev, st, 0, size);

	gdt_call(c, "dma_iova_try_alloc", ok ? st->addr : 0, size,
		 DMA_BIDIRECTIONAL, "ok=%d", ok);
	return ok;
}

static __always_inline int gdt_iova_link(struct gdt_ctx *c, struct dma_iova_state *st,
			 struct page *p, size_t off, size_t size,
			 enum dma_data_direction dir)
{
	int rc = dma_iova_link(c->dev, st, page_to_phys(p), off, size, dir, 0);

	gdt_call(c, "dma_iova_link", st->addr + off, size, dir,
		 "offset=%zu phys=0x%llx rc=%d", off, (u64)page_to_phys(p), rc);
	return rc;
}

static __always_inline void gdt_iova_unlink(struct gdt_ctx *c, struct dma_iova_state *st,
			    size_t off, size_t size,
			    enum dma_data_direction dir)
{
	dma_iova_unlink(c->dev, st, off, size, dir, 0);
	gdt_call(c, "dma_iova_unlink", st->addr + off, size, dir, "offset=%zu",
		 off);
}

static __always_inline int gdt_iova_sync(struct gdt_ctx *c, struct dma_iova_state *st,
			 size_t off, size_t size)
{
	int rc = dma_iova_sync(c->dev, st, off, size);

	gdt_call(c, "dma_iova_sync", st->addr + off, size, DMA_BIDIRECTIONAL,
		 "offset=%zu rc=%d", off, rc);
	return rc;
}

static __always_inline void gdt_iova_destroy(struct gdt_ctx *c, struct dma_iova_state *st,
			     size_t mapped, enum dma_data_direction dir)
{
	dma_iova_destroy(c->dev, st, mapped, dir, 0);
	gdt_call(c, "dma_iova_destroy", st->addr, mapped, dir, "%s", "");
}

static __always_inline void gdt_iova_free(struct gdt_ctx *c, struct dma_iova_state *st)
{
	dma_iova_free(c->dev, st);
	gdt_call(c, "dma_iova_free", st->addr, dma_iova_size(st),
		 DMA_BIDIRECTIONAL, "%s", "");
}

/* Pages to link, freed by gdt_iova_pages_free. */
static int gdt_iova_pages(struct gdt_ctx *c, struct page **p, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		p[i] = new_page(c);
		if (!p[i]) {
			while (i--)
				__free_page(p[i]);
			return -ENOMEM;
		}
	}
	return 0;
}

static void gdt_iova_pages_free(struct page **p, int n)
{
	while (n--)
		__free_page(p[n]);
}

/* The IOVA API needs dma-iommu: without an IOMMU nothing is misused. */
static int gdt_iova_start(struct gdt_ctx *c, struct dma_iova_state *st,
			  size_t size)
{
	if (!c->g->translated)
		return -EOPNOTSUPP;
	return gdt_iova_alloc(c, st, size) ? 0 : -EOPNOTSUPP;
}

/*
 * A transaction: IOVA space with p[0..n) linked into it page after page
 * from offset 0, the first `linked` of them; rc, the error of the link that
 * failed, else 0.
 */
struct gdt_iova {
	struct dma_iova_state st;
	struct page *p[4];
	int n, linked, rc;
};

/*
 * `size` bytes of IOVA space and n fresh pages (n <= 4) linked into it for
 * `dir`, up to the first link that fails. Non-zero, with nothing left,
 * when the space or a page could not be had. Inlined, as the wrappers
 * above, so that the calls stay in the command's own code.
 */
static __always_inline int gdt_iova_begin(struct gdt_ctx *c,
					  struct gdt_iova *t, size_t size,
					  int n, enum dma_data_direction dir)
{
	int rc = gdt_iova_start(c, &t->st, size);

	if (rc)
		return rc;
	rc = gdt_iova_pages(c, t->p, n);
	if (rc) {
		gdt_iova_free(c, &t->st);
		return rc;
	}
	t->n = n;
	t->rc = 0;
	for (t->linked = 0; t->linked < n; t->linked++) {
		t->rc = gdt_iova_link(c, &t->st, t->p[t->linked],
				      t->linked * PAGE_SIZE, PAGE_SIZE, dir);
		if (t->rc)
			break;
	}
	return 0;
}

/* Undoes gdt_iova_begin in one destroy; the link's error, else 0. */
static __always_inline int gdt_iova_end(struct gdt_ctx *c, struct gdt_iova *t,
					enum dma_data_direction dir)
{
	gdt_iova_destroy(c, &t->st, t->linked * PAGE_SIZE, dir);
	gdt_iova_pages_free(t->p, t->n);
	return t->rc;
}

/*
 * GDT_IOVA_ONE_PAGE(c, t, size, ...): a transaction `t` of `size` bytes with
 * one page linked at offset 0, TO_DEVICE; the statements (a block) run if
 * the link held, then gdt_iova_end. A macro for the reason given with
 * GDT_MAPPED_PAGE (gdt-misuse.h).
 */
#define GDT_IOVA_ONE_PAGE(c, t, size, ...)				\
	({								\
		struct gdt_iova t;					\
		int __rc = gdt_iova_begin(c, &t, size, 1, DMA_TO_DEVICE); \
									\
		if (!__rc) {						\
			if (!t.rc)					\
				__VA_ARGS__				\
			__rc = gdt_iova_end(c, &t, DMA_TO_DEVICE);	\
		}							\
		__rc;							\
	})

/*
 * Correct use: a block-layer-style transaction (alloc, link four pages,
 * sync, edu DMA into the second page, destroy) and an ODP-style one (link
 * and sync page by page, unlink, free). Zero findings.
 */
noinline int cmd_iova_control(struct gdt_ctx *c, unsigned long arg)
{
	struct gdt_iova t;
	int rc, i;

	rc = gdt_iova_begin(c, &t, 4 * PAGE_SIZE, 4, DMA_FROM_DEVICE);
	if (rc)
		return rc;
	rc = t.rc;
	if (!rc)
		rc = gdt_iova_sync(c, &t.st, 0, 4 * PAGE_SIZE);
	if (!rc)
		rc = gdt_edu_to_ram(c, t.st.addr + PAGE_SIZE, 64);
	pr_info("verify cmd=%s edu iova %s\n", c->cmd, rc ? "FAILED" : "ok");
	gdt_iova_destroy(c, &t.st, t.linked * PAGE_SIZE, DMA_FROM_DEVICE);
	if (rc)
		goto out;

	rc = gdt_iova_start(c, &t.st, 2 * PAGE_SIZE);
	if (rc)
		goto out;
	for (i = 0; i < 2; i++) {
		rc = gdt_iova_link(c, &t.st, t.p[i], i * PAGE_SIZE, PAGE_SIZE,
				   DMA_TO_DEVICE);
		if (rc)
			break;
		rc = gdt_iova_sync(c, &t.st, i * PAGE_SIZE, PAGE_SIZE);
		if (rc) {
			i++;
			break;
		}
	}
	while (i--)
		gdt_iova_unlink(c, &t.st, i * PAGE_SIZE, PAGE_SIZE, DMA_TO_DEVICE);
	gdt_iova_free(c, &t.st);
out:
	gdt_iova_pages_free(t.p, t.n);
	return rc;
}

/*
 * A link past the end of the state's IOVA space: three pages allocated
 * and linked (the IOVA allocator rounds the space to four pages, so the
 * fourth is nobody else's), then a fourth link at offset 3 pages. The
 * kernel does not check it. One destroy of all four contiguous pages puts
 * it right.
 */
noinline int cmd_iova_link_outside(struct gdt_ctx *c, unsigned long arg)
{
	struct gdt_iova t;
	int rc = gdt_iova_begin(c, &t, 3 * PAGE_SIZE, 4, DMA_FROM_DEVICE);

	return rc ?: gdt_iova_end(c, &t, DMA_FROM_DEVICE);
}

/*
 * An unlink of IOVA space that was never linked: page 1 of a two-page
 * state of which only page 0 is linked. The kernel WARNs too
 * (dma-iommu.c: __iommu_dma_iova_unlink, unmapped != size) and unmaps
 * nothing.
 */
noinline int cmd_iova_unlink_unlinked(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_IOVA_ONE_PAGE(c, t, 2 * PAGE_SIZE, {
		gdt_iova_unlink(c, &t.st, PAGE_SIZE, PAGE_SIZE, DMA_TO_DEVICE);
	});
}

/* A sync of two pages of which one is linked. */
noinline int cmd_iova_sync_unlinked(struct gdt_ctx *c, unsigned long arg)
{
	return GDT_IOVA_ONE_PAGE(c, t, 2 * PAGE_SIZE, {
		gdt_iova_sync(c, &t.st, 0, 2 * PAGE_SIZE);
	});
}

/*
 * dma_iova_free with both pages still linked ("all dma_iova_link() calls
 * need to be undone first"). The IOMMU's page table then still maps the
 * freed IOVA space: unmapped here through the edu's own domain, which no
 * other device shares, before anything can allocate it again.
 */
noinline int cmd_iova_free_linked(struct gdt_ctx *c, unsigned long arg)
{
	struct iommu_domain *dom = iommu_get_domain_for_dev(c->dev);
	struct gdt_iova t;
	dma_addr_t base;
	int rc;

	if (!dom)
		return -EOPNOTSUPP;
	rc = gdt_iova_begin(c, &t, 2 * PAGE_SIZE, 2, DMA_TO_DEVICE);
	if (rc)
		return rc;
	base = t.st.addr;
	gdt_iova_free(c, &t.st);
	iommu_unmap(dom, base, t.linked * PAGE_SIZE);
	gdt_iova_pages_free(t.p, t.n);
	return t.rc;
}

/*
 * One state freed twice: a clean destroy, then dma_iova_free of the same
 * state. The second free puts the IOVA range into the allocator's cache a
 * second time; two allocations of that size, kept for good, take both
 * copies back out, so later commands never share IOVA space.
 */
noinline int cmd_iova_double_free(struct gdt_ctx *c, unsigned long arg)
{
	static struct dma_iova_state drained[2];
	struct gdt_iova t;
	int rc = gdt_iova_begin(c, &t, PAGE_SIZE, 1, DMA_TO_DEVICE);

	if (rc)
		return rc;
	gdt_iova_destroy(c, &t.st, t.linked * PAGE_SIZE, DMA_TO_DEVICE);
	gdt_iova_free(c, &t.st);
	/* Not logged as calls of the command: clean-up of the edu's IOVA space. */
	dma_iova_try_alloc(c->dev, &drained[0], 0, PAGE_SIZE);
	dma_iova_try_alloc(c->dev, &drained[1], 0, PAGE_SIZE);
	gdt_iova_pages_free(t.p, t.n);
	return t.rc;
}

#endif /* DMA_IOVA_USE_SWIOTLB */
