//! The in-kernel tables of outstanding DMA-API mappings, for lifetimes in
//! aggregate-only mode (streaming pairs maps with unmaps in userspace), and
//! in streaming mode with `--stacks` for `stack_mode::SUSPECT` alone (an
//! unmap or sync takes a stack only where its mapping is not in the table
//! as it should be; no clock is read, nothing is timed).
//!
//! Two forms, one per kernel capability, chosen by the loader
//! (`Config::track_lifetimes`):
//! - `SLOTS`: an open-addressing table in a shared BPF array
//!   (`MAPPING_SLOTS`), each slot claimed with a BPF compare-and-exchange
//!   (kernels with BPF atomics, 5.12+). A map costs an array index and a
//!   claim instead of a hash insert (~150 ns net per map and ~220 per unmap
//!   with the hash on the CI host, docs/benchmarks.md); userspace reads the
//!   table through a read-only mmap, without a syscall per entry.
//! - `HASH`: the bounded hash `MAPPINGS` (kernels without BPF atomics).

/// Lifetimes are not tracked (streaming, or `--no-lifetimes`).
pub const OFF: u32 = 0;
/// The bounded hash `MAPPINGS` (no BPF atomics in the kernel).
pub const HASH: u32 = 1;
/// The slot table `MAPPING_SLOTS`.
pub const SLOTS: u32 = 2;

/// `MapValue::kind`'s top bit: the mapping's start is the fine clock's
/// (`bpf_ktime_get_ns`) and its unmap adds its lifetime to the histogram.
/// Without it the start is a jiffies count (`bpf_jiffies64`, a load of the
/// tick counter), which userspace turns into CLOCK_MONOTONIC time to a tick
/// or two (`ebpf/jiffies.rs`): enough to date a mapping while it is
/// outstanding; its unmap reads no clock.
///
/// Why sample: the clock is most of what a lifetime costs. On the CI host
/// (6.18, TSC) `bpf_ktime_get_ns` is 84 ns a call against 29 ns for the
/// whole aggregate-only map without lifetimes (docs/benchmarks.md); a map
/// and its unmap read it twice. The table keeps every mapping either way,
/// so outstanding counts, bytes and the oldest mappings stay exact; only
/// the lifetime histogram is a sample (1 in `--lifetime-sample`, random at
/// map time, so no address, size or device is favoured).
pub const TIMED: u32 = 1 << 31;

/// `MapValue::kind` bits 16-17: the mapping's direction; bit 18: a
/// resource (MMIO) mapping (`flags::RESOURCE`). What `stack_mode::SUSPECT`
/// compares an unmap or a sync with; userspace reads neither.
pub const DIR_SHIFT: u32 = 16;
pub const RESOURCE_BIT: u32 = 1 << 18;
/// The event kind's bits of `MapValue::kind`.
pub const KIND_MASK: u32 = 0xffff;

/// One mapping in this many is timed unless `--lifetime-sample` says
/// otherwise: at a million unmaps a second, 62 500 lifetimes a second
/// still fill every log2 bucket that occurs.
pub const DEFAULT_SAMPLE: u32 = 16;

/// log2 of the slot table's size: 131 072 slots of 40 bytes (5 MiB), twice
/// the hash's 65 536 entries, so that a table holding as many mappings as
/// the hash could is half full and a probe run rarely ends without a slot.
pub const SLOT_BITS: u32 = 17;
pub const SLOT_COUNT: u32 = 1 << SLOT_BITS;
/// Slots looked at per map or unmap (from the hashed one on). A map that
/// finds none free is not tracked and counted (`stat::MAPPINGS_FULL`), an
/// unmap that finds none is counted (`stat::LIFETIME_UNMATCHED`): a run of
/// 8 keeps both cheap (8 slots are 320 bytes, a few cache lines) while at
/// half load a map fails about once in 2^8 runs of occupied slots.
pub const SLOT_PROBES: u32 = 8;

/// Pages of one device whose slots lie side by side: a 256 KiB window of
/// DMA addresses hashes to one block of 64 slots (2.5 KiB). IOVA allocators
/// hand out neighbouring addresses, so a driver's maps and unmaps stay
/// within a few cache lines and one page of the table; hashing every page
/// on its own cost a cache and TLB miss per map (337 ns net per map in the
/// bench, where the hash's warm free list cost 152).
pub const SLOT_BLOCK_BITS: u32 = 6;

/// The first slot of (device, DMA address)'s probe run: the address's
/// window hashed with the device (Fibonacci hashing) picks the block, the
/// page picks the slot in it.
#[inline(always)]
pub const fn slot_of(dev: u64, addr: u64) -> u32 {
    let window = (addr >> (12 + SLOT_BLOCK_BITS)) ^ dev.rotate_left(29);
    let block = window.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - (SLOT_BITS - SLOT_BLOCK_BITS));
    let page = (addr >> 12) & ((1 << SLOT_BLOCK_BITS) - 1);
    ((block << SLOT_BLOCK_BITS) | page) as u32
}

/// Key of `MAPPINGS` (the hash form).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MapKey {
    pub dev: u64,
    /// DMA address (first entry's for a scatterlist).
    pub addr: u64,
}

/// Value of `MAPPINGS`: one outstanding DMA-API mapping.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapValue {
    pub ts_ns: u64,
    pub size: u64,
    pub pid: u32,
    /// `kind::DMA_MAP` or `kind::DMA_MAP_SG`, with `TIMED` where the
    /// mapping's lifetime is timed, its direction at `DIR_SHIFT` and
    /// `RESOURCE_BIT`.
    pub kind: u32,
}

impl MapValue {
    /// The event kind, without the `TIMED` bit and the shape.
    pub const fn event_kind(&self) -> u32 {
        self.kind & KIND_MASK
    }

    /// Whether the start is the fine clock's and the unmap times it.
    pub const fn timed(&self) -> bool {
        self.kind & TIMED != 0
    }
}

/// One slot of `MAPPING_SLOTS`. `dev` is the claim word: 0 is a free slot,
/// and a map takes a slot by exchanging 0 for its device; an unmap clears
/// `addr` and then `dev`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapSlot {
    pub dev: u64,
    pub addr: u64,
    pub value: MapValue,
}

impl MapSlot {
    /// The slot's mapping as the hash form holds it, when it holds one.
    pub fn entry(&self) -> Option<(MapKey, MapValue)> {
        (self.dev != 0).then_some((
            MapKey {
                dev: self.dev,
                addr: self.addr,
            },
            self.value,
        ))
    }
}

const _: () = assert!(core::mem::size_of::<MapKey>() == 16);
const _: () = assert!(core::mem::size_of::<MapValue>() == 24);
const _: () = assert!(core::mem::size_of::<MapSlot>() == 40);

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;

    #[test]
    fn one_devices_pages_spread_over_the_table() {
        // 4096 consecutive pages of one device: the first slots of their
        // runs must not pile up (a probe run is 8 slots).
        let dev = 0xffff_8881_0a3c_0000u64;
        let mut used = std::collections::HashMap::<u32, u32>::new();
        for p in 0..4096u64 {
            let s = slot_of(dev, 0x1_0000_0000 + p * 4096);
            assert!(s < SLOT_COUNT);
            *used.entry(s).or_default() += 1;
        }
        // Neighbouring pages take neighbouring slots, so none share one.
        let worst = used.values().copied().max().unwrap_or(0);
        assert_eq!(worst, 1, "{worst} pages share a first slot");
        assert_eq!(slot_of(dev, 0x1_0000_1000), slot_of(dev, 0x1_0000_0000) + 1);
        let empty = MapSlot::default();
        assert_eq!(empty.entry(), None);
    }
}
