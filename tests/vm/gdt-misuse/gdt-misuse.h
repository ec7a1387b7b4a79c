/* SPDX-License-Identifier: GPL-2.0 */
/*
 * gdt-misuse: a PCI driver for qemu's edu device that misuses the DMA API on
 * command, so that gpudirect-trace's misuse checks can be proven against a
 * real misbehaving driver on production kernels (no CONFIG_DMA_API_DEBUG).
 *
 * Every DMA-API call goes through one of the wrappers below, which are
 * always inlined: the kernel stack of each call names the command's own
 * function (cmd_*), as a real driver's would. After the call, one line goes
 * to the kernel log:
 *
 *   gdt-misuse: call cmd=NAME n=I fn=FUNCTION dev=BDF addr=0x... size=N dir=DIR ...
 *
 * so tests can compare what the tracer saw with what was really called.
 */
#ifndef GDT_MISUSE_H
#define GDT_MISUSE_H

#include <linux/dma-mapping.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>

struct gdt_dev {
	struct pci_dev *pdev;
	void __iomem *bar;
	/* DMA goes through an IOMMU paging domain (VT-d) rather than direct. */
	bool translated;
	/*
	 * Buffers come from where the 28-bit mask reaches them: anywhere under
	 * an IOMMU; below 16 MiB (ZONE_DMA) without one, because a 1 GiB guest
	 * has no swiotlb to bounce through (x86 sets it up only above 4 GiB).
	 */
	gfp_t gfp;
};

/* One command's run: the device, its name for the log, the call counter. */
struct gdt_ctx {
	struct gdt_dev *g;
	struct device *dev;
	const char *cmd;
	unsigned int calls;
};

struct gdt_cmd {
	const char *name;
	int (*run)(struct gdt_ctx *c, unsigned long arg);
	/* The dma-debug check (kernel/dma/debug.c wording) it trips, or why none. */
	const char *check;
	/* Runs without a bound device (only release-leaks). */
	bool no_device;
};

extern const struct gdt_cmd gdt_cmds[];
extern const size_t gdt_ncmds;

/* Gives back what `leak` left outstanding; logs under c->cmd. */
void gdt_release_leaks(struct gdt_ctx *c);

/* The commands (cmds.c, unmap.c, sync.c); noinline so stacks name them. */
int cmd_control(struct gdt_ctx *c, unsigned long arg);
int cmd_map_fail(struct gdt_ctx *c, unsigned long arg);
int cmd_map_text(struct gdt_ctx *c, unsigned long arg);
int cmd_map_rodata(struct gdt_ctx *c, unsigned long arg);
int cmd_free_mapped(struct gdt_ctx *c, unsigned long arg);
int cmd_sg_many(struct gdt_ctx *c, unsigned long arg);
int cmd_double_unmap(struct gdt_ctx *c, unsigned long arg);
int cmd_unmap_size(struct gdt_ctx *c, unsigned long arg);
int cmd_unmap_dir(struct gdt_ctx *c, unsigned long arg);
int cmd_unmap_class_resource(struct gdt_ctx *c, unsigned long arg);
int cmd_unmap_class_page(struct gdt_ctx *c, unsigned long arg);
int cmd_free_coherent_streaming(struct gdt_ctx *c, unsigned long arg);
int cmd_sg_unmap_nents(struct gdt_ctx *c, unsigned long arg);
int cmd_leak(struct gdt_ctx *c, unsigned long arg);
int cmd_release_leaks(struct gdt_ctx *c, unsigned long arg);
int cmd_sync_after_unmap(struct gdt_ctx *c, unsigned long arg);
int cmd_sync_outside(struct gdt_ctx *c, unsigned long arg);
int cmd_sync_dir_cpu(struct gdt_ctx *c, unsigned long arg);
int cmd_sync_dir_device(struct gdt_ctx *c, unsigned long arg);
int cmd_sync_sg_after_unmap(struct gdt_ctx *c, unsigned long arg);
int cmd_sync_sg_count(struct gdt_ctx *c, unsigned long arg);
int cmd_overlap_first(struct gdt_ctx *c, unsigned long arg);
int cmd_overlap_shared_line(struct gdt_ctx *c, unsigned long arg);
int cmd_overlap_later(struct gdt_ctx *c, unsigned long arg);
int cmd_overlap_bidir(struct gdt_ctx *c, unsigned long arg);
int cmd_overlap_skip_sync(struct gdt_ctx *c, unsigned long arg);
int cmd_overlap_to_device(struct gdt_ctx *c, unsigned long arg);
int cmd_in_kprobe(struct gdt_ctx *c, unsigned long arg);
/* The IOVA API (iova.c: built where the headers have it, 6.17+). */
int cmd_iova_control(struct gdt_ctx *c, unsigned long arg);
int cmd_iova_link_outside(struct gdt_ctx *c, unsigned long arg);
int cmd_iova_unlink_unlinked(struct gdt_ctx *c, unsigned long arg);
int cmd_iova_sync_unlinked(struct gdt_ctx *c, unsigned long arg);
int cmd_iova_free_linked(struct gdt_ctx *c, unsigned long arg);
int cmd_iova_double_free(struct gdt_ctx *c, unsigned long arg);

/* A zeroed page where the device can reach it (see gdt_dev.gfp). */
static inline struct page *new_page(struct gdt_ctx *c)
{
	return alloc_page(c->g->gfp | __GFP_ZERO | __GFP_NOWARN);
}


/* Log one call; `extra` is printf-style and may be empty. */
__printf(6, 7) void gdt_call(struct gdt_ctx *c, const char *fn, dma_addr_t addr,
			     size_t size, enum dma_data_direction dir,
			     const char *extra, ...);
const char *gdt_dir(enum dma_data_direction dir);
/* The physical address behind a kernel virtual one (linear or vmalloc). */
phys_addr_t gdt_phys(const void *cpu);
/* 1 when the kernel will skip a sync call for this device (6.11+ dma_skip_sync). */
int gdt_sync_skipped(struct gdt_ctx *c);

/* The edu's DMA engine: copy `len` bytes between RAM at bus address `bus`
 * and the device's own buffer. */
int gdt_edu_to_ram(struct gdt_ctx *c, dma_addr_t bus, size_t len);
int gdt_edu_from_ram(struct gdt_ctx *c, dma_addr_t bus, size_t len);

static __always_inline bool gdt_failed(struct gdt_ctx *c, dma_addr_t a)
{
	return dma_mapping_error(c->dev, a);
}

#define GDT_ERR(c, a) (gdt_failed(c, a) ? " error=DMA_MAPPING_ERROR" : "")

static __always_inline dma_addr_t gdt_map_single(struct gdt_ctx *c, void *cpu,
						 size_t size,
						 enum dma_data_direction dir,
						 unsigned long attrs)
{
	dma_addr_t a = dma_map_single_attrs(c->dev, cpu, size, dir, attrs);

	gdt_call(c, "dma_map_single", a, size, dir, "phys=0x%llx attrs=0x%lx%s",
		 (u64)gdt_phys(cpu), attrs, GDT_ERR(c, a));
	return a;
}

static __always_inline void gdt_unmap_single(struct gdt_ctx *c, dma_addr_t a,
					     size_t size,
					     enum dma_data_direction dir,
					     unsigned long attrs)
{
	dma_unmap_single_attrs(c->dev, a, size, dir, attrs);
	gdt_call(c, "dma_unmap_single", a, size, dir, "attrs=0x%lx", attrs);
}

static __always_inline dma_addr_t gdt_map_page(struct gdt_ctx *c,
					       struct page *page, size_t off,
					       size_t size,
					       enum dma_data_direction dir)
{
	dma_addr_t a = dma_map_page(c->dev, page, off, size, dir);

	gdt_call(c, "dma_map_page", a, size, dir, "phys=0x%llx%s",
		 (u64)page_to_phys(page) + off, GDT_ERR(c, a));
	return a;
}

static __always_inline void gdt_unmap_page(struct gdt_ctx *c, dma_addr_t a,
					   size_t size,
					   enum dma_data_direction dir)
{
	dma_unmap_page(c->dev, a, size, dir);
	gdt_call(c, "dma_unmap_page", a, size, dir, "%s", "");
}

static __always_inline dma_addr_t gdt_map_resource(struct gdt_ctx *c,
						   phys_addr_t phys, size_t size,
						   enum dma_data_direction dir)
{
	dma_addr_t a = dma_map_resource(c->dev, phys, size, dir, 0);

	gdt_call(c, "dma_map_resource", a, size, dir, "phys=0x%llx%s",
		 (u64)phys, GDT_ERR(c, a));
	return a;
}

static __always_inline void gdt_unmap_resource(struct gdt_ctx *c, dma_addr_t a,
					       size_t size,
					       enum dma_data_direction dir)
{
	dma_unmap_resource(c->dev, a, size, dir, 0);
	gdt_call(c, "dma_unmap_resource", a, size, dir, "%s", "");
}

static __always_inline void *gdt_alloc_coherent(struct gdt_ctx *c, size_t size,
						dma_addr_t *a)
{
	void *cpu = dma_alloc_coherent(c->dev, size, a, GFP_KERNEL);

	if (!cpu)
		*a = DMA_MAPPING_ERROR;
	gdt_call(c, "dma_alloc_coherent", *a, size, DMA_BIDIRECTIONAL,
		 "phys=0x%llx%s", cpu ? (u64)gdt_phys(cpu) : 0ULL,
		 cpu ? "" : " error=NULL");
	return cpu;
}

static __always_inline void gdt_free_coherent(struct gdt_ctx *c, size_t size,
					      void *cpu, dma_addr_t a)
{
	phys_addr_t phys = gdt_phys(cpu); /* before: a vmap()ed buffer goes */

	dma_free_coherent(c->dev, size, cpu, a);
	gdt_call(c, "dma_free_coherent", a, size, DMA_BIDIRECTIONAL,
		 "phys=0x%llx", (u64)phys);
}

#define GDT_SYNC(c, fn, a, size, dir)                                        \
	do {                                                                 \
		fn((c)->dev, a, size, dir);                                  \
		gdt_call(c, #fn, a, size, dir, "kernel_skips=%d",            \
			 gdt_sync_skipped(c));                               \
	} while (0)

/* A scatterlist over pages of its own: `alloc` entries, the first `fill`
 * of them set, `per_page` to a page (see gdt_sg_build). */
struct gdt_sg {
	struct sg_table t;
	struct page **pages;
	unsigned int npages;
	unsigned int fill;
	u64 bytes;
};

int gdt_sg_build(struct gdt_ctx *c, struct gdt_sg *s, unsigned int alloc,
		 unsigned int fill, unsigned int per_page);
void gdt_sg_free(struct gdt_sg *s);

static __always_inline int gdt_map_sg(struct gdt_ctx *c, struct gdt_sg *s,
				      int nents, enum dma_data_direction dir)
{
	struct scatterlist *sg;
	u64 dma_bytes = 0;
	int i, m = dma_map_sg(c->dev, s->t.sgl, nents, dir);

	for_each_sg(s->t.sgl, sg, m, i)
		dma_bytes += sg_dma_len(sg);
	gdt_call(c, "dma_map_sg", m ? sg_dma_address(s->t.sgl) : DMA_MAPPING_ERROR,
		 s->bytes, dir, "nents=%d mapped=%d dma_bytes=%llu%s", nents, m,
		 dma_bytes, m ? "" : " error=0");
	return m;
}

static __always_inline void gdt_unmap_sg(struct gdt_ctx *c, struct gdt_sg *s,
					 int nents, enum dma_data_direction dir)
{
	dma_addr_t first = sg_dma_address(s->t.sgl);

	dma_unmap_sg(c->dev, s->t.sgl, nents, dir);
	gdt_call(c, "dma_unmap_sg", first, s->bytes, dir, "nents=%d", nents);
}

#define GDT_SYNC_SG(c, fn, s, nents, dir)                                    \
	do {                                                                 \
		fn((c)->dev, (s)->t.sgl, nents, dir);                        \
		gdt_call(c, #fn, sg_dma_address((s)->t.sgl), (s)->bytes, dir, \
			 "nents=%d kernel_skips=%d", nents,                  \
			 gdt_sync_skipped(c));                               \
	} while (0)

/*
 * The shapes most commands share. Macros, not functions: every DMA-API call
 * must stay in the cmd_* function's own code, since the tracer's checks look
 * for that function's frame in the kernel stack of the offending call (an
 * out-of-line helper adds a frame of its own, and a tail call into one drops
 * cmd_*'s). Each evaluates to the command's return value, with the
 * statements `...` (a block) run only when everything was mapped.
 *
 * GDT_MAPPED_PAGE(c, p, a, map, ...): `p` a fresh page, `a` what the
 * mapping call `map` (of p) returned. p is freed after, unless the
 * statements set it to NULL (having freed it some other way). 0; -ENOMEM
 * without a page; -EIO when the mapping failed (so nothing was misused).
 */
#define GDT_MAPPED_PAGE(c, p, a, map, ...)				\
	({								\
		struct page *p = new_page(c);				\
		int __rc = -ENOMEM;					\
									\
		if (p) {						\
			dma_addr_t a = (map);				\
									\
			__rc = gdt_failed(c, a) ? -EIO : 0;		\
			if (!__rc)					\
				__VA_ARGS__				\
			if (p)						\
				__free_page(p);				\
		}							\
		__rc;							\
	})

/* The usual case: the first `size` bytes of the page, by dma_map_single. */
#define GDT_MAPPED_SINGLE(c, a, size, dir, ...)				\
	GDT_MAPPED_PAGE(c, __gdt_p, a,					\
			gdt_map_single(c, page_address(__gdt_p), size, dir, 0), \
			__VA_ARGS__)

/*
 * GDT_MAPPED_SG(c, s, alloc, dir, ...): `s` 4 entries, one a page, in a
 * table of `alloc`, mapped for `dir`; freed after. 0; gdt_sg_build's
 * error; -EIO when the mapping failed or merged entries.
 */
#define GDT_MAPPED_SG(c, s, alloc, dir, ...)				\
	({								\
		struct gdt_sg s;					\
		int __rc = gdt_sg_build(c, &s, alloc, 4, 1);		\
									\
		if (!__rc) {						\
			__rc = gdt_map_sg(c, &s, 4, dir) == 4 ? 0 : -EIO; \
			if (!__rc)					\
				__VA_ARGS__				\
			gdt_sg_free(&s);				\
		}							\
		__rc;							\
	})

#endif
