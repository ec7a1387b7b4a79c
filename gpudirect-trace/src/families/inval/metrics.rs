//! The invalidation family's metrics (and the translation budget), declared once (docs/metrics.md's table is made from them).

use crate::metrics::{Metric, Unit::Seconds};

pub const IOMMU_INVALIDATION_SECONDS: Metric = Metric::histogram(
    "gpudirect_iommu_invalidation",
    &["device", "iommu", "type"],
    "Time per submission to the IOMMU's invalidation queue and its wait for completion \
     (Intel qi_submit_sync, AMD completion wait, SMMUv3 command batch), by device, unit \
     and type.",
    "time per submission to the IOMMU's invalidation queue, its completion wait included \
     (time:qi_submit_sync, AMD completion wait, SMMUv3 command batch; docs/probes.md); \
     `iommu` the unit (`dmar0`, `ivhd0`, `smmu`; `dmar?` where unknown), `type` the \
     invalidation type (`iotlb`, `device_tlb`, `interrupt_entry_cache`, `context_cache`, \
     `pasid_iotlb`, ..., `completion_wait`); buckets as above. `sum by (iommu, type)` is \
     DMAR_PERF's per-unit view",
)
.in_unit(Seconds);

pub const IOMMU_INVALIDATION_DESCRIPTORS_TOTAL: Metric = Metric::counter(
    "gpudirect_iommu_invalidation_descriptors",
    &["iommu", "type"],
    "Invalidation descriptors queued (intel_iommu:qi_submit, every descriptor of a \
     batch), by unit and type.",
    "descriptors queued, every descriptor of a 6.12+ batch by its own type \
     (intel_iommu:qi_submit, 6.1+)",
);

pub const IOMMU_CACHE_TAG_FLUSHES_TOTAL: Metric = Metric::counter(
    "gpudirect_iommu_cache_tag_flushes",
    &["device", "iommu", "tag", "flush"],
    "Cache-tag flushes the VT-d driver made (intel_iommu:cache_tag_flush_*, 6.10+), by \
     device, unit, tag type and flush kind.",
    "VT-d cache-tag flushes (6.10+): `tag` `iotlb`, `devtlb`, `nesting_iotlb`, \
     `nesting_devtlb`; `flush` `range` (unmap), `range_np` (map, caching mode), `all` \
     (whole domain: the flush queue)",
);

pub const TRANSLATION_SECONDS_TOTAL: Metric = Metric::counter(
    "gpudirect_translation",
    &["device", "part"],
    "CPU time translation cost the device: dma_api (timed DMA-API calls), iommu (IOMMU \
     work inside them plus invalidations outside any timed IOMMU call), invalidation (all \
     its invalidation-queue time).",
    "CPU time translation costs the device: `part=\"dma_api\"` (its timed DMA-API calls), \
     `iommu` (IOMMU work nested in them, plus invalidations outside any timed IOMMU call: \
     lazy mode's deferred flushes), `invalidation` (all its invalidation-queue time, \
     nested or not). `rate()` of it is the budget over any window",
)
.in_unit(Seconds);

pub const TRANSLATION_BUDGET_RATIO: Metric = Metric::gauge(
    "gpudirect_translation_budget_ratio",
    &["device", "part"],
    "The translation budget over the device's first to last event: CPU seconds per second \
     by part (1000 x this is the report's ms/s), and what identity (passthrough) mapping \
     would save (part=identity_saves, an estimate).",
    "the same over the device's first to last event, in CPU seconds per second (×1000: \
     the ms/s `live` shows), plus `part=\"identity_saves\"`: what identity (passthrough) \
     mapping would save, an estimate (the IOMMU part; not the device's IOTLB misses)",
);

/// In the order docs/metrics.md lists them.
pub const METRICS: &[&Metric] = &[
    &IOMMU_INVALIDATION_SECONDS,
    &IOMMU_INVALIDATION_DESCRIPTORS_TOTAL,
    &IOMMU_CACHE_TAG_FLUSHES_TOTAL,
    &TRANSLATION_SECONDS_TOTAL,
    &TRANSLATION_BUDGET_RATIO,
];
