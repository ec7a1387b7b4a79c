//! The DMA-API level's source (dma:* tracepoints or the DMA-API hooks) and
//! the record kinds the hooks added: map errors and syncs.

use gpudirect_trace_common::{flags, kind, Event};

/// dma_sync_*_for_cpu / _for_device.
pub(super) fn is_sync(k: u16) -> bool {
    matches!(k, kind::DMA_SYNC_CPU | kind::DMA_SYNC_DEVICE)
}

/// Kinds that make up a device's DMA-API level.
fn is_dma_api(k: u16) -> bool {
    matches!(
        k,
        kind::DMA_MAP
            | kind::DMA_UNMAP
            | kind::DMA_MAP_SG
            | kind::DMA_UNMAP_SG
            | kind::DMA_ALLOC
            | kind::DMA_FREE
    ) || is_sync(k)
}

/// Per device: where its DMA-API level came from, scatter-gather walks that
/// stopped early, syncs.
#[derive(Default)]
pub struct DmaApiStats {
    /// Seen from the dma:* tracepoints / from the DMA-API hooks (records'
    /// `FROM_HOOK` flag, the counters' `COUNTER_FROM_HOOK` bit).
    pub by_tracepoint: bool,
    pub by_hook: bool,
    /// Scatter-gather maps / unmaps whose walk stopped before the list's
    /// end: their bytes (and so the device's) are a lower bound.
    pub sg_truncated: u64,
    pub sg_unmap_truncated: u64,
    /// dma_sync_* calls (both directions) and the bytes they covered.
    pub syncs: u64,
    pub sync_bytes: u64,
}

impl DmaApiStats {
    /// Notes which source reported a DMA-API record or counter of kind `k`.
    pub(super) fn note_source(&mut self, k: u16, from_hook: bool) {
        if !is_dma_api(k) {
            return;
        }
        if from_hook {
            self.by_hook = true;
        } else {
            self.by_tracepoint = true;
        }
    }

    /// A streamed record: its source, and what it adds here.
    pub(super) fn note_record(&mut self, ev: &Event) {
        self.note_source(ev.kind, ev.flags & flags::FROM_HOOK != 0);
        let truncated = ev.flags & flags::SG_TRUNCATED != 0;
        match ev.kind {
            kind::DMA_MAP_SG if truncated => self.sg_truncated += 1,
            kind::DMA_UNMAP_SG if truncated => self.sg_unmap_truncated += 1,
            k if is_sync(k) => {
                self.syncs += 1;
                self.sync_bytes = self.sync_bytes.saturating_add(ev.size);
            }
            _ => {}
        }
    }

    pub(super) fn source(&self) -> &'static str {
        match (self.by_tracepoint, self.by_hook) {
            (true, true) => "tracepoints+hooks",
            (true, false) => "tracepoints",
            (false, true) => "hooks",
            (false, false) => "none",
        }
    }
}
