/// `Event::dev` was null or its name could not be read.
pub const NO_DEVICE: u16 = 1 << 0;
/// The DMA mapping is of MMIO/resource space (dma_map_resource, DMA_ATTR_MMIO).
pub const RESOURCE: u16 = 1 << 1;
/// A coherent allocation (dma_alloc*/dma_free*), not a streaming mapping.
pub const COHERENT: u16 = 1 << 2;
/// The scatterlist walk stopped before the list's end (`--sg-walk-max`,
/// a kernel limit, or an unreadable entry): `size` is a lower bound.
pub const SG_TRUNCATED: u16 = 1 << 3;
/// An IOMMU event attributed to the device of the DMA-API call that the
/// same task was in (dma_map_* -> iommu_map).
pub const VIA_DMA_API: u16 = 1 << 4;
/// An IOMMU event attributed through its domain (domain -> device learnt
/// from attach calls or from earlier DMA-API nesting), e.g. VFIO; for
/// invalidations also the kernel's own cache tag (6.10+).
pub const VIA_DOMAIN: u16 = 1 << 5;
/// A DMA-API record made by the fentry/fexit or kprobe/kretprobe hooks on
/// the DMA-API functions, not by a dma:* tracepoint.
pub const FROM_HOOK: u16 = 1 << 6;
/// A sync of a scatterlist (dma_sync_sg_*), not of a single range.
pub const SCATTERLIST: u16 = 1 << 7;
/// Made in interrupt context (hard interrupt, serving a softirq, or
/// NMI): `pid`/`tid` are whichever task was interrupted, not the
/// caller. Set only where the kernel's preempt count can be read
/// (`Config::preempt_count_ptr`).
pub const IN_INTERRUPT: u16 = 1 << 8;
/// A record of the IOVA API (dma_iova_link/unlink/destroy/sync/free):
/// `DMA_MAP` is a link, `DMA_UNMAP` an unlink (or a destroy, with
/// `IOVA_DESTROY`).
pub const IOVA: u16 = 1 << 9;
/// dma_iova_destroy(): the `DMA_UNMAP` ends every link in `[addr, addr +
/// size)`; the `IOVA_FREE` after it is the destroy's own free.
pub const IOVA_DESTROY: u16 = 1 << 10;
/// A link, unlink or sync past the end of its IOVA state's allocation
/// (offset + size > the size dma_iova_try_alloc got): it maps, unmaps or
/// syncs IOVA space the state does not own.
pub const IOVA_OUT_OF_RANGE: u16 = 1 << 11;
/// dma_alloc_noncontiguous() / dma_free_noncontiguous() (dma:dma_alloc_sgt,
/// dma_free_sgt, 6.18+): an allocation of pages mapped as one range.
pub const NONCONTIG: u16 = 1 << 12;
/// The IOVA state bounced part of a link through swiotlb
/// (DMA_IOVA_USE_SWIOTLB: an unaligned link on an untrusted device).
pub const IOVA_SWIOTLB: u16 = 1 << 13;
/// A record the loader made itself, not a program: a state read from sysfs
/// or an event from a kernel uevent (`kind::PCIE_LINK`, `kind::PCI_HOTPLUG`).
/// It goes where the programs' records go (live, files, replay).
pub const FROM_USERSPACE: u16 = 1 << 14;
