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
        "dma:dma_map_phys (6.18+); iommu:map where an IOMMU translates",
        true,
    ),
    tp("dma:dma_map_phys", "dma_map", 6, "6.18+", "dma:dma_map_page (6.8 to 6.17)", true),
    tp("dma:dma_map_resource", "dma_map_resource", 6, "6.8 to 6.17", "dma:dma_map_phys with DMA_ATTR_MMIO (6.18+)", true),
    tp("dma:dma_unmap_page", "dma_unmap", 5, "6.8 to 6.17", "dma:dma_unmap_phys (6.18+)", true),
    tp("dma:dma_unmap_phys", "dma_unmap", 5, "6.18+", "dma:dma_unmap_page (6.8 to 6.17)", true),
    tp("dma:dma_unmap_resource", "dma_unmap_resource", 5, "6.8 to 6.17", "dma:dma_unmap_phys (6.18+)", true),
    tp("dma:dma_map_sg", "dma_map_sg", 6, "6.8+", "iommu:map where an IOMMU translates", true),
    tp("dma:dma_unmap_sg", "dma_unmap_sg", 5, "6.8+", "iommu:unmap where an IOMMU translates", true),
    tp("dma:dma_map_sg_err", "dma_map_sg_err", 5, "6.13+", "", false),
    tp("dma:dma_alloc", "dma_alloc", 4, "6.8+", "", true),
    tp("dma:dma_alloc_pages", "dma_alloc", 4, "6.13+", "", true),
    tp("dma:dma_free", "dma_free", 4, "6.8+", "", true),
    tp("dma:dma_free_pages", "dma_free", 4, "6.13+", "", true),
    tp("swiotlb:swiotlb_bounced", "swiotlb_bounced", 3, "3.x+ (4 args before 5.18, 3 after)", "", true),
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
