//! What the programs count of themselves (lost events, name failures, full
//! tables, hits per kind) and the per-device counters they keep, summed over
//! CPUs, over the nesting copies and over each CPU's counter cache.

use std::{collections::BTreeMap, sync::Arc};

use gpudirect_trace_common::{kind, stat, Counter, CounterKey};
use serde::Serialize;

use super::{maps, Tracer};

/// Counts the programs keep about themselves, summed over CPUs.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SelfStats {
    /// Events the ring buffer had no room for.
    pub lost_events: u64,
    pub device_name_failures: u64,
    pub device_map_full: u64,
    /// Timed calls not timed: both nesting slots of their level were busy.
    pub timing_nest_full: u64,
    /// Unmaps whose mapping the in-kernel table did not hold (aggregate-only
    /// lifetimes, or `--stacks`' filter: mapped before the trace, or the
    /// table was full).
    pub lifetime_unmatched: u64,
    /// DMA-API mappings the in-kernel table had no room for.
    pub mappings_untracked: u64,
    /// DMA-API maps a kretprobe could not report (its kprobe entry kept no
    /// arguments): lost, and counted here.
    pub hook_args_missing: u64,
    /// DMA-API calls whose kernel stack could not be kept (`--stacks`).
    pub stacks_lost: u64,
    /// Tracepoint hits per event kind (index = `gpudirect_trace_common::kind`).
    pub hits: Vec<u64>,
    /// Times the kernel skipped one of our programs because it was already
    /// running on that CPU (e.g. the tracepoint fired again from an interrupt):
    /// events never seen, not even counted in maps. From the programs'
    /// `recursion_misses` (fdinfo, Linux 5.12+; 0 where not reported), and
    /// for kprobes from kprobe_profile (`kprobe_events`, every kernel).
    pub missed_events: u64,
}

impl SelfStats {
    pub fn total_hits(&self) -> u64 {
        self.hits.iter().sum()
    }
}

impl Tracer {
    /// The programs' self-metrics, reading DEV_COUNTERS for the hit counts
    /// (tests; the session has just read them and calls `self_stats_with`).
    #[cfg(any(test, feature = "test-support"))]
    pub fn self_stats(&self) -> SelfStats {
        let merged = self.merged_counters();
        self.self_stats_with(&merged)
    }

    /// `self_stats` with the hit counts taken from counters already read.
    pub fn self_stats_with<'a>(
        &self,
        counters: impl IntoIterator<Item = (&'a CounterKey, &'a Counter)>,
    ) -> SelfStats {
        let sum = maps::cpu_sum;
        // Every event counted in DEV_COUNTERS is a hit of its kind; HITS
        // holds the rest (kinds without counters, or a full counter map).
        let mut hits: Vec<u64> = (0..kind::COUNT).map(|k| sum(&self.maps.hits, k)).collect();
        for (key, c) in counters {
            // Truncated walks are not hits of their own (the descriptor and
            // cache-tag counters are: each is a tracepoint hit).
            if !kind::is_hit(key.event_kind()) {
                continue;
            }
            if let Some(h) = hits.get_mut(key.event_kind() as usize) {
                *h += c.count;
            }
        }
        SelfStats {
            lost_events: sum(&self.maps.stats, stat::RINGBUF_LOST),
            device_name_failures: sum(&self.maps.stats, stat::DEVICE_NAME_FAILED),
            device_map_full: sum(&self.maps.stats, stat::DEVICE_MAP_FULL),
            timing_nest_full: sum(&self.maps.stats, stat::TIMING_NEST_FULL),
            lifetime_unmatched: sum(&self.maps.stats, stat::LIFETIME_UNMATCHED),
            mappings_untracked: sum(&self.maps.stats, stat::MAPPINGS_FULL),
            hook_args_missing: sum(&self.maps.stats, stat::HOOK_ARGS_MISSING),
            stacks_lost: sum(&self.maps.stats, stat::STACK_LOST),
            hits,
            missed_events: self.missed_runs(),
        }
    }

    /// DEV_COUNTERS summed over CPUs and over the nesting copies of each
    /// counter (`COUNTER_SLOTS`), plus what each CPU's counter cache holds
    /// (`COUNTER_CACHE`): one entry per (device, kind, direction).
    pub(super) fn merged_counters(&self) -> BTreeMap<CounterKey, Counter> {
        let mut merged: BTreeMap<CounterKey, Counter> = BTreeMap::new();
        for (k, per_cpu) in self.maps.counters.iter().filter_map(Result::ok) {
            let key = k.merged();
            let total = merged.entry(key).or_default();
            for c in per_cpu.iter() {
                total.count += c.count;
                total.bytes += c.bytes;
            }
        }
        if let Ok(per_cpu) = self.maps.cpu_state.get(&0, 0) {
            for st in per_cpu.iter() {
                for (k, c) in st.cache_keys.iter().zip(&st.cache) {
                    // Kind 0 is no event: a slot never used.
                    if k.event_kind() == 0 || c.count == 0 {
                        continue;
                    }
                    let total = merged.entry(k.merged()).or_default();
                    total.count += c.count;
                    total.bytes += c.bytes;
                }
            }
        }
        merged
    }

    /// The in-kernel per-(device, kind, direction) counters, summed over CPUs
    /// and keyed by device name.
    /// A device that left the bus keeps its counts under its name; a new
    /// device at its address counts from zero (`forget_device`).
    pub fn kernel_counters(&mut self) -> Vec<(Arc<str>, CounterKey, Counter)> {
        let merged = self.merged_counters();
        self.counters_by_name(merged)
    }
}
