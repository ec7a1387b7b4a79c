//! DMA-API mapping lifetimes kept in-kernel, for aggregate-only mode (in
//! streaming mode userspace pairs maps with unmaps itself, exactly, and this
//! table stays empty).
//!
//! Each dma_map_* / dma_map_sg puts (device, DMA address) -> (time, size,
//! pid) into an LRU hash; the matching unmap removes it and adds the
//! map-to-unmap time to the device's `op::LIFETIME` log2 histogram. The LRU
//! bounds the memory: under more outstanding mappings than it holds, the
//! oldest are evicted and their unmaps are counted as unmatched
//! (`stat::LIFETIME_UNMATCHED`), never guessed. Userspace lists the table's
//! oldest entries as long-lived mappings (leak suspects) and counts the
//! outstanding ones per device.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::LruHashMap,
};
use gpudirect_trace_common::{op, stat, Event, MapKey, MapValue};

use crate::{
    emit::{config, stat_inc},
    timing::record_latency,
};

/// One shared LRU (per-CPU LRU lists, BPF_F_NO_COMMON_LRU, measured no
/// cheaper in `cargo xtask bench` and would split the capacity per CPU).
#[map]
static MAPPINGS: LruHashMap<MapKey, MapValue> = LruHashMap::with_max_entries(65536, 0);

#[inline(always)]
pub fn mapped(ev: &Event) {
    if config().track_lifetimes == 0 || ev.dev == 0 {
        return;
    }
    let key = MapKey {
        dev: ev.dev,
        addr: ev.addr,
    };
    let value = MapValue {
        // SAFETY: helper without preconditions.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        size: ev.size,
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        kind: ev.kind as u32,
    };
    let _ = MAPPINGS.insert(&key, &value, 0);
}

#[inline(always)]
pub fn unmapped(ev: &Event) {
    if config().track_lifetimes == 0 || ev.dev == 0 {
        return;
    }
    let key = MapKey {
        dev: ev.dev,
        addr: ev.addr,
    };
    // SAFETY: the value is copied out before the entry is removed.
    let Some(start) = (unsafe { MAPPINGS.get(&key) }).map(|v| v.ts_ns) else {
        stat_inc(stat::LIFETIME_UNMATCHED);
        return;
    };
    let _ = MAPPINGS.remove(&key);
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    record_latency(ev.dev, op::LIFETIME, now.saturating_sub(start));
}
