//! The swiotlb family's metrics, declared once (docs/metrics.md's table is made from them).

use crate::metrics::{Metric, Type::Counter, Unit::Bytes};

pub const SWIOTLB_BOUNCES_TOTAL: Metric = Metric {
    name: "gpudirect_swiotlb_bounces",
    kind: Counter,
    unit: None,
    labels: &["device"],
    help: "Transfers bounced through the swiotlb buffer.",
    doc: "transfers bounced through swiotlb",
};

pub const SWIOTLB_BOUNCED_BYTES_TOTAL: Metric = Metric {
    name: "gpudirect_swiotlb_bounced",
    kind: Counter,
    unit: Some(Bytes),
    labels: &["device"],
    help: "Bytes bounced through the swiotlb buffer (copied by the CPU).",
    doc: "bytes the CPU copied through bounce buffers",
};

/// In the order docs/metrics.md lists them.
pub const METRICS: &[&Metric] = &[&SWIOTLB_BOUNCES_TOTAL, &SWIOTLB_BOUNCED_BYTES_TOTAL];
