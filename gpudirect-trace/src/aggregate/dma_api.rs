//! The DMA-API level's sources (dma:* tracepoints or the DMA-API hooks, per
//! operation), the record kinds the hooks added (map errors, syncs), the
//! IOVA API's transactions (6.17+), and the kernel's word that it skips a
//! device's unmaps (dma_need_unmap() false).

use std::collections::BTreeMap;

use gpudirect_trace_common::{flags, kind, Event};
use serde::Serialize;

/// dma_sync_*_for_cpu / _for_device.
pub(super) fn is_sync(k: u16) -> bool {
    matches!(k, kind::DMA_SYNC_CPU | kind::DMA_SYNC_DEVICE)
}

/// The DMA-API operation (`catalog::DMA_OPS` names) a record or counter of
/// kind `k` reports (the kind catalogue's, refined by the record's flags);
/// None for kinds outside the DMA-API level.
pub(super) fn dma_op(k: u16, iova: bool, resource: bool) -> Option<&'static str> {
    let op = kind::info(k).dma_op?;
    Some(match op {
        "map" | "unmap" if iova => "iova",
        "map" | "unmap" if resource => "resource",
        op => op,
    })
}

/// Per device: where its DMA-API level came from, scatter-gather walks that
/// stopped early, syncs, the IOVA API, skipped unmaps.
#[derive(Default)]
pub struct DmaApiStats {
    /// Seen from the dma:* tracepoints / from the DMA-API hooks (records'
    /// `FROM_HOOK` flag, the counters' `COUNTER_FROM_HOOK` bit).
    pub by_tracepoint: bool,
    pub by_hook: bool,
    /// The same per operation: (tracepoint, hook).
    pub by_op: BTreeMap<&'static str, (bool, bool)>,
    /// Scatter-gather maps / unmaps whose walk stopped before the list's
    /// end: their bytes (and so the device's) are a lower bound.
    pub sg_truncated: u64,
    pub sg_unmap_truncated: u64,
    /// dma_sync_* calls (both directions) and the bytes they covered.
    pub syncs: u64,
    pub sync_bytes: u64,
    /// The IOVA API's calls on this device.
    pub iova: IovaSnapshot,
    /// dma_need_unmap() calls that said false: the kernel may skip this
    /// device's unmaps (6.17+ block layer on dma-direct).
    pub unmap_not_needed: u64,
    /// The (kind, source, iova, resource) combinations `note_source` took
    /// already: one bit per kind in the word of the combination. Noting
    /// one again changes nothing, and its `by_op` lookup (a string
    /// comparison per B-tree key) was ~5% of the reader's CPU per event
    /// (perf, bench_reader_cpu).
    noted: [u64; 8],
}

// One bit per kind in a word of `DmaApiStats::noted`.
const _: () = assert!(kind::COUNT <= 64);

/// The IOVA API (dma_iova_*, 6.17+) on one device. Links and unlinks are
/// also the DMA level's maps and unmaps.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct IovaSnapshot {
    /// dma_iova_try_alloc() calls that allocated IOVA space / that returned
    /// false (the driver then maps with dma_map_*).
    pub allocs: u64,
    pub alloc_bytes: u64,
    pub declined: u64,
    pub links: u64,
    pub link_bytes: u64,
    /// dma_iova_unlink() calls, and the links dma_iova_destroy() ended.
    pub unlinks: u64,
    pub destroys: u64,
    /// dma_iova_free(), and the frees inside dma_iova_destroy().
    pub frees: u64,
    pub syncs: u64,
    pub sync_bytes: u64,
    /// Links, unlinks and syncs past the end of their IOVA allocation.
    pub out_of_range: u64,
    /// Links that bounced through swiotlb (DMA_IOVA_USE_SWIOTLB).
    pub bounced: u64,
}

impl IovaSnapshot {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl DmaApiStats {
    /// Notes which source reported a DMA-API record or counter of kind `k`.
    pub(super) fn note_source(&mut self, k: u16, from_hook: bool, iova: bool, resource: bool) {
        let combo = usize::from(from_hook) | usize::from(iova) << 1 | usize::from(resource) << 2;
        let bit = 1u64.checked_shl(u32::from(k)).unwrap_or(0);
        if self.noted[combo] & bit != 0 {
            return;
        }
        self.noted[combo] |= bit;
        let Some(op) = dma_op(k, iova, resource) else {
            return;
        };
        let e = self.by_op.entry(op).or_default();
        if from_hook {
            self.by_hook = true;
            e.1 = true;
        } else {
            self.by_tracepoint = true;
            e.0 = true;
        }
    }

    /// A streamed record: its source, and what it adds here.
    pub(super) fn note_record(&mut self, ev: &Event) {
        let iova = ev.flags & flags::IOVA != 0;
        self.note_source(
            ev.kind,
            ev.flags & flags::FROM_HOOK != 0,
            iova,
            ev.flags & flags::RESOURCE != 0,
        );
        let truncated = ev.flags & flags::SG_TRUNCATED != 0;
        if iova {
            self.note_iova(ev);
        }
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

    fn note_iova(&mut self, ev: &Event) {
        let v = &mut self.iova;
        if ev.flags & flags::IOVA_OUT_OF_RANGE != 0 {
            v.out_of_range += 1;
        }
        match ev.kind {
            kind::IOVA_ALLOC => {
                v.allocs += 1;
                v.alloc_bytes = v.alloc_bytes.saturating_add(ev.size);
            }
            kind::IOVA_FREE => v.frees += 1,
            kind::IOVA_SYNC => {
                v.syncs += 1;
                v.sync_bytes = v.sync_bytes.saturating_add(ev.size);
            }
            kind::DMA_MAP => {
                v.links += 1;
                v.link_bytes = v.link_bytes.saturating_add(ev.size);
                if ev.flags & flags::IOVA_SWIOTLB != 0 {
                    v.bounced += 1;
                }
            }
            kind::DMA_UNMAP if ev.flags & flags::IOVA_DESTROY != 0 => {
                v.destroys += 1;
                v.unlinks = v.unlinks.saturating_add(ev.phys.min(u64::from(u32::MAX)));
            }
            kind::DMA_UNMAP => v.unlinks += 1,
            _ => {}
        }
    }

    /// The kernel's counters of the IOVA API for this device (they replace
    /// what the stream counted, as the other counters do): (kind, iova
    /// bit, count, bytes) summed over directions.
    pub(super) fn set_iova_counters(&mut self, counts: &BTreeMap<(u16, bool), (u64, u64)>) {
        let get = |k: u16, iova: bool| counts.get(&(k, iova)).copied().unwrap_or_default();
        let v = &mut self.iova;
        (v.allocs, v.alloc_bytes) = get(kind::IOVA_ALLOC, true);
        v.frees = get(kind::IOVA_FREE, true).0;
        (v.syncs, v.sync_bytes) = get(kind::IOVA_SYNC, true);
        v.declined = get(kind::IOVA_DECLINED, false).0;
        (v.links, v.link_bytes) = get(kind::DMA_MAP, true);
        v.unlinks = get(kind::DMA_UNMAP, true).0;
        self.unmap_not_needed = get(kind::UNMAP_NOT_NEEDED, false).0;
    }

    pub(super) fn source(&self) -> &'static str {
        match (self.by_tracepoint, self.by_hook) {
            (true, true) => "tracepoints+hooks",
            (true, false) => "tracepoints",
            (false, true) => "hooks",
            (false, false) => "none",
        }
    }

    /// Each operation's source: "tracepoint", "hook" or both.
    pub(super) fn sources(&self) -> BTreeMap<&'static str, &'static str> {
        self.by_op
            .iter()
            .map(|(op, src)| {
                let s = match src {
                    (true, true) => "tracepoint+hook",
                    (true, false) => "tracepoint",
                    _ => "hook",
                };
                (*op, s)
            })
            .collect()
    }

    /// The IOVA row of a snapshot, where the device used the API.
    pub(super) fn iova_snapshot(&self) -> Option<IovaSnapshot> {
        (!self.iova.is_empty()).then(|| self.iova.clone())
    }
}
