//! The fault family: IOMMU page faults reported through
//! report_iommu_fault (iommu:io_page_fault: AMD-Vi, ARM SMMU, ...), and the
//! IOMMU driver's fault interrupt handler timed (VT-d faults reach only the
//! kernel log: faults/ decodes its lines). PCIe AER errors are the pcie
//! family's.

pub mod metrics;

use crate::catalog::{tp, ProbeSpec, TimingSpec};

pub const TRACEPOINTS: &[ProbeSpec] = &[tp(
    "iommu:io_page_fault",
    "iommu_io_page_fault",
    3,
    "3.15+; fired by AMD-Vi, ARM SMMU and others through report_iommu_fault (not by Intel VT-d)",
    "kernel log (/dev/kmsg) for VT-d faults",
    false,
)];

/// The IOMMU driver's fault interrupt handler: how often it runs and how
/// long it takes (VT-d faults never reach iommu:io_page_fault).
pub const FAULT_HANDLER: TimingSpec = TimingSpec {
    name: "time:fault_handler",
    slot: "fault_irq",
    candidates: &["dmar_fault", "amd_iommu_int_thread", "arm_smmu_evtq_thread"],
    available: "Intel dmar_fault (all), AMD amd_iommu_int_thread, SMMUv3 arm_smmu_evtq_thread",
    ..TimingSpec::BASE
};

pub const FAMILY: super::Family = super::Family {
    name: "faults",
    tracepoints: TRACEPOINTS,
    hooks: &[&[FAULT_HANDLER]],
    metrics: metrics::METRICS,
};
