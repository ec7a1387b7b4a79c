// SPDX-License-Identifier: GPL-2.0
/*
 * gdt-misuse: DMA-API calls made inside a kprobe handler, where the kernel
 * runs no other kprobe: how a tracer on kprobes loses a call in the field
 * (an interrupt handler's dma_unmap landing while the CPU is inside the
 * tracer's kprobe on dma_map). On 5.10 the NVMe completion did exactly that
 * to 2 of 16 unmaps (nvme-dma-hooks-vtd), with 0 missed reported. Here the
 * loss is made on purpose, exactly `arg` times, so that the tracer's count
 * of missed runs can be checked against it. Not a misuse: the calls are
 * correct, and fentry/fexit hooks see them all.
 */
#define pr_fmt(fmt) "gdt-misuse: " fmt

#include <linux/kprobes.h>

#include "gdt-misuse.h"

/* What the handler does, set before the probe is armed. */
static struct {
	struct gdt_ctx *c;
	void *buf;
	unsigned long n;
	int rc;
} nest;

/* The probed function: noinline so it exists to be probed. */
static noinline void gdt_nest_target(void)
{
	barrier();
}

static int nest_pre(struct kprobe *p, struct pt_regs *regs)
{
	unsigned long i;
	dma_addr_t a;

	for (i = 0; i < nest.n; i++) {
		a = gdt_map_single(nest.c, nest.buf, 64, DMA_TO_DEVICE, 0);
		if (gdt_failed(nest.c, a)) {
			nest.rc = -EIO;
			return 0;
		}
		gdt_unmap_single(nest.c, a, 64, DMA_TO_DEVICE, 0);
	}
	return 0;
}

/*
 * `arg` map/unmap pairs (default 8) of a 64-byte buffer inside a kprobe
 * handler on gdt_nest_target, then as many outside it (process context),
 * which every tracer must see.
 */
noinline int cmd_in_kprobe(struct gdt_ctx *c, unsigned long arg)
{
	struct kprobe kp = { .addr = (kprobe_opcode_t *)gdt_nest_target,
			     .pre_handler = nest_pre };
	struct page *pg = new_page(c);
	unsigned long i;
	dma_addr_t a;
	int rc;

	if (!pg)
		return -ENOMEM;
	nest.c = c;
	nest.buf = page_address(pg);
	nest.n = arg ? arg : 8;
	nest.rc = 0;
	rc = register_kprobe(&kp);
	if (rc) {
		pr_warn("register_kprobe: %d\n", rc);
		__free_page(pg);
		return rc;
	}
	gdt_nest_target();
	unregister_kprobe(&kp);
	pr_info("in-kprobe: %lu pairs inside the kprobe handler, rc=%d\n", nest.n, nest.rc);
	rc = nest.rc;
	for (i = 0; !rc && i < nest.n; i++) {
		a = gdt_map_single(c, nest.buf, 64, DMA_TO_DEVICE, 0);
		if (gdt_failed(c, a)) {
			rc = -EIO;
			break;
		}
		gdt_unmap_single(c, a, 64, DMA_TO_DEVICE, 0);
	}
	__free_page(pg);
	return rc;
}
