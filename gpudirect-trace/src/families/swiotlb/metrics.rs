//! The swiotlb family's metrics, declared once (docs/metrics.md's table is made from them).

use crate::metrics::{Metric, Unit::Bytes};

pub const SWIOTLB_BOUNCES_TOTAL: Metric = Metric::counter(
    "gpudirect_swiotlb_bounces",
    &["device"],
    "Transfers bounced through the swiotlb buffer.",
    "transfers bounced through swiotlb",
);

pub const SWIOTLB_BOUNCED_BYTES_TOTAL: Metric = Metric::counter(
    "gpudirect_swiotlb_bounced",
    &["device"],
    "Bytes bounced through the swiotlb buffer (copied by the CPU).",
    "bytes the CPU copied through bounce buffers",
)
.in_unit(Bytes);

/// In the order docs/metrics.md lists them.
pub const METRICS: &[&Metric] = &[&SWIOTLB_BOUNCES_TOTAL, &SWIOTLB_BOUNCED_BYTES_TOTAL];
