//! The DMA-API hooks: timing on every kernel, and the source of the
//! DMA-API records where no dma:* tracepoint reports an operation (kernels
//! before 6.8: Debian 5.10/6.1, Ubuntu 22.04's 5.15, RHEL 9's 5.14), or
//! everywhere with `--dma-source hooks`.
//!
//! What each kernel really has, read from the BTF and kallsyms of Debian's
//! 5.10.0-32, 6.1.0-50 and 6.12.117 kernels and the host's 6.18, and from
//! kernel/dma/mapping.c of 5.14 (CentOS Stream 9), 5.16 and 6.x:
//!
//! | function | 5.10-5.15 | 5.16-6.10 | 6.11-6.17 | 6.18+ |
//! |---|---|---|---|---|
//! | dma_map_page_attrs | yes | yes | yes | wrapper of dma_map_phys |
//! | dma_map_phys | - | - | - | yes |
//! | __dma_map_sg_attrs (static) | - (RHEL 9: yes) | yes | yes | yes |
//! | dma_map_sg_attrs | int, 0 on error | wrapper, 0 on error | wrapper | wrapper |
//! | dma_map_sgtable | inline (calls dma_map_sg_attrs) | exported, calls __dma_map_sg_attrs | same | same |
//! | dma_map_resource | yes | yes | yes | wrapper of dma_map_phys (DMA_ATTR_MMIO) |
//! | dma_sync_single_for_cpu etc. | exported | exported | inline, calls __dma_sync_single_for_cpu when the device needs syncs | same |
//!
//! A static function can be inlined by another build: discovery takes the
//! first candidate the running kernel has (BTF or kallsyms), and
//! dma_map_sgtable is hooked only where __dma_map_sg_attrs is not there to
//! cover it (`unless`).

use gpudirect_trace_common::hook_ops;

use crate::catalog::TimingSpec;

/// A hook on one function of the IOVA API (include/linux/dma-mapping.h,
/// 6.17+): the block layer's NVMe path, RDMA ODP, HMM and VFIO dma-buf map
/// through it, and no dma:* tracepoint fires for it.
macro_rules! iova {
    ($name:literal, $slot:literal, $func:literal) => {
        TimingSpec {
            name: $name,
            slot: $slot,
            candidates: &[$func],
            available: "6.17+ (the IOVA API: block layer, RDMA ODP, HMM, VFIO dma-buf)",
            dma_ops: hook_ops::IOVA,
            layout: IOVA_STATE_LAYOUT,
            ..TimingSpec::BASE
        }
    };
}

pub const DMA_API_TIMING: &[TimingSpec] = &[
    TimingSpec {
        name: "time:dma_map",
        slot: "dma_map",
        candidates: &["dma_map_phys", "dma_map_page_attrs"],
        available: "dma_map_page_attrs 5.10-6.17 (a wrapper of dma_map_phys from 6.18); \
                    dma_map_phys 6.18+ (also dma_map_resource's path there)",
        programs: &[("dma_map_phys", "dma_map_phys")],
        dma_ops: hook_ops::MAP,
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:dma_unmap",
        slot: "dma_unmap",
        candidates: &["dma_unmap_phys", "dma_unmap_page_attrs"],
        available: "dma_unmap_page_attrs 5.10-6.17; dma_unmap_phys 6.18+",
        dma_ops: hook_ops::UNMAP,
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:dma_map_sg",
        slot: "dma_map_sg",
        candidates: &["__dma_map_sg_attrs", "dma_map_sg_attrs"],
        available: "__dma_map_sg_attrs 5.16+ and RHEL 9's 5.14 (static; dma_map_sg_attrs and \
                    dma_map_sgtable call it); dma_map_sg_attrs before (dma_map_sgtable is an \
                    inline wrapper of it there)",
        sg_walk: true,
        dma_ops: hook_ops::MAP_SG | hook_ops::MAP_SG_ERR,
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:dma_map_sgtable",
        slot: "dma_map_sgt",
        candidates: &["dma_map_sgtable"],
        available: "5.16+ (exported); hooked only where __dma_map_sg_attrs was inlined away",
        unless: &["__dma_map_sg_attrs"],
        sg_walk: true,
        dma_ops: hook_ops::MAP_SG | hook_ops::MAP_SG_ERR,
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:dma_unmap_sg",
        slot: "dma_unmap_sg",
        candidates: &["dma_unmap_sg_attrs"],
        available: "all (dma_unmap_sgtable is an inline wrapper)",
        sg_walk: true,
        dma_ops: hook_ops::UNMAP_SG,
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:dma_map_resource",
        slot: "dma_map_res",
        candidates: &["dma_map_resource"],
        available: "5.10-6.17 (from 6.18 a wrapper of dma_map_phys, which covers it)",
        unless: &["dma_map_phys"],
        dma_ops: hook_ops::RESOURCE,
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:dma_unmap_resource",
        slot: "dma_unmap_res",
        candidates: &["dma_unmap_resource"],
        available: "5.10-6.17 (from 6.18 a wrapper of dma_unmap_phys)",
        unless: &["dma_unmap_phys"],
        dma_ops: hook_ops::RESOURCE,
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:dma_alloc",
        slot: "dma_alloc",
        candidates: &["dma_alloc_attrs"],
        available: "all",
        dma_ops: hook_ops::COHERENT,
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:dma_free",
        slot: "dma_free",
        candidates: &["dma_free_attrs"],
        available: "all",
        dma_ops: hook_ops::COHERENT,
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:dma_sync_single_for_cpu",
        slot: "sync_cpu",
        candidates: &["__dma_sync_single_for_cpu", "dma_sync_single_for_cpu"],
        available: "dma_sync_single_for_cpu to 6.10; __dma_sync_single_for_cpu 6.11+ (the \
                    inline wrapper calls it only for devices that need syncs)",
        dma_ops: hook_ops::SYNC,
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:dma_sync_single_for_device",
        slot: "sync_dev",
        candidates: &["__dma_sync_single_for_device", "dma_sync_single_for_device"],
        available: "as dma_sync_single_for_cpu",
        dma_ops: hook_ops::SYNC,
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:dma_sync_sg_for_cpu",
        slot: "sync_sg_cpu",
        candidates: &["__dma_sync_sg_for_cpu", "dma_sync_sg_for_cpu"],
        available: "as dma_sync_single_for_cpu",
        sg_walk: true,
        dma_ops: hook_ops::SYNC,
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:dma_sync_sg_for_device",
        slot: "sync_sg_dev",
        candidates: &["__dma_sync_sg_for_device", "dma_sync_sg_for_device"],
        available: "as dma_sync_single_for_cpu",
        sg_walk: true,
        dma_ops: hook_ops::SYNC,
        ..TimingSpec::BASE
    },
    iova!(
        "time:dma_iova_try_alloc",
        "iova_alloc",
        "dma_iova_try_alloc"
    ),
    iova!("time:dma_iova_link", "iova_link", "dma_iova_link"),
    iova!("time:dma_iova_sync", "iova_sync", "dma_iova_sync"),
    iova!("time:dma_iova_unlink", "iova_unlink", "dma_iova_unlink"),
    iova!("time:dma_iova_destroy", "iova_destroy", "dma_iova_destroy"),
    iova!("time:dma_iova_free", "iova_free", "dma_iova_free"),
];

/// Exit hook on dma_need_unmap() (6.17+): where it says false, the block
/// layer skips the unmaps of the device's dma-direct mappings, so a map
/// without an unmap is no leak there (`kind::UNMAP_NOT_NEEDED`).
pub const NEED_UNMAP_LEARN: TimingSpec = TimingSpec {
    name: "learn:dma_need_unmap",
    slot: "need_unmap",
    candidates: &["dma_need_unmap"],
    available: "6.17+ (the block layer asks it before it skips unmaps of dma-direct mappings)",
    ..TimingSpec::BASE
};

/// `struct dma_iova_state`'s layout the IOVA hooks read (6.17 to 7.1:
/// `{ dma_addr_t addr; u64 __size; }`), checked in BTF before they attach.
pub const IOVA_STATE_LAYOUT: &[(&str, &str, u32)] = &[
    ("dma_iova_state", "addr", 0),
    ("dma_iova_state", "__size", 8),
];

/// A DMA-API operation and the tracepoints that report it: every group must
/// have one attached tracepoint for the tracepoints to be its source.
pub struct DmaOp {
    pub bit: u32,
    pub name: &'static str,
    pub tracepoints: &'static [&'static [&'static str]],
    /// The hooks are the better source where attached (the tracepoint
    /// misses cases), and the tracepoint program then stays silent.
    pub prefer_hook: bool,
}

pub const DMA_OPS: &[DmaOp] = &[
    DmaOp {
        bit: hook_ops::MAP,
        name: "map",
        tracepoints: &[&["dma:dma_map_page", "dma:dma_map_phys"]],
        prefer_hook: false,
    },
    DmaOp {
        bit: hook_ops::UNMAP,
        name: "unmap",
        tracepoints: &[&["dma:dma_unmap_page", "dma:dma_unmap_phys"]],
        prefer_hook: false,
    },
    DmaOp {
        bit: hook_ops::MAP_SG,
        name: "map_sg",
        tracepoints: &[&["dma:dma_map_sg"]],
        prefer_hook: false,
    },
    DmaOp {
        bit: hook_ops::MAP_SG_ERR,
        name: "map_sg_err",
        tracepoints: &[&["dma:dma_map_sg_err"]],
        // __dma_map_sg_attrs fires dma_map_sg_err only for unexpected error
        // codes (then returned as -EIO), not for -ENOMEM, -EINVAL, -EIO or
        // -EREMOTEIO: the hooks' return value sees every failure.
        prefer_hook: true,
    },
    DmaOp {
        bit: hook_ops::UNMAP_SG,
        name: "unmap_sg",
        tracepoints: &[&["dma:dma_unmap_sg"]],
        prefer_hook: false,
    },
    DmaOp {
        bit: hook_ops::RESOURCE,
        name: "resource",
        tracepoints: &[
            &["dma:dma_map_resource", "dma:dma_map_phys"],
            &["dma:dma_unmap_resource", "dma:dma_unmap_phys"],
        ],
        prefer_hook: false,
    },
    DmaOp {
        bit: hook_ops::COHERENT,
        name: "coherent",
        tracepoints: &[&["dma:dma_alloc"], &["dma:dma_free"]],
        prefer_hook: false,
    },
    DmaOp {
        bit: hook_ops::IOVA,
        name: "iova",
        // No tracepoint reports the IOVA API: the hooks are its only source.
        tracepoints: &[],
        prefer_hook: false,
    },
    DmaOp {
        bit: hook_ops::SYNC,
        name: "sync",
        tracepoints: &[
            &["dma:dma_sync_single_for_cpu"],
            &["dma:dma_sync_single_for_device"],
            &["dma:dma_sync_sg_for_cpu"],
            &["dma:dma_sync_sg_for_device"],
        ],
        prefer_hook: false,
    },
];

/// The name of a `hook_ops` bit.
pub fn dma_op_name(bit: u32) -> &'static str {
    DMA_OPS
        .iter()
        .find(|o| o.bit == bit)
        .map_or("?", |o| o.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hooked_operation_has_a_tracepoint_entry() {
        let all = DMA_OPS.iter().fold(0, |acc, o| acc | o.bit);
        assert_eq!(all, hook_ops::ALL);
        for spec in DMA_API_TIMING {
            assert_eq!(spec.dma_ops & !hook_ops::ALL, 0, "{}", spec.name);
            assert!(spec.dma_ops != 0, "{}", spec.name);
        }
        let names: Vec<_> = crate::families::tracepoints()
            .iter()
            .map(|p| p.name)
            .collect();
        for op in DMA_OPS {
            for group in op.tracepoints {
                for tp in *group {
                    assert!(names.contains(tp), "{tp} is not in the catalog");
                }
            }
        }
    }

    #[test]
    fn the_phys_variant_has_programs_of_its_own() {
        let map = &DMA_API_TIMING[0];
        assert_eq!(map.slot_for("dma_map_phys"), "dma_map_phys");
        assert_eq!(map.slot_for("dma_map_page_attrs"), "dma_map");
    }
}
