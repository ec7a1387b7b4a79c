// SPDX-License-Identifier: GPL-2.0
/*
 * gdt-misuse: the PCI driver half. It binds qemu's edu device (1234:11e8),
 * sets the edu's 28-bit DMA mask, and runs one command per write to
 * /sys/kernel/debug/gdt-misuse/run, e.g.
 *
 *   echo double-unmap > /sys/kernel/debug/gdt-misuse/run
 *   echo 'sg-many 4096' > /sys/kernel/debug/gdt-misuse/run
 *
 * /sys/kernel/debug/gdt-misuse/commands lists the commands with the
 * dma-debug check each one trips. The commands themselves are in cmds.c.
 * Test support only: never load this on a machine you care about.
 */
#define pr_fmt(fmt) "gdt-misuse: " fmt

#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/iommu.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/seq_file.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/vmalloc.h>

#include "gdt-misuse.h"

#define DRV_NAME "gdt-misuse"

/* qemu hw/misc/edu.c: registers in BAR0, the device's 4 KiB buffer at 0x40000. */
#define EDU_ID 0x00
#define EDU_DMA_SRC 0x80
#define EDU_DMA_DST 0x88
#define EDU_DMA_CNT 0x90
#define EDU_DMA_CMD 0x98
#define EDU_CMD_START 0x1
#define EDU_CMD_TO_RAM 0x2 /* direction bit: edu buffer -> RAM */
#define EDU_BUF 0x40000
#define EDU_DMA_BITS 28

static DEFINE_MUTEX(gdt_lock); /* one command at a time; guards gdt_the */
static struct gdt_dev *gdt_the;
static struct dentry *gdt_dir_dentry;

static bool force_sync;
module_param(force_sync, bool, 0444);
MODULE_PARM_DESC(force_sync,
		 "6.11+: clear the device's dma_skip_sync so sync calls reach the DMA "
		 "layer (stands in for a non-coherent or bounced device; default off)");

const char *gdt_dir(enum dma_data_direction dir)
{
	switch (dir) {
	case DMA_BIDIRECTIONAL:
		return "DMA_BIDIRECTIONAL";
	case DMA_TO_DEVICE:
		return "DMA_TO_DEVICE";
	case DMA_FROM_DEVICE:
		return "DMA_FROM_DEVICE";
	default:
		return "DMA_NONE";
	}
}

void gdt_call(struct gdt_ctx *c, const char *fn, dma_addr_t addr, size_t size,
	      enum dma_data_direction dir, const char *extra, ...)
{
	char more[128];
	va_list args;

	va_start(args, extra);
	vscnprintf(more, sizeof(more), extra, args);
	va_end(args);
	pr_info("call cmd=%s n=%u fn=%s dev=%s addr=0x%llx size=%zu dir=%s%s%s\n",
		c->cmd, ++c->calls, fn, dev_name(c->dev), (u64)addr, size,
		gdt_dir(dir), more[0] ? " " : "", more);
}

phys_addr_t gdt_phys(const void *cpu)
{
	/* dma-iommu hands out vmap()ed coherent buffers; the rest is linear. */
	if (is_vmalloc_addr(cpu))
		return page_to_phys(vmalloc_to_page(cpu)) + offset_in_page(cpu);
	return virt_to_phys((void *)cpu);
}

int gdt_sync_skipped(struct gdt_ctx *c)
{
#ifdef CONFIG_DMA_NEED_SYNC
	/*
	 * Since 6.11 dma_sync_*() are inlines that return at once when the
	 * device needs no syncs (coherent, no swiotlb): on x86 under VT-d and
	 * without an IOMMU alike. Those calls never reach the DMA layer, so no
	 * tracer (nor dma:dma_sync_* tracepoint) can see them.
	 */
	return !dma_dev_need_sync(c->dev);
#else
	return 0;
#endif
}

static int edu_dma(struct gdt_ctx *c, dma_addr_t bus, size_t len, bool to_ram)
{
	void __iomem *bar = c->g->bar;
	int i;

	/* qemu aborts on a range outside its buffer, and 7.2 refuses 4096. */
	if (len == 0 || len > 2048)
		return -EINVAL;
	writeq(to_ram ? EDU_BUF : bus, bar + EDU_DMA_SRC);
	writeq(to_ram ? bus : EDU_BUF, bar + EDU_DMA_DST);
	writeq(len, bar + EDU_DMA_CNT);
	writeq(EDU_CMD_START | (to_ram ? EDU_CMD_TO_RAM : 0), bar + EDU_DMA_CMD);
	/* The edu finishes on a 100 ms virtual-time timer; TCG can be slow. */
	for (i = 0; i < 1000; i++) {
		if (!(readq(bar + EDU_DMA_CMD) & EDU_CMD_START)) {
			pr_info("edu cmd=%s dma %s bus=0x%llx len=%zu done\n",
				c->cmd, to_ram ? "to-ram" : "from-ram", (u64)bus,
				len);
			return 0;
		}
		msleep(10);
	}
	pr_err("edu cmd=%s dma bus=0x%llx len=%zu timed out\n", c->cmd, (u64)bus,
	       len);
	return -ETIMEDOUT;
}

int gdt_edu_to_ram(struct gdt_ctx *c, dma_addr_t bus, size_t len)
{
	return edu_dma(c, bus, len, true);
}

int gdt_edu_from_ram(struct gdt_ctx *c, dma_addr_t bus, size_t len)
{
	return edu_dma(c, bus, len, false);
}

/*
 * Entry i lies in page i / per_page, in its own 1/per_page slice, at offset
 * 64 into it, with a length of 256 + 64 * (i % 8) bytes. No entry starts or
 * ends on a page boundary, so neither dma-direct nor dma-iommu merges two
 * entries (__finalise_sg only joins segments that do): mapped == nents and
 * the byte total is exact. sg_alloc_table chains past one page of entries
 * (SG_MAX_SINGLE_ALLOC, 128 on x86-64).
 */
int gdt_sg_build(struct gdt_ctx *c, struct gdt_sg *s, unsigned int alloc,
		 unsigned int fill, unsigned int per_page)
{
	struct scatterlist *sg;
	unsigned int i, slice = PAGE_SIZE / per_page;
	int rc;

	memset(s, 0, sizeof(*s));
	if (!fill || fill > alloc || slice < 64 + 256 + 64 * 7)
		return -EINVAL;
	s->npages = DIV_ROUND_UP(fill, per_page);
	s->pages = kvcalloc(s->npages, sizeof(*s->pages), GFP_KERNEL);
	if (!s->pages)
		return -ENOMEM;
	for (i = 0; i < s->npages; i++) {
		s->pages[i] = alloc_page(c->g->gfp | __GFP_ZERO | __GFP_NOWARN);
		if (!s->pages[i]) {
			gdt_sg_free(s);
			return -ENOMEM;
		}
	}
	rc = sg_alloc_table(&s->t, alloc, GFP_KERNEL);
	if (rc) {
		gdt_sg_free(s);
		return rc;
	}
	s->fill = fill;
	for_each_sg(s->t.sgl, sg, fill, i) {
		unsigned int len = 256 + 64 * (i % 8);

		sg_set_page(sg, s->pages[i / per_page], len,
			    (i % per_page) * slice + 64);
		s->bytes += len;
	}
	return 0;
}

void gdt_sg_free(struct gdt_sg *s)
{
	unsigned int i;

	if (s->t.sgl)
		sg_free_table(&s->t);
	for (i = 0; s->pages && i < s->npages; i++)
		if (s->pages[i])
			__free_page(s->pages[i]);
	kvfree(s->pages);
	memset(s, 0, sizeof(*s));
}

static const struct gdt_cmd *find_cmd(const char *name)
{
	size_t i;

	for (i = 0; i < gdt_ncmds; i++)
		if (!strcmp(gdt_cmds[i].name, name))
			return &gdt_cmds[i];
	return NULL;
}

/* "NAME" or "NAME ARG": runs the command; the write fails with its error. */
static ssize_t run_write(struct file *f, const char __user *ubuf, size_t len,
			 loff_t *ppos)
{
	char buf[64], *name, *argp;
	const struct gdt_cmd *cmd;
	unsigned long arg = 0;
	struct gdt_ctx c = {};
	int rc;

	if (len >= sizeof(buf))
		return -EINVAL;
	if (copy_from_user(buf, ubuf, len))
		return -EFAULT;
	buf[len] = 0;
	argp = strim(buf);
	name = strsep(&argp, " \t");
	cmd = find_cmd(name);
	if (!cmd) {
		pr_warn("unknown command '%s' (see commands)\n", name);
		return -EINVAL;
	}
	if (argp && kstrtoul(skip_spaces(argp), 0, &arg))
		return -EINVAL;

	mutex_lock(&gdt_lock);
	if (!gdt_the && !cmd->no_device) {
		rc = -ENODEV;
		goto out;
	}
	c.g = gdt_the;
	c.dev = gdt_the ? &gdt_the->pdev->dev : NULL;
	c.cmd = cmd->name;
	pr_info("begin cmd=%s arg=%lu\n", cmd->name, arg);
	rc = cmd->run(&c, arg);
	pr_info("end cmd=%s calls=%u rc=%d\n", cmd->name, c.calls, rc);
out:
	mutex_unlock(&gdt_lock);
	return rc < 0 ? rc : len;
}

static const struct file_operations run_fops = {
	.owner = THIS_MODULE,
	.write = run_write,
	.llseek = noop_llseek,
};

static int commands_show(struct seq_file *m, void *v)
{
	size_t i;

	for (i = 0; i < gdt_ncmds; i++)
		seq_printf(m, "%s\t%s\n", gdt_cmds[i].name, gdt_cmds[i].check);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(commands);

static int gdt_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct iommu_domain *dom;
	struct gdt_dev *g;
	u32 ident;
	int rc;

	mutex_lock(&gdt_lock);
	rc = gdt_the ? -EBUSY : 0; /* one device: commands have no target argument */
	mutex_unlock(&gdt_lock);
	if (rc)
		return rc;
	g = kzalloc(sizeof(*g), GFP_KERNEL);
	if (!g)
		return -ENOMEM;
	g->pdev = pdev;
	rc = pci_enable_device(pdev);
	if (rc)
		goto free;
	rc = pci_request_region(pdev, 0, DRV_NAME);
	if (rc)
		goto disable;
	g->bar = pci_iomap(pdev, 0, 0);
	if (!g->bar) {
		rc = -ENOMEM;
		goto release;
	}
	ident = readl(g->bar + EDU_ID);
	if ((ident & 0xff) != 0xed) {
		dev_err(&pdev->dev, "not an edu device (id 0x%08x)\n", ident);
		rc = -ENODEV;
		goto unmap;
	}
	/* The edu masks every DMA address to 28 bits (its dma_mask property). */
	rc = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(EDU_DMA_BITS));
	if (rc)
		goto unmap;
	pci_set_master(pdev);
	dom = iommu_get_domain_for_dev(&pdev->dev);
	g->translated = dom && (dom->type & __IOMMU_DOMAIN_PAGING);
	g->gfp = GFP_KERNEL | (g->translated ? 0 : GFP_DMA);
#ifdef CONFIG_DMA_NEED_SYNC
	if (force_sync) {
#ifdef GDT_DEV_FLAG_ACCESSORS
		/* 7.x moved the bit into dev->flags, behind accessors. */
		dev_clear_dma_skip_sync(&pdev->dev);
#else
		pdev->dev.dma_skip_sync = false;
#endif
	}
#endif
	pci_set_drvdata(pdev, g);
	mutex_lock(&gdt_lock);
	gdt_the = g;
	mutex_unlock(&gdt_lock);
	pr_info("probe dev=%s id=0x%08x mask_bits=%d iommu=%s buffers=%s force_sync=%d\n",
		pci_name(pdev), ident, EDU_DMA_BITS,
		g->translated ? "translated" : "direct",
		g->translated ? "normal" : "zone-dma", force_sync);
	return 0;
unmap:
	pci_iounmap(pdev, g->bar);
release:
	pci_release_region(pdev, 0);
disable:
	pci_disable_device(pdev);
free:
	kfree(g);
	return rc;
}

/*
 * Unbinding leaves whatever `leak` mapped outstanding (that is the point:
 * dma-debug reports it at BUS_NOTIFY_UNBOUND_DRIVER, after this returns);
 * release-leaks or module unload give it back later.
 */
static void gdt_remove(struct pci_dev *pdev)
{
	struct gdt_dev *g = pci_get_drvdata(pdev);

	mutex_lock(&gdt_lock);
	gdt_the = NULL;
	mutex_unlock(&gdt_lock);
	pci_clear_master(pdev);
	pci_iounmap(pdev, g->bar);
	pci_release_region(pdev, 0);
	pci_disable_device(pdev);
	kfree(g);
	pr_info("remove dev=%s\n", pci_name(pdev));
}

static const struct pci_device_id gdt_ids[] = {
	{ PCI_DEVICE(0x1234, 0x11e8) },
	{}
};
MODULE_DEVICE_TABLE(pci, gdt_ids);

static struct pci_driver gdt_driver = {
	.name = DRV_NAME,
	.id_table = gdt_ids,
	.probe = gdt_probe,
	.remove = gdt_remove,
};

static int __init gdt_init(void)
{
	int rc;

	gdt_dir_dentry = debugfs_create_dir(DRV_NAME, NULL);
	debugfs_create_file("run", 0200, gdt_dir_dentry, NULL, &run_fops);
	debugfs_create_file("commands", 0400, gdt_dir_dentry, NULL,
			    &commands_fops);
	rc = pci_register_driver(&gdt_driver);
	if (rc)
		debugfs_remove_recursive(gdt_dir_dentry);
	return rc;
}

static void __exit gdt_exit(void)
{
	struct gdt_ctx c = { .cmd = "module-exit" };

	debugfs_remove_recursive(gdt_dir_dentry);
	pci_unregister_driver(&gdt_driver);
	mutex_lock(&gdt_lock);
	gdt_release_leaks(&c);
	mutex_unlock(&gdt_lock);
}

module_init(gdt_init);
module_exit(gdt_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("gpudirect-trace test driver: DMA-API misuse on command (edu device)");
