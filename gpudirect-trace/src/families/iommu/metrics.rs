//! The IOMMU page-table family's metrics, declared once (docs/metrics.md's table is made from them).

use crate::metrics::{Metric, Type::Counter, Unit::Bytes};

pub const IOMMU_MAP_BYTES_TOTAL: Metric = Metric {
    name: "gpudirect_iommu_map",
    kind: Counter,
    unit: Some(Bytes),
    labels: &["device"],
    help: "Bytes mapped in IOMMU page tables (iommu:map).",
    doc: "bytes mapped in IOMMU page tables (iommu:map)",
};

/// In the order docs/metrics.md lists them.
pub const METRICS: &[&Metric] = &[&IOMMU_MAP_BYTES_TOTAL];
