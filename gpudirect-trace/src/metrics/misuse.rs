//! The misuse-check metrics, declared once (docs/metrics.md's table is made
//! from them).

use super::Metric;

pub const DMA_MISUSE_TOTAL: Metric = Metric::counter(
    "gpudirect_dma_misuse",
    &["device", "check"],
    "DMA-API misuse the trace proves (--check), by device and check (dma-debug's checks; \
     map-failure: maps that returned an error).",
    "misuse the trace proves, by check: double-unmap, unmap-size, unmap-direction, \
     unmap-class, sg-unmap-count, sync-unmapped, sync-outside, sync-direction, \
     sync-sg-count, cacheline-overlap, leak-at-unbind, kernel-image, the IOVA API's \
     iova-outside, iova-unlink-unlinked, iova-sync-unlinked, iova-free-linked, \
     iova-double-free, and map-failure \
     (maps that returned an error)",
);

pub const DMA_MISUSE_UNCHECKED_TOTAL: Metric = Metric::counter(
    "gpudirect_dma_misuse_unchecked",
    &["reason"],
    "DMA-API calls --check could not judge: unmaps and syncs of handles mapped before \
     tracing, maps past the table, findings unproven after lost events.",
    "calls the checks could not judge: `unknown-unmap`, `unknown-sync` (handles mapped \
     before tracing), `untracked-map` (past the table), `unproven` (findings dropped \
     because events were lost)",
);

/// In the order docs/metrics.md lists them.
pub const ALL: &[&Metric] = &[&DMA_MISUSE_TOTAL, &DMA_MISUSE_UNCHECKED_TOTAL];
