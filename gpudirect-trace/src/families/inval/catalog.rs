//! The IOMMU invalidation hooks (gpudirect-trace-ebpf/src/inval.rs): the
//! time of each submission to the hardware's invalidation queue, per unit
//! and type, and the tracepoints that count descriptors and cache-tag
//! flushes.
//!
//! What each kernel has, read from the BTF of Debian's 5.10.0-32, 6.1.0-50
//! and 6.12.117 kernels and drivers/iommu/{intel,amd,arm} of 6.18:
//!
//! | point | 5.10 | 6.1 | 6.12 | 6.18 |
//! |---|---|---|---|---|
//! | qi_submit_sync(iommu, desc, count, options) | yes | yes | yes | yes |
//! | intel_iommu:qi_submit | - | yes | yes | yes |
//! | intel_iommu:cache_tag_flush_{range,all,range_np} | - | - | yes | yes |
//! | intel_flush_iotlb_all (flush queue's domain flush) | - (own dma ops) | yes | yes | yes |
//! | AMD iommu_completion_wait | inlined | inlined | yes | yes |
//! | AMD domain flush completion | domain_flush_complete | amd_iommu_domain_flush_complete | (calls the above) | (idem) |
//! | arm_smmu_cmdq_issue_cmdlist | 4 args | 4 args | 5 args (cmdq) | 5 args |
//!
//! Debian's x86 kernels build the Intel and AMD drivers in: each vendor's
//! hooks attach only where /sys/class/iommu has a unit of that vendor
//! (`units`), so an Intel host does not time AMD functions that never run.

use crate::catalog::{tp, ProbeSpec, TimingSpec};

/// /sys/class/iommu unit names per vendor: dmar0 (VT-d), ivhd0 (AMD-Vi),
/// smmu3.0x... (SMMUv3).
pub const INTEL_UNITS: &str = "dmar";
pub const AMD_UNITS: &str = "ivhd";
pub const SMMU_UNITS: &str = "smmu3.";

pub const INVAL_TIMING: &[TimingSpec] = &[
    TimingSpec {
        name: "time:qi_submit_sync",
        slot: "qi_submit",
        candidates: &["qi_submit_sync"],
        available: "Intel VT-d with queued invalidation, 5.8+ (every IOTLB, device-TLB, \
                    interrupt-entry, context and PASID cache invalidation)",
        units: &[("qi_submit_sync", INTEL_UNITS)],
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:amd_completion_wait",
        slot: "amd_wait",
        candidates: &[
            "iommu_completion_wait",
            "amd_iommu_domain_flush_complete",
            "domain_flush_complete",
        ],
        available: "AMD-Vi: iommu_completion_wait 6.5+ (per unit), else the domain's flush \
                    completion (amd_iommu_domain_flush_complete 6.1, domain_flush_complete \
                    5.10; unit unknown)",
        programs: &[
            ("amd_iommu_domain_flush_complete", "amd_dwait"),
            ("domain_flush_complete", "amd_dwait"),
        ],
        units: &[
            ("iommu_completion_wait", AMD_UNITS),
            ("amd_iommu_domain_flush_complete", AMD_UNITS),
            ("domain_flush_complete", AMD_UNITS),
        ],
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "time:smmu_cmdq_batch",
        slot: "smmu_cmdq",
        candidates: &["arm_smmu_cmdq_issue_cmdlist"],
        available: "ARM SMMUv3 (arm64): every command batch, its CMD_SYNC wait included",
        units: &[("arm_smmu_cmdq_issue_cmdlist", SMMU_UNITS)],
        ..TimingSpec::BASE
    },
    TimingSpec {
        name: "learn:flush_iotlb_all",
        slot: "flush_all",
        candidates: &[
            "intel_flush_iotlb_all",
            "amd_iommu_flush_iotlb_all",
            "arm_smmu_flush_iotlb_all",
        ],
        available: "the driver's flush_iotlb_all callback (the flush queue's deferred flush \
                    in lazy mode): names the domain, hence the device, of the invalidations \
                    inside it",
        units: &[
            ("intel_flush_iotlb_all", INTEL_UNITS),
            ("amd_iommu_flush_iotlb_all", AMD_UNITS),
            ("arm_smmu_flush_iotlb_all", SMMU_UNITS),
        ],
        ..TimingSpec::BASE
    },
];

const fn intel_tp(
    name: &'static str,
    program: &'static str,
    args_read: usize,
    available: &'static str,
) -> ProbeSpec {
    tp(
        name,
        program,
        args_read,
        available,
        "time:qi_submit_sync (classes a batch by its first descriptor)",
        true,
    )
}

/// drivers/iommu/intel/trace.h's tracepoints.
pub const INTEL_TRACEPOINTS: [ProbeSpec; 4] = [
    intel_tp(
        "intel_iommu:qi_submit",
        "intel_qi_submit",
        3,
        "6.1+ (not in 5.10), CONFIG_INTEL_IOMMU: one per queued descriptor",
    ),
    intel_tp(
        "intel_iommu:cache_tag_flush_range",
        "intel_cache_tag_flush_range",
        5,
        "6.10+ (the device and domain of each IOTLB/device-TLB flush)",
    ),
    intel_tp(
        "intel_iommu:cache_tag_flush_range_np",
        "intel_cache_tag_flush_range_np",
        5,
        "6.10+ (flushes of newly mapped ranges: caching mode)",
    ),
    intel_tp(
        "intel_iommu:cache_tag_flush_all",
        "intel_cache_tag_flush_all",
        1,
        "6.10+ (whole-domain flushes: the flush queue in lazy mode)",
    ),
];
