//! DMA-API mapping lifetimes kept in-kernel, for aggregate-only mode (in
//! streaming mode userspace pairs maps with unmaps itself, exactly, and this
//! table stays empty).
//!
//! Each dma_map_* / dma_map_sg puts (device, DMA address) -> (time, size,
//! pid) into a bounded hash; the matching unmap removes it and adds the
//! map-to-unmap time to the device's `op::LIFETIME` log2 histogram.
//! Userspace lists the table's oldest entries as long-lived mappings (leak
//! suspects) and counts the outstanding ones per device.
//!
//! A plain hash, not an LRU: when it is full, new mappings are not tracked
//! (`stat::MAPPINGS_FULL`) and the oldest ones, the leak suspects, stay,
//! where an LRU would evict exactly those. It is also the cheaper of the two
//! (GPU host, 32 CPUs: ~350 ns vs ~460 ns per dma_map with the table). An
//! unmap whose mapping is not in the table is counted
//! (`stat::LIFETIME_UNMATCHED`), never guessed.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::HashMap,
};
use gpudirect_trace_common::{maps, op, stat, Event, MapKey, MapValue};

use crate::{
    emit::cfg_track_lifetimes,
    stats::stat_inc,
    timing::record_latency,
};

#[map]
static MAPPINGS: HashMap<MapKey, MapValue> = HashMap::with_max_entries(maps::MAPPINGS_CAP, 0);

/// Devices whose streaming mappings the kernel does not unmap
/// (dma_need_unmap() said false, 6.17+): never tracked, or the table would
/// fill with mappings that never end.
#[map]
static NO_UNMAP_DEVS: HashMap<u64, u32> = HashMap::with_max_entries(maps::NO_UNMAP_DEVS_CAP, 0);

/// Notes that the kernel will not unmap `dev`'s mappings.
#[inline(always)]
pub fn unmaps_not_needed(dev: u64) {
    if cfg_track_lifetimes() && NO_UNMAP_DEVS.get_ptr(&dev).is_none() {
        let _ = NO_UNMAP_DEVS.insert(&dev, &1, 0);
    }
}

/// The table key of a DMA-API map or unmap event, when the table is in use
/// and the event names its device.
#[inline(always)]
fn key_of(ev: &Event) -> Option<MapKey> {
    (cfg_track_lifetimes() && ev.dev != 0).then_some(MapKey {
        dev: ev.dev,
        addr: ev.addr,
    })
}

#[inline(always)]
pub fn mapped(ev: &Event) {
    let Some(key) = key_of(ev) else { return };
    if NO_UNMAP_DEVS.get_ptr(&ev.dev).is_some() {
        return;
    }
    let value = MapValue {
        // SAFETY: helper without preconditions.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        size: ev.size,
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        kind: ev.kind as u32,
    };
    if MAPPINGS.insert(&key, &value, 0).is_err() {
        stat_inc(stat::MAPPINGS_FULL);
    }
}

#[inline(always)]
pub fn unmapped(ev: &Event) {
    let Some(key) = key_of(ev) else { return };
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
