//! The in-kernel per-device counters' ABI (`DEV_COUNTERS`) and each CPU's
//! hot-path state (`CPU_STATE`), which caches counters and lifetime
//! histograms in front of their hashes.

use crate::LatHist;

/// Key of the in-kernel per-device counters (`DEV_COUNTERS`, per-CPU hash):
/// one slot per (device, event kind, DMA direction). `dev` 0 collects events
/// that carry no device (iommu:map/unmap before attribution).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterKey {
    pub dev: u64,
    /// Event kind in the low 16 bits; the high 16 bits are the writer's
    /// nesting slot (`COUNTER_SLOTS`), summed away by userspace.
    pub kind: u32,
    pub dir: u32,
}

/// Copies of each per-CPU counter: programs that run with preemption off
/// (tracepoints) update copy `depth` with plain adds, where `depth` is how
/// many such programs are in flight on the CPU (an interrupt's program
/// nests on top of the one it interrupted and so never shares its copy);
/// the last copy takes every other writer, with atomic adds.
pub const COUNTER_SLOTS: u32 = 4;

/// Bit of `CounterKey::kind` set by the DMA-API hooks: the device's DMA
/// level came from them rather than from the dma:* tracepoints.
pub const COUNTER_FROM_HOOK: u32 = 1 << 24;

/// Bit of `CounterKey::kind` for the IOVA API's records (`flags::IOVA`):
/// a device's links and unlinks, apart from its dma_map_* maps.
pub const COUNTER_IOVA: u32 = 1 << 25;

impl CounterKey {
    /// This key's slot in a CPU's counter cache (`COUNTER_CACHE`): device
    /// pointers differ above their low bits, kinds and directions in them.
    #[inline(always)]
    pub const fn cache_index(&self) -> usize {
        let h = (self.dev >> 6) ^ (self.dev >> 12) ^ (self.kind as u64) ^ ((self.dir as u64) << 2);
        (h as usize) & (COUNTER_CACHE - 1)
    }

    /// The key of `kind`'s counter for `dev` and `dir`, in nesting copy `slot`.
    #[inline(always)]
    pub const fn new(dev: u64, kind: u16, slot: u32, dir: u32) -> Self {
        Self {
            dev,
            kind: kind as u32 | slot << 16,
            dir,
        }
    }

    /// The event kind (without the nesting slot).
    pub fn event_kind(&self) -> u16 {
        self.kind as u16
    }

    /// The nesting copy (`COUNTER_SLOTS`) that wrote it.
    pub fn slot(&self) -> u32 {
        (self.kind >> 16) & 0xff
    }

    /// Whether the DMA-API hooks (not a tracepoint) counted this.
    pub fn from_hook(&self) -> bool {
        self.kind & COUNTER_FROM_HOOK != 0
    }

    /// Whether it counts IOVA-API links or unlinks.
    pub fn iova(&self) -> bool {
        self.kind & COUNTER_IOVA != 0
    }

    /// The same counter with the slot summed away (userspace's view); the
    /// source bits stay.
    pub fn merged(&self) -> Self {
        Self {
            dev: self.dev,
            kind: self.event_kind() as u32 | (self.kind & (COUNTER_FROM_HOOK | COUNTER_IOVA)),
            dir: self.dir,
        }
    }
}

/// Value of `DEV_COUNTERS`: how many events and how many bytes they covered.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    pub count: u64,
    pub bytes: u64,
}

/// Counters a CPU keeps in its `CPU_STATE` value before `DEV_COUNTERS`,
/// direct-mapped by key (`CounterKey::cache_index`). A hit there is an
/// array access instead of a per-CPU hash lookup, which was almost all of
/// an aggregate-only hit's cost (hash ~28 ns of ~32 ns net on the CI host,
/// `cargo xtask bench` hot_part). Only the outermost tracepoint program of
/// a CPU (nesting depth 0, preemption off) uses it; a key that takes a
/// slot moves the old key's counts into `DEV_COUNTERS` first. Userspace
/// adds every CPU's cached counts to the hash's.
pub const COUNTER_CACHE: usize = 8;

/// Lifetime histograms (op `LIFETIME`) a CPU keeps in its `CPU_STATE` value
/// before `LAT_HIST`: the first devices whose unmaps end a lifetime on that
/// CPU keep a slot for the session (no eviction, so no count is ever in
/// two places); further devices go to `LAT_HIST`. The per-CPU hash lookup
/// and three atomic adds it saves were ~45 ns of an aggregate-only unmap's
/// 89 ns on the GPU host (docs/gpu-host.md, session 9). Same rule as the
/// counter cache: only the outermost tracepoint program of a CPU writes it,
/// with the nesting depth raised meanwhile; userspace adds every CPU's
/// cached histograms to the hash's.
pub const LIFETIME_CACHE: usize = 4;

/// Rare events (faults, map failures, group changes, Xids) wake the reader
/// at once, but a CPU forces at most one such wake-up per this many ns; the
/// rest wait for the reader's next drain (its timer, or the next wake-up).
/// Each forced wake-up costs the traced CPU an irq_work (~1.4-3.5 us
/// measured) and the reader a trip through epoll: unbounded, a storm of
/// map failures would cost more than the DMA it reports. One a millisecond
/// bounds it to under 0.4% of a CPU while the first event of any burst
/// still arrives at once.
pub const RARE_WAKE_GAP_NS: u64 = 1_000_000;

/// Value of `CPU_STATE` (one per CPU): the hot path's bookkeeping, looked
/// up once per event.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuState {
    /// Counter updates in flight on this CPU (see `COUNTER_SLOTS`).
    pub depth: u64,
    /// Records streamed, and the backlog seen at the last wake-up check.
    pub records: u64,
    pub last_avail: u64,
    /// This CPU's preempt count's address, computed on the CPU's first
    /// streamed record (`Config::preempt_count_ptr` plus the CPU's
    /// `__per_cpu_offset`); 0 until then. One kernel read per record
    /// instead of two.
    pub preempt_count_at: u64,
    /// This CPU's xorshift state for sampled lifetimes (0: not seeded yet):
    /// which mapping is timed. `bpf_get_prandom_u32` costs 7 ns a call in
    /// `bench_hot_path_parts`, a quarter of an untimed map; a race with a
    /// preempting program only repeats or mixes a draw.
    pub lifetime_rng: u64,
    /// The cached counters' keys (nesting slot 0; kind 0: empty) and counts.
    pub cache_keys: [CounterKey; COUNTER_CACHE],
    pub cache: [Counter; COUNTER_CACHE],
    /// The devices epoch (`runtime::DEVICES_EPOCH`) at which each cached
    /// key's device was last made sure to be named. A slot whose epoch is
    /// behind asks for the name again on its next hit: the loader forgot
    /// a removed device's address, and a new device may live there now.
    pub cache_named: [u32; COUNTER_CACHE],
    /// The cached lifetime histograms' devices (0: a free slot) and
    /// histograms (`LIFETIME_CACHE`).
    pub lifetime_devs: [u64; LIFETIME_CACHE],
    pub lifetimes: [LatHist; LIFETIME_CACHE],
    /// When this CPU's last rare event forced a reader wake-up
    /// (CLOCK_MONOTONIC ns; 0: never): rare events force at most one per
    /// `RARE_WAKE_GAP_NS` per CPU, so that a storm of them (map failures at
    /// line rate when swiotlb runs out) does not cost the traced CPU an
    /// irq_work and the reader a wake-up per event. Last, so that the hot
    /// path's fields keep their offsets.
    pub rare_woke_ns: u64,
}

const _: () = assert!(core::mem::size_of::<CounterKey>() == 16);
const _: () = assert!(
    core::mem::size_of::<CpuState>()
        == 48 + 36 * COUNTER_CACHE + (8 + core::mem::size_of::<LatHist>()) * LIFETIME_CACHE
);
const _: () = assert!(COUNTER_CACHE.is_power_of_two());
const _: () = assert!(core::mem::size_of::<Counter>() == 16);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{dir, kind};

    #[test]
    fn counter_keys_carry_their_nesting_slot_and_merge_it_away() {
        let k = CounterKey::new(0xffff_8880_0000_1000, kind::DMA_MAP_SG, 3, dir::FROM_DEVICE);
        assert_eq!((k.event_kind(), k.slot(), k.dir), (kind::DMA_MAP_SG, 3, 2));
        assert_eq!(k.merged(), CounterKey::new(k.dev, kind::DMA_MAP_SG, 0, 2));
    }
}
