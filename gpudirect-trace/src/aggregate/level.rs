//! One level of mappings (DMA API, IOMMU, coherent) for one device: counts,
//! bytes, mapped-size distribution, outstanding mappings, their lifetimes
//! and the oldest ones (leak suspects).

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{
    outstanding::{Mapping, Outstanding},
    procs::Procs,
    MAX_TRACKED,
};
use crate::memory_budget::{self, Keeper};

/// What one tracked mapping costs the reader's memory budget: its key and
/// value (32 bytes) and its share of the table (B-tree nodes, or a hash
/// table's free slots).
pub const MAPPING_BYTES: usize = 64;

pub struct Level {
    pub maps: u64,
    pub unmaps: u64,
    pub bytes_mapped: u64,
    pub bytes_unmapped: u64,
    pub sizes: Histogram<u64>,
    /// Exact largest size (the histogram's max is rounded up to its bucket).
    pub max_size: u64,
    /// Map-to-unmap durations (ns) of mappings seen both mapped and unmapped.
    pub lifetimes: Histogram<u64>,
    pub max_lifetime: u64,
    /// By start address: an unmap may cover several mappings (one
    /// iommu_unmap for the IOVA range of a whole scatterlist).
    outstanding: Outstanding,
    pub outstanding_bytes: u64,
    /// Mappings not tracked because `MAX_TRACKED` was reached.
    pub untracked: u64,
    /// Unmaps of addresses mapped before the trace started.
    pub unmatched_unmaps: u64,
    /// Mappings and outstanding bytes by the pid that made them.
    pub procs: Procs,
    /// The kernel does not unmap this level's mappings (dma_need_unmap()
    /// said false): what was mapped and not unmapped is "skipped", never
    /// outstanding or a leak.
    pub unmaps_skipped: bool,
}

impl Default for Level {
    fn default() -> Self {
        let hist = || Histogram::new(3).expect("3 significant digits is a valid histogram");
        Self {
            maps: 0,
            unmaps: 0,
            bytes_mapped: 0,
            bytes_unmapped: 0,
            sizes: hist(),
            max_size: 0,
            lifetimes: hist(),
            max_lifetime: 0,
            outstanding: Outstanding::default(),
            outstanding_bytes: 0,
            untracked: 0,
            unmatched_unmaps: 0,
            procs: Procs::default(),
            unmaps_skipped: false,
        }
    }
}

/// An outstanding mapping older than the long-lived threshold.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LongLived {
    pub address: String,
    pub size: u64,
    pub age_s: f64,
    pub pid: u32,
}

impl Level {
    pub fn map(&mut self, addr: u64, size: u64, ts_ns: u64, pid: u32) {
        self.map_entries(addr, size, std::iter::once(size), ts_ns, pid);
    }

    /// One mapping of `size` bytes at `addr` made of entries of `entry_sizes`
    /// (one entry for page mappings; the scatterlist's for sg mappings).
    pub fn map_entries(
        &mut self,
        addr: u64,
        size: u64,
        entry_sizes: impl Iterator<Item = u64>,
        ts_ns: u64,
        pid: u32,
    ) {
        self.maps += 1;
        // Saturating: sizes come from trace files too (crafted ones
        // overflowed: a panic in debug builds, wrapped totals in release).
        self.bytes_mapped = self.bytes_mapped.saturating_add(size);
        for s in entry_sizes {
            record(&mut self.sizes, s);
            self.max_size = self.max_size.max(s);
        }
        if self.unmaps_skipped {
            self.procs.map(pid, size, ts_ns, false);
            return;
        }
        // Past the table's cap or the reader's memory budget, a mapping is
        // counted as outstanding but not tracked (its unmap then unmatched).
        if self.outstanding.len() >= MAX_TRACKED
            || !memory_budget::take_or_drop(Keeper::Mappings, MAPPING_BYTES)
        {
            self.untracked += 1;
            self.procs.map(pid, size, ts_ns, false);
            return;
        }
        self.procs.map(pid, size, ts_ns, true);
        let m = Mapping { size, ts_ns, pid };
        if let Some(old) = self.outstanding.insert(addr, m) {
            memory_budget::give(Keeper::Mappings, MAPPING_BYTES);
            // Re-mapped without an unmap we saw: keep bytes consistent.
            self.outstanding_bytes = self.outstanding_bytes.saturating_sub(old.size);
            self.procs.unmapped(old.pid, old.size, ts_ns);
        }
        self.outstanding_bytes = self.outstanding_bytes.saturating_add(size);
    }

    /// Unmaps the mapping whose handle is `addr` (the DMA API's contract:
    /// dma_unmap_* and dma_free_* take exactly what the map returned). A
    /// scatterlist's entries are not contiguous without an IOMMU, so a range
    /// would swallow other mappings that start inside it.
    pub fn unmap_handle(&mut self, addr: u64, size: u64, ts_ns: u64) {
        self.unmaps += 1;
        self.bytes_unmapped = self.bytes_unmapped.saturating_add(size);
        match self.outstanding.remove(addr) {
            Some(m) => {
                memory_budget::give(Keeper::Mappings, MAPPING_BYTES);
                self.outstanding_bytes = self.outstanding_bytes.saturating_sub(m.size);
                self.procs.unmapped(m.pid, m.size, ts_ns);
                let life = ts_ns.saturating_sub(m.ts_ns);
                record(&mut self.lifetimes, life);
                self.max_lifetime = self.max_lifetime.max(life);
            }
            None => self.unmatched_unmaps += 1,
        }
    }

    /// Unmaps `[addr, addr + size)` (an IOMMU unmap of an IOVA range): every
    /// mapping starting in that range ends; the lifetime recorded is the
    /// oldest one's.
    pub fn unmap(&mut self, addr: u64, size: u64, ts_ns: u64) {
        self.unmaps += 1;
        self.bytes_unmapped = self.bytes_unmapped.saturating_add(size);
        let end = addr.saturating_add(size.max(1));
        let mut oldest: Option<u64> = None;
        for m in self.outstanding.remove_range(addr, end) {
            memory_budget::give(Keeper::Mappings, MAPPING_BYTES);
            self.outstanding_bytes = self.outstanding_bytes.saturating_sub(m.size);
            self.procs.unmapped(m.pid, m.size, ts_ns);
            oldest = Some(oldest.map_or(m.ts_ns, |o| o.min(m.ts_ns)));
        }
        match oldest {
            Some(t) => {
                let life = ts_ns.saturating_sub(t);
                record(&mut self.lifetimes, life);
                self.max_lifetime = self.max_lifetime.max(life);
            }
            None => self.unmatched_unmaps += 1,
        }
    }

    /// Unmaps `[addr, addr + size)` of an IOVA space (dma_iova_unlink, or
    /// dma_iova_destroy ending all its links): every mapping starting in
    /// the range ends, each an unmap with its own lifetime. An IOVA range
    /// is the device's alone, so no other mapping starts inside it.
    pub fn unmap_each(&mut self, addr: u64, size: u64, ts_ns: u64) {
        self.bytes_unmapped = self.bytes_unmapped.saturating_add(size);
        let end = addr.saturating_add(size.max(1));
        let ended = self.outstanding.remove_range(addr, end);
        if ended.is_empty() {
            self.unmaps += 1;
            self.unmatched_unmaps += 1;
            return;
        }
        for m in ended {
            memory_budget::give(Keeper::Mappings, MAPPING_BYTES);
            self.unmaps += 1;
            self.outstanding_bytes = self.outstanding_bytes.saturating_sub(m.size);
            self.procs.unmapped(m.pid, m.size, ts_ns);
            let life = ts_ns.saturating_sub(m.ts_ns);
            record(&mut self.lifetimes, life);
            self.max_lifetime = self.max_lifetime.max(life);
        }
    }

    /// From now on the kernel skips this level's unmaps: what is
    /// outstanding is counted as skipped, and new mappings are not tracked.
    pub fn skip_unmaps(&mut self) {
        if self.unmaps_skipped {
            return;
        }
        self.unmaps_skipped = true;
        memory_budget::give(Keeper::Mappings, self.outstanding.len() * MAPPING_BYTES);
        // In address order, as ever: a pid's row may be made here, within
        // the memory budget, first come first served.
        for (_, m) in self.outstanding.take_sorted() {
            self.procs.forget(m.pid, m.size);
        }
        self.untracked = 0;
        self.outstanding_bytes = 0;
    }

    /// Mappings (and bytes) the kernel did not unmap because it need not.
    pub fn skipped(&self) -> (u64, u64) {
        if !self.unmaps_skipped {
            return (0, 0);
        }
        (
            self.maps.saturating_sub(self.unmaps),
            self.bytes_mapped.saturating_sub(self.bytes_unmapped),
        )
    }

    /// Replaces the outstanding set with `maps` (addr, size, ts_ns, pid):
    /// aggregate-only mode, where the kernel's table is the truth.
    pub fn replace_outstanding(&mut self, maps: impl Iterator<Item = (u64, u64, u64, u32)>) {
        // The kernel's table holds the device's first maps from before it
        // learnt that their unmaps are skipped: not outstanding either.
        if self.unmaps_skipped {
            return;
        }
        memory_budget::give(Keeper::Mappings, self.outstanding.len() * MAPPING_BYTES);
        self.outstanding.clear();
        self.outstanding_bytes = 0;
        let mut by_pid: std::collections::HashMap<u32, (u64, u64)> = Default::default();
        for (addr, size, ts_ns, pid) in maps {
            self.outstanding_bytes = self.outstanding_bytes.saturating_add(size);
            // The kernel's table is bounded by the kernel (live only).
            if self
                .outstanding
                .insert(addr, Mapping { size, ts_ns, pid })
                .is_none()
            {
                memory_budget::charge(Keeper::Mappings, MAPPING_BYTES);
            }
            let e = by_pid.entry(pid).or_default();
            e.0 += 1;
            e.1 += size;
        }
        self.procs.set_outstanding(&by_pid);
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// The live mapping `addr` is inside, as (map time, pid), if this level
    /// saw one mapped and not yet unmapped (a scan of the mappings starting
    /// at or below `addr`: used only for rare events such as faults).
    pub fn covering(&self, addr: u64) -> Option<(u64, u32)> {
        self.outstanding.covering(addr).map(|m| (m.ts_ns, m.pid))
    }

    /// The oldest outstanding mappings older than `threshold_ns` at `now_ns`.
    pub fn long_lived(&self, now_ns: u64, threshold_ns: u64, limit: usize) -> Vec<LongLived> {
        // By address, then (a stable sort) by age: ties stay by address.
        let mut old = self
            .outstanding
            .sorted_where(|m| now_ns.saturating_sub(m.ts_ns) >= threshold_ns);
        old.sort_by_key(|(_, m)| m.ts_ns);
        old.into_iter()
            .take(limit)
            .map(|(a, m)| LongLived {
                address: format!("{a:#x}"),
                size: m.size,
                age_s: now_ns.saturating_sub(m.ts_ns) as f64 / 1e9,
                pid: m.pid,
            })
            .collect()
    }

    pub fn snapshot(&self) -> LevelSnapshot {
        LevelSnapshot {
            maps: self.maps,
            unmaps: self.unmaps,
            bytes_mapped: self.bytes_mapped,
            bytes_unmapped: self.bytes_unmapped,
            size: Percentiles {
                max: self.max_size,
                ..Percentiles::of(&self.sizes)
            },
            lifetime_ns: Percentiles {
                max: self.max_lifetime,
                ..Percentiles::of(&self.lifetimes)
            },
            outstanding_mappings: self.outstanding.len() as u64 + self.untracked,
            outstanding_bytes: self.outstanding_bytes,
            unmaps_skipped: self.skipped().0,
            unmaps_skipped_bytes: self.skipped().1,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            count: h.len(),
            p50: h.value_at_quantile(0.50),
            p90: h.value_at_quantile(0.90),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LevelSnapshot {
    pub maps: u64,
    pub unmaps: u64,
    pub bytes_mapped: u64,
    pub bytes_unmapped: u64,
    pub size: Percentiles,
    /// Map-to-unmap time of mappings seen both mapped and unmapped.
    pub lifetime_ns: Percentiles,
    pub outstanding_mappings: u64,
    pub outstanding_bytes: u64,
    /// Mappings the kernel did not unmap because it need not
    /// (dma_need_unmap() false): neither outstanding nor leaks.
    #[serde(skip_serializing_if = "is_zero")]
    pub unmaps_skipped: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub unmaps_skipped_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Records into an auto-resizing histogram (saturating_record would clamp to
/// the current, initially tiny, range instead of growing it). Growth is
/// charged to the reader's memory budget (`memory_budget`, keeper
/// `Histograms`): a 3-significant-digit histogram takes 8 KiB more per power
/// of two of its range, ~420 KiB at the top of u64, and a 3 KB crafted trace
/// feeding u64-range values to 26 histograms of each of 256 devices made
/// `report` use 2.9 GB. Without room, the value is recorded at the
/// histogram's current top and counted (counts and maxima stay exact). Live
/// tracing has no budget: real ranges (sizes to GiBs, times to hours) stay
/// far below that.
pub fn record(h: &mut Histogram<u64>, value: u64) {
    let v = value.max(1);
    if v <= h.high() {
        h.saturating_record(v);
        return;
    }
    if !memory_budget::has_room(Keeper::Histograms) {
        memory_budget::dropped(Keeper::Histograms, 1);
        h.saturating_record(v);
        return;
    }
    let before = h.distinct_values();
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
    // Its counts grow as a Vec does: up to twice what they hold.
    let grown = h.distinct_values().saturating_sub(before) * std::mem::size_of::<u64>();
    memory_budget::charge(Keeper::Histograms, 2 * grown);
}
