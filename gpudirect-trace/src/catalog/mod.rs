//! The probe catalog: every probe point gpudirect-trace knows, as data.
//!
//! Like kunai's per-probe kernel ranges, each entry says which kernels or
//! drivers have the probe point and what covers for it where it is missing.
//! At start-up the loader checks each entry against the running kernel
//! (BTF, tracefs) and attaches what exists; `gpudirect-trace probes` prints
//! the outcome. Argument positions are those of the kernel's TP_PROTO; the
//! programs read only arguments that every listed kernel has (see
//! `args_read`), and the loader compares that with the prototype in BTF.

use serde::Serialize;

mod dma_api;
mod inval;

pub use dma_api::{dma_op_name, DMA_API_TIMING, DMA_OPS, NEED_UNMAP_LEARN};
pub use inval::{INTEL_TRACEPOINTS, INVAL_TIMING};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeKind {
    /// BPF_PROG_TYPE_RAW_TRACEPOINT on a kernel or module tracepoint.
    RawTracepoint,
}

impl ProbeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::RawTracepoint => "raw_tracepoint",
        }
    }
}

/// Where a probe point lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    Kernel,
    /// A kernel module that must be loaded (e.g. "nvidia").
    Module(&'static str),
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct ProbeSpec {
    /// `group:event`, as in tracefs.
    pub name: &'static str,
    pub kind: ProbeKind,
    /// The eBPF program attached there.
    pub program: &'static str,
    pub provider: Provider,
    /// How many TP_PROTO arguments the program reads (highest index + 1).
    pub args_read: usize,
    /// Kernels or drivers that have it, as documentation.
    pub available: &'static str,
    /// What covers the same events where this one is missing.
    pub fallback: &'static str,
    /// High rate: counted in maps, streamed only when not aggregate-only.
    pub hot: bool,
}

impl ProbeSpec {
    pub fn group(&self) -> &'static str {
        self.name.split_once(':').map_or("", |(g, _)| g)
    }

    pub fn event(&self) -> &'static str {
        self.name.split_once(':').map_or(self.name, |(_, e)| e)
    }
}

const fn tp(
    name: &'static str,
    program: &'static str,
    args_read: usize,
    available: &'static str,
    fallback: &'static str,
    hot: bool,
) -> ProbeSpec {
    ProbeSpec {
        name,
        kind: ProbeKind::RawTracepoint,
        program,
        provider: Provider::Kernel,
        args_read,
        available,
        fallback,
        hot,
    }
}

/// Every probe point, in display order.
pub const CATALOG: &[ProbeSpec] = &[
    tp("iommu:map", "iommu_map", 3, "3.15+", "", true),
    tp("iommu:unmap", "iommu_unmap", 3, "3.15+", "", true),
    tp(
        "iommu:io_page_fault",
        "iommu_io_page_fault",
        3,
        "3.15+; fired by AMD-Vi, ARM SMMU and others through report_iommu_fault (not by Intel VT-d)",
        "kernel log (/dev/kmsg) for VT-d faults",
        false,
    ),
    tp("iommu:add_device_to_group", "iommu_add_device_to_group", 2, "3.15+", "", false),
    tp(
        "iommu:remove_device_from_group",
        "iommu_remove_device_from_group",
        2,
        "3.15+",
        "",
        false,
    ),
    tp(
        "iommu:attach_device_to_domain",
        "iommu_attach_device_to_domain",
        1,
        "3.15+",
        "",
        false,
    ),
    tp(
        "iommu:detach_device_from_domain",
        "iommu_detach_device_from_domain",
        1,
        "3.15 to 5.x (removed when detach became attach to the blocking domain)",
        "iommu:attach_device_to_domain",
        false,
    ),
    tp(
        "dma:dma_map_page",
        "dma_map",
        6,
        "6.8 to 6.17",
        "dma:dma_map_phys (6.18+); the time:dma_map hook (every kernel)",
        true,
    ),
    tp("dma:dma_map_phys", "dma_map", 6, "6.18+", "dma:dma_map_page (6.8 to 6.17); the time:dma_map hook", true),
    tp("dma:dma_map_resource", "dma_map_resource", 6, "6.8 to 6.17", "dma:dma_map_phys with DMA_ATTR_MMIO (6.18+); the time:dma_map_resource hook", true),
    tp("dma:dma_unmap_page", "dma_unmap", 5, "6.8 to 6.17", "dma:dma_unmap_phys (6.18+); the time:dma_unmap hook", true),
    tp("dma:dma_unmap_phys", "dma_unmap", 5, "6.18+", "dma:dma_unmap_page (6.8 to 6.17); the time:dma_unmap hook", true),
    tp("dma:dma_unmap_resource", "dma_unmap_resource", 5, "6.8 to 6.17", "dma:dma_unmap_phys (6.18+); the time:dma_unmap_resource hook", true),
    tp("dma:dma_map_sg", "dma_map_sg", 6, "6.8+", "the time:dma_map_sg hook", true),
    tp("dma:dma_unmap_sg", "dma_unmap_sg", 5, "6.8+", "the time:dma_unmap_sg hook", true),
    tp("dma:dma_map_sg_err", "dma_map_sg_err", 5, "6.13+", "the time:dma_map_sg hook (return value)", false),
    tp("dma:dma_alloc", "dma_alloc", 4, "6.8+", "the time:dma_alloc hook", true),
    tp("dma:dma_alloc_pages", "dma_alloc", 4, "6.13+", "", true),
    tp(
        "dma:dma_alloc_sgt",
        "dma_alloc_sgt",
        3,
        "6.18+ (dma_alloc_noncontiguous)",
        "",
        true,
    ),
    tp(
        "dma:dma_alloc_sgt_err",
        "dma_alloc_sgt_err",
        4,
        "6.18+ (dma_alloc_noncontiguous that failed)",
        "",
        false,
    ),
    tp("dma:dma_free", "dma_free", 4, "6.8+", "the time:dma_free hook", true),
    tp("dma:dma_free_pages", "dma_free", 4, "6.13+", "", true),
    tp(
        "dma:dma_free_sgt",
        "dma_free_sgt",
        3,
        "6.18+ (dma_free_noncontiguous)",
        "",
        true,
    ),
    tp(
        "dma:dma_sync_single_for_cpu",
        "dma_sync_single_for_cpu",
        4,
        "6.8+",
        "the time:dma_sync hooks",
        true,
    ),
    tp(
        "dma:dma_sync_single_for_device",
        "dma_sync_single_for_device",
        4,
        "6.8+",
        "the time:dma_sync hooks",
        true,
    ),
    tp("dma:dma_sync_sg_for_cpu", "dma_sync_sg_for_cpu", 4, "6.8+", "the time:dma_sync hooks", true),
    tp(
        "dma:dma_sync_sg_for_device",
        "dma_sync_sg_for_device",
        4,
        "6.8+",
        "the time:dma_sync hooks",
        true,
    ),
    tp(
        "ras:aer_event",
        "ras_aer_event",
        3,
        "3.17+ with CONFIG_PCIEAER",
        "`AER:` lines in the kernel log",
        false,
    ),
    tp("swiotlb:swiotlb_bounced", "swiotlb_bounced", 3, "3.x+ (4 args before 5.18, 3 after)", "", true),
    INTEL_TRACEPOINTS[0],
    INTEL_TRACEPOINTS[1],
    INTEL_TRACEPOINTS[2],
    INTEL_TRACEPOINTS[3],
    ProbeSpec {
        name: "nvidia:nvidia_dev_xid",
        kind: ProbeKind::RawTracepoint,
        program: "nvidia_dev_xid",
        provider: Provider::Module("nvidia"),
        args_read: 3,
        available: "NVIDIA driver (open and proprietary kernel modules) with nv-tracepoint.h",
        fallback: "`NVRM: Xid` lines in the kernel log",
        hot: false,
    },
];

/// A timed kernel function: entry + exit hooks, fentry/fexit where the kernel
/// has BTF and the function tracer, else kprobe/kretprobe.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct TimingSpec {
    /// `time:<op>` as shown by `probes`.
    pub name: &'static str,
    /// Program base name in the eBPF object: `t_<slot>_in/out` (fentry/fexit),
    /// `k_<slot>_in/out` (kprobe/kretprobe).
    pub slot: &'static str,
    /// Functions that implement the operation, by preference; the first one
    /// this kernel has is used.
    pub candidates: &'static [&'static str],
    pub available: &'static str,
    /// The loadable module that has the functions (None: the kernel itself).
    /// fentry on a module function goes through the module's BTF.
    pub module: Option<&'static str>,
    /// Candidates whose signature needs programs of their own: (function,
    /// slot). The others use `slot`.
    pub programs: &'static [(&'static str, &'static str)],
    /// Not attached where one of these functions exists (it calls, or is
    /// called by, a hooked function that already covers the operation).
    pub unless: &'static [&'static str],
    /// The programs walk scatterlists: a `_nl` build without bpf_loop()
    /// exists for kernels before 5.17.
    pub sg_walk: bool,
    /// The DMA-API operations (`gpudirect_trace_common::hook_ops`) these
    /// hooks report when no dma:* tracepoint does; 0: timing only.
    pub dma_ops: u32,
    /// Candidates that belong to one IOMMU vendor's driver: (function,
    /// /sys/class/iommu unit-name prefix). Such a function is attached only
    /// where a unit of that vendor exists (x86 kernels build several
    /// drivers in; only one runs).
    pub units: &'static [(&'static str, &'static str)],
    /// Kernel structure members the programs read at fixed offsets:
    /// (struct, member, offset). Where BTF says otherwise, the hooks are
    /// not attached.
    pub layout: &'static [(&'static str, &'static str, u32)],
}

impl TimingSpec {
    /// A timing-only spec of the kernel's own functions (struct update base).
    pub const BASE: Self = Self {
        name: "",
        slot: "",
        candidates: &[],
        available: "",
        module: None,
        programs: &[],
        unless: &[],
        sg_walk: false,
        dma_ops: 0,
        units: &[],
        layout: &[],
    };

    /// The slot (program base name) for `func`.
    pub fn slot_for(&self, func: &str) -> &'static str {
        self.programs
            .iter()
            .find(|(f, _)| *f == func)
            .map_or(self.slot, |(_, s)| s)
    }
}

pub const TIMING: &[TimingSpec] = &[
    TimingSpec {
        name: "time:iommu_map",
        slot: "iommu_map",
        candidates: &["iommu_map"],
        available: "all",
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:iommu_map_atomic",
        slot: "iommu_map2",
        candidates: &["iommu_map_atomic"],
        available: "5.10 to 6.2 (dma-iommu maps through it there)",
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:iommu_map_sg",
        slot: "iommu_map_sg",
        candidates: &["iommu_map_sg_atomic", "iommu_map_sg"],
        available: "iommu_map_sg_atomic 5.10 to 6.2 (dma-iommu's sg path), iommu_map_sg after",
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:iommu_unmap_fast",
        slot: "iommu_unmap",
        candidates: &["iommu_unmap_fast"],
        available: "all (dma-iommu unmaps through it)",
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:iommu_unmap",
        slot: "iommu_unmap2",
        candidates: &["iommu_unmap"],
        available: "all (VFIO, iommufd)",
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:iotlb_sync",
        slot: "iotlb_sync",
        candidates: &[
            "intel_iommu_tlb_sync",
            "amd_iommu_iotlb_sync",
            "arm_smmu_iotlb_sync",
            "iommu_flush_iotlb_psi",
        ],
        available: "the IOMMU driver's iotlb_sync callback (Intel, AMD, ARM SMMUv3)",
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:swiotlb_map",
        slot: "swiotlb",
        candidates: &["swiotlb_tbl_map_single"],
        available: "all",
        ..TimingSpec::BASE
    },
];

/// The NVIDIA driver's DMA paths (kernel-open/nvidia/nv-dma.c) and the
/// GPUDirect RDMA peer-to-peer API (nv-p2p.c). Level `DRIVER`: each calls
/// into the DMA API, whose own hooks time the inner part.
macro_rules! nv {
    ($name:literal, $slot:literal, $func:literal) => {
        TimingSpec {
            name: $name,
            slot: $slot,
            candidates: &[$func],
            available: "NVIDIA driver (open and proprietary modules) with module BTF",
            module: Some("nvidia"),
            ..TimingSpec::BASE
        }
    };
}

pub const NVIDIA_TIMING: &[TimingSpec] = &[
    nv!("time:nv_dma_map_sgt", "nv_map_sgt", "nv_dma_map_sgt"),
    nv!("time:nv_dma_map_alloc", "nv_map_alloc", "nv_dma_map_alloc"),
    nv!(
        "time:nv_dma_unmap_alloc",
        "nv_unmap_alloc",
        "nv_dma_unmap_alloc"
    ),
    nv!("time:nv_dma_map_peer", "nv_map_peer", "nv_dma_map_peer"),
    nv!(
        "time:nv_dma_unmap_peer",
        "nv_unmap_peer",
        "nv_dma_unmap_peer"
    ),
    nv!("time:nv_dma_map_mmio", "nv_map_mmio", "nv_dma_map_mmio"),
    nv!(
        "time:nvidia_p2p_get_pages",
        "p2p_get",
        "nvidia_p2p_get_pages"
    ),
    nv!(
        "time:nvidia_p2p_put_pages",
        "p2p_put",
        "nvidia_p2p_put_pages"
    ),
    nv!(
        "time:nvidia_p2p_dma_map_pages",
        "p2p_map",
        "nvidia_p2p_dma_map_pages"
    ),
    nv!(
        "time:nvidia_p2p_dma_unmap_pages",
        "p2p_unmap",
        "nvidia_p2p_dma_unmap_pages"
    ),
];

/// Probe name of `selftest module-hook`'s stand-in: the nv_dma_map_sgt
/// slot's programs on another module's function.
pub const STANDIN_NAME: &str = "selftest:module-hook";

/// The stand-in spec for `module`'s `function` (leaked: made once per run).
pub fn standin_spec(module: &str, function: &str) -> &'static TimingSpec {
    let module: &'static str = Box::leak(module.to_owned().into_boxed_str());
    let function: &'static str = Box::leak(function.to_owned().into_boxed_str());
    Box::leak(Box::new(TimingSpec {
        name: STANDIN_NAME,
        slot: NVIDIA_TIMING[0].slot,
        candidates: Box::leak(Box::new([function])),
        available: "self-test only",
        module: Some(module),
        ..TimingSpec::BASE
    }))
}

/// The IOMMU driver's fault interrupt handler: how often it runs and how
/// long it takes (VT-d faults never reach iommu:io_page_fault).
pub const FAULT_HANDLER: TimingSpec = TimingSpec {
    name: "time:fault_handler",
    slot: "fault_irq",
    candidates: &["dmar_fault", "amd_iommu_int_thread", "arm_smmu_evtq_thread"],
    available: "Intel dmar_fault (all), AMD amd_iommu_int_thread, SMMUv3 arm_smmu_evtq_thread",
    ..TimingSpec::BASE
};

/// Entry hook that learns IOMMU domain -> device (for VFIO/iommufd mappings
/// made outside the DMA API); programs `attach_fentry` / `attach_kprobe`.
pub const ATTACH_LEARN: TimingSpec = TimingSpec {
    name: "learn:domain_attach",
    slot: "attach",
    candidates: &["__iommu_attach_device", "iommu_attach_device"],
    available: "all",
    ..TimingSpec::BASE
};

/// Every distinct eBPF program the catalog uses (each is loaded once, then
/// attached to every probe point that names it).
pub fn programs() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for p in CATALOG {
        if !out.contains(&p.program) {
            out.push(p.program);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for p in CATALOG {
            assert!(seen.insert(p.name), "duplicate probe {}", p.name);
            assert!(!p.group().is_empty() && !p.event().is_empty(), "{}", p.name);
            assert!(p.args_read >= 1, "{}", p.name);
        }
    }

    #[test]
    fn one_program_serves_renamed_tracepoints() {
        let users: Vec<_> = CATALOG
            .iter()
            .filter(|p| p.program == "dma_map")
            .map(|p| p.name)
            .collect();
        assert_eq!(users, ["dma:dma_map_page", "dma:dma_map_phys"]);
        assert!(programs().len() < CATALOG.len());
    }
}
