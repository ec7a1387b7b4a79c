//! The IOMMU page-table family's metrics, declared once (docs/metrics.md's table is made from them).

use crate::metrics::{Metric, Unit::Bytes};

pub const IOMMU_MAP_BYTES_TOTAL: Metric = Metric::counter(
    "gpudirect_iommu_map",
    &["device"],
    "Bytes mapped in IOMMU page tables (iommu:map).",
    "bytes mapped in IOMMU page tables (iommu:map)",
)
.in_unit(Bytes);

/// In the order docs/metrics.md lists them.
pub const METRICS: &[&Metric] = &[&IOMMU_MAP_BYTES_TOTAL];
