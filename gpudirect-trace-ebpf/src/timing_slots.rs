//! The timing hooks' programs: one fentry + fexit + kprobe + kretprobe set
//! per slot (`slot!`), bound by the loader to the function it picks for the
//! slot, and the attach hooks that learn domain -> device. What they do on
//! entry and exit (per-task nesting state, latency histograms) is in
//! `timing`.

use aya_ebpf::{
    helpers::bpf_probe_read_kernel,
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
};
use gpudirect_trace_common::{level, op};

use crate::{
    emit::config,
    stats::kprobe_ran,
    timing::{enter, exit, learn_domain},
};

/// Learns domain -> device from `__iommu_attach_device(domain, dev)` /
/// `iommu_attach_device(domain, dev)`: how VFIO's domains get a device.
#[fentry]
pub fn attach_fentry(ctx: FEntryContext) -> i32 {
    // SAFETY: both functions take (struct iommu_domain *, struct device *).
    let (domain, dev): (u64, u64) = unsafe { (ctx.arg(0), ctx.arg(1)) };
    learn_domain(domain, dev);
    0
}

#[kprobe]
pub fn attach_kprobe(ctx: ProbeContext) -> i32 {
    kprobe_ran();
    let domain: u64 = ctx.arg(0).unwrap_or(0);
    let dev: u64 = ctx.arg(1).unwrap_or(0);
    learn_domain(domain, dev);
    0
}

/// Where a slot's function takes its device / domain / address.
const DEV0: u8 = 1; // arg 0 is struct device *
const DOMAIN0: u8 = 2; // arg 0 is struct iommu_domain *, arg 1 the iova
const NVDEV0: u8 = 3; // arg 0 is the NVIDIA driver's nv_dma_device_t *
const PCIDEV0: u8 = 4; // arg 0 is struct pci_dev *
const NONE: u8 = 0;

#[inline(always)]
fn args_of(shape: u8, a0: u64, a1: u64) -> (u64, u64, u64) {
    match shape {
        DEV0 => (a0, 0, 0),
        DOMAIN0 => (0, a0, a1),
        NVDEV0 => {
            let off = config().offsets.nv_dma_device_dev;
            if a0 == 0 || off == u32::MAX {
                return (0, 0, 0);
            }
            // SAFETY: bpf_probe_read_kernel tolerates any address.
            let dev = unsafe { bpf_probe_read_kernel((a0 + off as u64) as *const u64) };
            (dev.unwrap_or(0), 0, 0)
        }
        PCIDEV0 if a0 != 0 => (a0 + config().offsets.pci_dev_device as u64, 0, 0),
        _ => (0, 0, 0),
    }
}

/// One slot: fentry + fexit + kprobe + kretprobe programs for one function.
macro_rules! slot {
    ($entry:ident, $exit:ident, $kentry:ident, $kexit:ident, $lvl:expr, $op:expr, $shape:expr) => {
        #[fentry]
        pub fn $entry(ctx: FEntryContext) -> i32 {
            // SAFETY: every slot function has at least two arguments.
            let (a0, a1): (u64, u64) = if $shape == NONE {
                (0, 0)
            } else {
                unsafe { (ctx.arg(0), ctx.arg(1)) }
            };
            let (dev, domain, addr) = args_of($shape, a0, a1);
            enter($lvl, dev, domain, addr);
            0
        }

        #[fexit]
        pub fn $exit(_ctx: FExitContext) -> i32 {
            exit($lvl, $op);
            0
        }

        #[kprobe]
        pub fn $kentry(ctx: ProbeContext) -> i32 {
            kprobe_ran();
            let a0: u64 = ctx.arg(0).unwrap_or(0);
            let a1: u64 = ctx.arg(1).unwrap_or(0);
            let (dev, domain, addr) = args_of($shape, a0, a1);
            enter($lvl, dev, domain, addr);
            0
        }

        #[kretprobe]
        pub fn $kexit(_ctx: RetProbeContext) -> i32 {
            kprobe_ran();
            exit($lvl, $op);
            0
        }
    };
}

slot!(
    t_iommu_map_in,
    t_iommu_map_out,
    k_iommu_map_in,
    k_iommu_map_out,
    level::IOMMU,
    op::IOMMU_MAP,
    DOMAIN0
);
slot!(
    t_iommu_map2_in,
    t_iommu_map2_out,
    k_iommu_map2_in,
    k_iommu_map2_out,
    level::IOMMU,
    op::IOMMU_MAP,
    DOMAIN0
);
slot!(
    t_iommu_map_sg_in,
    t_iommu_map_sg_out,
    k_iommu_map_sg_in,
    k_iommu_map_sg_out,
    level::IOMMU,
    op::IOMMU_MAP,
    DOMAIN0
);
slot!(
    t_iommu_unmap_in,
    t_iommu_unmap_out,
    k_iommu_unmap_in,
    k_iommu_unmap_out,
    level::IOMMU,
    op::IOMMU_UNMAP,
    DOMAIN0
);
slot!(
    t_iommu_unmap2_in,
    t_iommu_unmap2_out,
    k_iommu_unmap2_in,
    k_iommu_unmap2_out,
    level::IOMMU,
    op::IOMMU_UNMAP,
    DOMAIN0
);
slot!(
    t_iotlb_sync_in,
    t_iotlb_sync_out,
    k_iotlb_sync_in,
    k_iotlb_sync_out,
    level::INNER,
    op::IOTLB_SYNC,
    NONE
);
slot!(
    t_fault_irq_in,
    t_fault_irq_out,
    k_fault_irq_in,
    k_fault_irq_out,
    level::IRQ,
    op::FAULT_HANDLER,
    NONE
);
slot!(
    t_swiotlb_in,
    t_swiotlb_out,
    k_swiotlb_in,
    k_swiotlb_out,
    level::INNER,
    op::SWIOTLB_MAP,
    DEV0
);

// The NVIDIA driver (kernel-open/nvidia/nv-dma.c, nv-p2p.c), attached by the
// loader through the module's BTF; kprobes work too where the kernel has them.
slot!(
    t_nv_map_sgt_in,
    t_nv_map_sgt_out,
    k_nv_map_sgt_in,
    k_nv_map_sgt_out,
    level::DRIVER,
    op::NV_DMA_MAP_SGT,
    NVDEV0
);
slot!(
    t_nv_map_alloc_in,
    t_nv_map_alloc_out,
    k_nv_map_alloc_in,
    k_nv_map_alloc_out,
    level::DRIVER,
    op::NV_DMA_MAP_ALLOC,
    NVDEV0
);
slot!(
    t_nv_unmap_alloc_in,
    t_nv_unmap_alloc_out,
    k_nv_unmap_alloc_in,
    k_nv_unmap_alloc_out,
    level::DRIVER,
    op::NV_DMA_UNMAP_ALLOC,
    NVDEV0
);
slot!(
    t_nv_map_peer_in,
    t_nv_map_peer_out,
    k_nv_map_peer_in,
    k_nv_map_peer_out,
    level::DRIVER,
    op::NV_DMA_MAP_PEER,
    NVDEV0
);
slot!(
    t_nv_unmap_peer_in,
    t_nv_unmap_peer_out,
    k_nv_unmap_peer_in,
    k_nv_unmap_peer_out,
    level::DRIVER,
    op::NV_DMA_UNMAP_PEER,
    NVDEV0
);
slot!(
    t_nv_map_mmio_in,
    t_nv_map_mmio_out,
    k_nv_map_mmio_in,
    k_nv_map_mmio_out,
    level::DRIVER,
    op::NV_DMA_MAP_MMIO,
    NVDEV0
);
slot!(
    t_p2p_get_in,
    t_p2p_get_out,
    k_p2p_get_in,
    k_p2p_get_out,
    level::DRIVER,
    op::P2P_GET_PAGES,
    NONE
);
slot!(
    t_p2p_put_in,
    t_p2p_put_out,
    k_p2p_put_in,
    k_p2p_put_out,
    level::DRIVER,
    op::P2P_PUT_PAGES,
    NONE
);
slot!(
    t_p2p_map_in,
    t_p2p_map_out,
    k_p2p_map_in,
    k_p2p_map_out,
    level::DRIVER,
    op::P2P_DMA_MAP_PAGES,
    PCIDEV0
);
slot!(
    t_p2p_unmap_in,
    t_p2p_unmap_out,
    k_p2p_unmap_in,
    k_p2p_unmap_out,
    level::DRIVER,
    op::P2P_DMA_UNMAP_PAGES,
    PCIDEV0
);
