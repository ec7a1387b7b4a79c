//! The fault family's metrics, declared once (docs/metrics.md's table is made from them).

use crate::metrics::Metric;

pub const IOMMU_FAULTS_TOTAL: Metric = Metric::counter(
    "gpudirect_iommu_faults",
    &["device", "source", "reason"],
    "IOMMU faults, by where they were seen and their reason.",
    "IOMMU faults; source `iommu-tracepoint` (iommu:io_page_fault), `vtd`, `amd-vi`, \
     `smmu`, `virtio-iommu` (decoded from /dev/kmsg, see docs/faults.md); reason as \
     decoded (the kernel's reason text, at most 80 characters)",
);

pub const PCIE_AER_ERRORS_TOTAL: Metric = Metric::counter(
    "gpudirect_pcie_aer_errors",
    &["device", "reason"],
    "PCIe AER errors reported in the kernel log.",
    "PCIe AER errors decoded from the kernel log",
);

/// In the order docs/metrics.md lists them.
pub const METRICS: &[&Metric] = &[&IOMMU_FAULTS_TOTAL, &PCIE_AER_ERRORS_TOTAL];
