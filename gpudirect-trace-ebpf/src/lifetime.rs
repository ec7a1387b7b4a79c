//! DMA-API mapping lifetimes kept in-kernel, for aggregate-only mode (in
//! streaming mode userspace pairs maps with unmaps itself, exactly, and
//! these tables stay empty).
//!
//! Each dma_map_* / dma_map_sg puts (device, DMA address) -> (time, size,
//! pid) into a bounded table; the matching unmap removes it and adds the
//! map-to-unmap time to the device's `op::LIFETIME` log2 histogram.
//! Userspace lists the table's oldest entries as long-lived mappings (leak
//! suspects) and counts the outstanding ones per device.
//!
//! The table is `MAPPING_SLOTS` (open addressing in a shared array, slots
//! claimed by compare-and-exchange) where the kernel has BPF atomics, else
//! the hash `MAPPINGS`; `gpudirect_trace_common::lifetime` says why. Either
//! way, when full, new mappings are not tracked (`stat::MAPPINGS_FULL`) and
//! the oldest ones, the leak suspects, stay, where an LRU would evict
//! exactly those. An unmap whose mapping is not in the table is counted
//! (`stat::LIFETIME_UNMATCHED`), never guessed.
//!
//! Lifetimes are sampled (`Config::lifetime_sample_mask`,
//! `lifetime::TIMED`): every mapping goes into the table, but only one in
//! N, chosen at random at map time, is timed with the fine clock, which its
//! unmap reads again; the others are dated in jiffies and their unmaps read
//! no clock.

use core::intrinsics::{atomic_cxchg, AtomicOrdering};

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_prandom_u32, bpf_jiffies64, bpf_ktime_get_ns},
    macros::map,
    maps::{Array, HashMap},
};
use gpudirect_trace_common::{
    flags, kind,
    lifetime::{self, slot_of, SLOT_COUNT, SLOT_PROBES},
    maps, op, stat, CpuState, Event, MapKey, MapSlot, MapValue, LIFETIME_CACHE,
};

use crate::{
    emit::{cfg_lifetime_sample_mask, cfg_stack_filter, cfg_track_lifetimes, with_cpu_to_itself},
    stats::stat_inc,
    timing::{lat_bucket, record_latency},
};

#[map]
static MAPPINGS: HashMap<MapKey, MapValue> = HashMap::with_max_entries(maps::MAPPINGS_CAP, 0);

/// BPF_F_MMAPABLE: userspace reads the slots through an mmap.
const MMAPABLE: u32 = 1 << 10;

/// Sized by the loader: `SLOT_COUNT` slots with `lifetime::SLOTS`, else one.
#[map]
static MAPPING_SLOTS: Array<MapSlot> = Array::with_max_entries(SLOT_COUNT, MMAPABLE);

/// Devices whose streaming mappings the kernel does not unmap
/// (dma_need_unmap() said false, 6.17+): never tracked, or the table would
/// fill with mappings that never end.
#[map]
static NO_UNMAP_DEVS: HashMap<u64, u32> = HashMap::with_max_entries(maps::NO_UNMAP_DEVS_CAP, 0);

/// Whether `NO_UNMAP_DEVS` holds anything: a map looks the hash up (~28 ns,
/// most of the slot table's cost) only after this one-entry array says so.
#[map]
static NO_UNMAP_ANY: Array<u32> = Array::with_max_entries(1, 0);

/// Notes that the kernel will not unmap `dev`'s mappings.
#[inline(always)]
pub fn unmaps_not_needed(dev: u64) {
    if cfg_track_lifetimes() != lifetime::OFF && NO_UNMAP_DEVS.get_ptr(&dev).is_none() {
        let _ = NO_UNMAP_DEVS.insert(&dev, &1, 0);
        if let Some(any) = NO_UNMAP_ANY.get_ptr_mut(0) {
            // SAFETY: map value pointer; any writer writes the same 1.
            unsafe { core::ptr::write_volatile(any, 1) };
        }
    }
}

#[inline(always)]
fn unmap_not_needed(dev: u64) -> bool {
    // SAFETY: map value pointer, read once.
    let any = NO_UNMAP_ANY
        .get_ptr(0)
        .is_some_and(|p| unsafe { core::ptr::read_volatile(p) } != 0);
    any && NO_UNMAP_DEVS.get_ptr(&dev).is_some()
}

/// `st`: this CPU's state where the caller looked it up already, else null;
/// `nents`: a scatterlist's entries handed in (0 for a single map).
#[inline(always)]
pub fn mapped(ev: &Event, st: *mut CpuState, nents: u32) {
    let form = cfg_track_lifetimes();
    if form == lifetime::OFF || ev.dev == 0 || unmap_not_needed(ev.dev) {
        return;
    }
    // The stack filter (streaming) wants the mapping's shape, not its age
    // or its task: `MapValue::pid` holds a scatterlist's entry count.
    let (ts_ns, timed, pid) = if cfg_stack_filter() {
        (0, 0, nents)
    } else {
        let (ts_ns, timed) = start_clock(st);
        (ts_ns, timed, (bpf_get_current_pid_tgid() >> 32) as u32)
    };
    let value = MapValue {
        ts_ns,
        size: ev.size,
        pid,
        kind: shape(ev) | timed,
    };
    let tracked = if form == lifetime::SLOTS {
        slot_put(ev.dev, ev.addr, &value)
    } else {
        let key = MapKey {
            dev: ev.dev,
            addr: ev.addr,
        };
        MAPPINGS.insert(&key, &value, 0).is_ok()
    };
    if !tracked {
        stat_inc(stat::MAPPINGS_FULL);
    }
}

/// A mapping's start and whether it is timed (`lifetime::TIMED` or 0): the
/// fine clock for one in (mask + 1) at random, jiffies for the rest
/// (`bpf_ktime_get_coarse_ns` would be nicer, but tracing programs may not
/// call it). With mask 0 (`--lifetime-sample 1`, or no jiffies) the
/// verifier, knowing the read-only mask, never reaches the jiffies call.
#[inline(always)]
fn start_clock(st: *mut CpuState) -> (u64, u32) {
    let mask = cfg_lifetime_sample_mask();
    // SAFETY: helpers without preconditions.
    unsafe {
        if mask != 0 && (draw(st) as u32) & mask != 0 {
            return (bpf_jiffies64(), 0);
        }
        (bpf_ktime_get_ns(), lifetime::TIMED)
    }
}

/// The next number of this CPU's xorshift64 (`CpuState::lifetime_rng`),
/// seeded from `bpf_get_prandom_u32` on the CPU's first draw; high bits
/// (the low ones of xorshift are its weakest).
#[inline(always)]
fn draw(st: *mut CpuState) -> u64 {
    let st = if st.is_null() {
        crate::emit::cpu_state()
    } else {
        st
    };
    if st.is_null() {
        // SAFETY: helper without preconditions.
        return u64::from(unsafe { bpf_get_prandom_u32() });
    }
    // SAFETY: this CPU's value; see `CpuState::lifetime_rng` for races.
    unsafe {
        let mut x = (*st).lifetime_rng;
        if x == 0 {
            x = u64::from(bpf_get_prandom_u32()) | 1 << 63;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (*st).lifetime_rng = x;
        x >> 32
    }
}

/// A mapping's kind, direction and API as the table keeps them
/// (`MapValue::kind` without `TIMED`).
#[inline(always)]
fn shape(ev: &Event) -> u32 {
    let resource = if ev.flags & flags::RESOURCE != 0 {
        lifetime::RESOURCE_BIT
    } else {
        0
    };
    u32::from(ev.kind) | (ev.dir & 3) << lifetime::DIR_SHIFT | resource
}

/// Takes the unmapped mapping out of the table (timing its lifetime where
/// it was timed); true where the table held it as the unmap says it was
/// mapped (its API, direction, and a single map's size or a scatterlist's
/// `nents`): an unmap no check can fault (`stack_mode::SUSPECT`).
/// `hook`: the program may be preempted (fentry/fexit, kprobes), so it
/// cannot use the CPU's lifetime cache.
#[inline(always)]
pub fn unmapped(ev: &Event, hook: bool, nents: u32) -> bool {
    let form = cfg_track_lifetimes();
    if form == lifetime::OFF || ev.dev == 0 {
        return false;
    }
    let start = if form == lifetime::SLOTS {
        slot_take(ev.dev, ev.addr)
    } else {
        hash_take(ev.dev, ev.addr)
    };
    let Some(v) = start else {
        stat_inc(stat::LIFETIME_UNMATCHED);
        return false;
    };
    // The unmap's shape, as its map would have it.
    let sg = ev.kind == kind::DMA_UNMAP_SG;
    let map_kind = if sg { kind::DMA_MAP_SG } else { kind::DMA_MAP };
    let map_shape = shape(ev) & !lifetime::KIND_MASK | u32::from(map_kind);
    let as_mapped = v.kind & !lifetime::TIMED == map_shape
        && if sg {
            v.pid == nents
        } else {
            v.size == ev.size
        };
    if v.kind & lifetime::TIMED == 0 {
        return as_mapped;
    }
    let start = v.ts_ns;
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let ns = now.saturating_sub(start);
    if hook || !with_cpu_to_itself(|st| cache_lifetime(st, ev.dev, ns)) {
        record_latency(ev.dev, op::LIFETIME, ns);
    }
    as_mapped
}

/// Whether the table holds a page map at exactly `ev`'s (a single sync's)
/// address that it fits in, in a direction it may sync in: a sync no
/// check can fault. The table is read, not changed. (Userspace's check
/// takes the first live mapping that contains the address; only where
/// mappings overlap, without an IOMMU, could that be another one.)
#[inline(always)]
pub fn sync_fits(ev: &Event) -> bool {
    let form = cfg_track_lifetimes();
    if form == lifetime::OFF || ev.dev == 0 {
        return false;
    }
    let found = if form == lifetime::SLOTS {
        slot_find(ev.dev, ev.addr)
    } else {
        hash_find(ev.dev, ev.addr)
    };
    let Some(MapValue { kind, size, .. }) = found else {
        return false;
    };
    let map_dir = kind >> lifetime::DIR_SHIFT & 3;
    kind & lifetime::KIND_MASK == u32::from(kind::DMA_MAP)
        && ev.size <= size
        && (map_dir == gpudirect_trace_common::dir::BIDIRECTIONAL || map_dir == ev.dir)
}

/// Adds a lifetime of `ns` to `dev`'s histogram in this CPU's cache
/// (`LIFETIME_CACHE`): plain adds, the CPU being ours. A device new to the
/// cache takes a free slot, its key written before its counts; false when
/// every slot holds another device.
#[inline(always)]
fn cache_lifetime(st: &mut CpuState, dev: u64, ns: u64) -> bool {
    let b = lat_bucket(ns);
    for i in 0..LIFETIME_CACHE {
        let (Some(holder), Some(h)) = (st.lifetime_devs.get_mut(i), st.lifetimes.get_mut(i)) else {
            return false;
        };
        if *holder != dev {
            if *holder != 0 {
                continue;
            }
            // SAFETY: a field of this CPU's value; volatile so that the
            // key is stored before the counts below.
            unsafe { core::ptr::write_volatile(holder, dev) };
        }
        let Some(bucket) = h.buckets.get_mut(b) else {
            return false;
        };
        h.count += 1;
        h.sum_ns += ns;
        *bucket += 1;
        if ns > h.max_ns {
            h.max_ns = ns;
        }
        return true;
    }
    false
}

/// (dev, addr)'s mapping in the hash form, left there.
#[inline(always)]
fn hash_find(dev: u64, addr: u64) -> Option<MapValue> {
    // SAFETY: the value is copied out at once.
    unsafe { MAPPINGS.get(&MapKey { dev, addr }) }.copied()
}

/// The hash form's unmap: the mapping, removed (copied out first).
#[inline(always)]
fn hash_take(dev: u64, addr: u64) -> Option<MapValue> {
    let start = hash_find(dev, addr)?;
    let _ = MAPPINGS.remove(&MapKey { dev, addr });
    Some(start)
}

#[inline(always)]
fn slot(first: u32, i: u32) -> Option<*mut MapSlot> {
    MAPPING_SLOTS.get_ptr_mut((first + i) & (SLOT_COUNT - 1))
}

/// Puts a mapping into its probe run, in one pass that usually ends at the
/// run's first slot: over a slot that already holds (dev, addr) (a map whose
/// unmap was never seen: the newer one wins, as the hash's insert does), or
/// into the first free slot it can claim. False when all `SLOT_PROBES`
/// slots are taken. (A first pass looking for (dev, addr) over the whole
/// run before claiming cost ~20 ns per map on the GPU host, for a case
/// that needs a lost unmap; such a stale entry further along the run stays
/// until its address is unmapped again.)
#[inline(always)]
fn slot_put(dev: u64, addr: u64, value: &MapValue) -> bool {
    let first = slot_of(dev, addr);
    for i in 0..SLOT_PROBES {
        let Some(s) = slot(first, i) else {
            return false;
        };
        // SAFETY: map value pointer. The exchange makes a free slot ours
        // (any CPU, and an interrupt's program on this one, may race for
        // it); its other fields are written after, and only an unmap of
        // this very mapping, which comes after the map returns, reads them.
        // A slot that holds (dev, addr) is ours already.
        unsafe {
            let claim = core::ptr::addr_of_mut!((*s).dev);
            let holder = core::ptr::read_volatile(claim);
            if holder == dev && (*s).addr == addr {
                core::ptr::write_volatile(core::ptr::addr_of_mut!((*s).value), *value);
                return true;
            }
            if holder != 0 {
                continue;
            }
            let (_, won) =
                atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(
                    claim, 0, dev,
                );
            if won {
                core::ptr::write_volatile(core::ptr::addr_of_mut!((*s).addr), addr);
                core::ptr::write_volatile(core::ptr::addr_of_mut!((*s).value), *value);
                return true;
            }
        }
    }
    false
}

/// The slot of (dev, addr)'s probe run that holds it.
#[inline(always)]
fn slot_holding(dev: u64, addr: u64) -> Option<*mut MapSlot> {
    let first = slot_of(dev, addr);
    for i in 0..SLOT_PROBES {
        let s = slot(first, i)?;
        // SAFETY: map value pointer; see slot_put for who writes it.
        if unsafe { (*s).dev == dev && (*s).addr == addr } {
            return Some(s);
        }
    }
    None
}

/// (dev, addr)'s mapping, left in its probe run.
#[inline(always)]
fn slot_find(dev: u64, addr: u64) -> Option<MapValue> {
    // SAFETY: map value pointer. A slot rewritten under us reads as
    // another mapping: a stack taken.
    slot_holding(dev, addr).map(|s| unsafe { (*s).value })
}

/// Takes (dev, addr) out of its probe run: its mapping, and the slot freed
/// (its address first, so that a concurrent look for the same address
/// never matches a slot being freed; then the claim word).
#[inline(always)]
fn slot_take(dev: u64, addr: u64) -> Option<MapValue> {
    let s = slot_holding(dev, addr)?;
    // SAFETY: map value pointer; see slot_put for who writes it.
    unsafe {
        let start = (*s).value;
        core::ptr::write_volatile(core::ptr::addr_of_mut!((*s).addr), 0);
        core::ptr::write_volatile(core::ptr::addr_of_mut!((*s).dev), 0);
        Some(start)
    }
}
