//! The invalidation family: what the IOMMU's invalidation queue costs, per
//! unit, type and device (Intel qi_submit_sync, AMD completion wait, SMMUv3
//! command batches; the intel_iommu tracepoints), and each device's
//! translation budget.

pub mod catalog;
pub mod metrics;

pub use catalog::{INTEL_TRACEPOINTS, INVAL_TIMING};

pub const FAMILY: super::Family = super::Family {
    name: "inval",
    tracepoints: &INTEL_TRACEPOINTS,
    hooks: &[INVAL_TIMING],
    metrics: metrics::METRICS,
};
