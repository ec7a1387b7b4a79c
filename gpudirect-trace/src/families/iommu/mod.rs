//! The IOMMU page-table family: iommu:map/unmap and the group and domain
//! changes (gpudirect-trace-ebpf/src/families/iommu.rs), the IOMMU API
//! calls timed (iommu_map, iommu_unmap, the driver's iotlb_sync), and what
//! learns which device a domain belongs to (VFIO, iommufd).

pub mod metrics;

use crate::catalog::{tp, ProbeSpec, TimingSpec};

pub const TRACEPOINTS: &[ProbeSpec] = &[
    tp("iommu:map", "iommu_map", 3, "3.15+", "", true),
    tp("iommu:unmap", "iommu_unmap", 3, "3.15+", "", true),
    tp(
        "iommu:add_device_to_group",
        "iommu_add_device_to_group",
        2,
        "3.15+",
        "",
        false,
    ),
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
];

/// The IOMMU API calls, timed (level IOMMU and INNER).
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
];

/// Entry hook that learns IOMMU domain -> device (for VFIO/iommufd mappings
/// made outside the DMA API); programs `attach_fentry` / `attach_kprobe`.
pub const ATTACH_LEARN: TimingSpec = TimingSpec {
    name: "learn:domain_attach",
    slot: "attach",
    candidates: &["__iommu_attach_device", "iommu_attach_device"],
    available: "all",
    ..TimingSpec::BASE
};

pub const FAMILY: super::Family = super::Family {
    name: "iommu",
    tracepoints: TRACEPOINTS,
    hooks: &[TIMING, &[ATTACH_LEARN]],
    metrics: metrics::METRICS,
};
