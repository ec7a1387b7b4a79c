//! The kernel's own tables: its loss-free per-device counters
//! (`DEV_COUNTERS`), and aggregate-only mode's substitute for streamed
//! mapping tracking: the table of outstanding DMA-API mappings
//! (`MAPPINGS`, a bounded hash) and the log2 lifetime histograms
//! (`LAT_HIST`, op `LIFETIME`).
//!
//! The table replaces the DMA-API level's outstanding set on each refresh,
//! so outstanding counts, long-lived listings and fault correlation
//! ("inside a live mapping") work in both modes from the same code.

use std::{collections::BTreeMap, sync::Arc};

use gpudirect_trace_common::{kind, op, Counter, CounterKey, LatHist, MapKey, MapValue};

use super::{dma_api::is_sync, latency::LatencySnapshot, level::Percentiles, Aggregator};

/// Adds a counter row's calls and bytes to a running (calls, bytes) pair;
/// saturating, as every sum here: the counters may come from a crafted file.
fn add(count: &mut u64, bytes: &mut u64, c: &Counter) {
    *count = count.saturating_add(c.count);
    *bytes = bytes.saturating_add(c.bytes);
}

impl Aggregator {
    /// Replaces stream-derived counts with the kernel's per-CPU counters,
    /// which no ring buffer overflow can lose (and which are the only source
    /// in aggregate-only mode). Histograms and outstanding mappings stay
    /// stream-derived.
    pub fn apply_kernel_counters(&mut self, counters: &[(Arc<str>, CounterKey, Counter)]) {
        let mut per_dev: BTreeMap<Arc<str>, Vec<(CounterKey, Counter)>> = BTreeMap::new();
        let held = self.units.descriptors.len() * super::inval::COUNT_ROW_BYTES;
        crate::memory_budget::give(crate::memory_budget::Keeper::Rows, held);
        self.units.descriptors.clear();
        for (name, k, c) in counters {
            // Process exits are counted too (under dev 0), but no device's.
            if !kind::info(k.event_kind()).class.about_devices() {
                continue;
            }
            // Descriptors are counted per unit, not per device.
            if k.event_kind() == kind::QI_DESCRIPTOR {
                let Some(d) = super::inval::count_row(&mut self.units.descriptors, k.dir) else {
                    continue;
                };
                add(&mut d.count, &mut d.bytes, c);
                continue;
            }
            per_dev.entry(name.clone()).or_default().push((*k, *c));
        }
        for (name, list) in per_dev {
            let unattributed = &*name == super::UNATTRIBUTED;
            // Invalidations: (count, ns) per class; those the stream moved
            // to a device named by the descriptor leave the unattributed row.
            let mut inval_rows: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
            let mut tags: BTreeMap<u32, Counter> = BTreeMap::new();
            for (k, c) in &list {
                match k.event_kind() {
                    kind::IOMMU_INVAL => {
                        let r = inval_rows.entry(k.dir).or_default();
                        add(&mut r.0, &mut r.1, c);
                    }
                    kind::CACHE_TAG_FLUSH => {
                        let Some(t) = super::inval::count_row(&mut tags, k.dir) else {
                            continue;
                        };
                        add(&mut t.count, &mut t.bytes, c);
                    }
                    _ => {}
                }
            }
            if unattributed {
                for (class, r) in inval_rows.iter_mut() {
                    *r = self.units.unrouted(*class, *r);
                }
            }
            let d = self.device(&name);
            d.inval.set_kernel(&inval_rows);
            let held = d.inval.tags.len() * super::inval::COUNT_ROW_BYTES;
            crate::memory_budget::give(crate::memory_budget::Keeper::Rows, held);
            d.inval.tags = tags;
            // Saturating sums: the counters may come from a crafted file.
            let mut dma = (0u64, 0u64, 0u64, 0u64);
            let mut by_dir = [0u64; 4];
            let mut iommu = (0u64, 0u64, 0u64, 0u64);
            let mut coherent = (0u64, 0u64, 0u64, 0u64);
            let mut sg_maps = 0u64;
            let mut hits = 0u64;
            let (mut truncated, mut unmap_truncated, mut syncs) = (0u64, 0u64, (0u64, 0u64));
            let mut iova: BTreeMap<(u16, bool), (u64, u64)> = BTreeMap::new();
            for (k, c) in list {
                let k16 = k.kind as u16;
                if kind::is_hit(k16) {
                    hits = hits.saturating_add(c.count);
                }
                d.dma_api.note_source(k16, k.from_hook(), k.iova(), false);
                d.families.counter(&k, &c);
                let e = iova.entry((k16, k.iova())).or_default();
                add(&mut e.0, &mut e.1, &c);
                match k16 {
                    kind::DMA_MAP | kind::DMA_MAP_SG => {
                        add(&mut dma.0, &mut dma.2, &c);
                        if let Some(b) = by_dir.get_mut(k.dir as usize) {
                            *b = b.saturating_add(c.bytes);
                        }
                        if k.kind as u16 == kind::DMA_MAP_SG {
                            sg_maps = sg_maps.saturating_add(c.count);
                        }
                    }
                    kind::DMA_UNMAP | kind::DMA_UNMAP_SG => add(&mut dma.1, &mut dma.3, &c),
                    kind::IOMMU_MAP => add(&mut iommu.0, &mut iommu.2, &c),
                    kind::IOMMU_UNMAP => add(&mut iommu.1, &mut iommu.3, &c),
                    kind::DMA_ALLOC => add(&mut coherent.0, &mut coherent.2, &c),
                    kind::DMA_FREE => add(&mut coherent.1, &mut coherent.3, &c),
                    k if is_sync(k) => add(&mut syncs.0, &mut syncs.1, &c),
                    // Counter-only kinds: maps (unmaps) whose walk stopped early.
                    kind::SG_TRUNCATED => truncated = truncated.saturating_add(c.count),
                    kind::SG_UNMAP_TRUNCATED => {
                        unmap_truncated = unmap_truncated.saturating_add(c.count)
                    }
                    _ => {}
                }
            }
            let x = &mut d.dma_api;
            (x.sg_truncated, x.sg_unmap_truncated) = (truncated, unmap_truncated);
            (x.syncs, x.sync_bytes) = syncs;
            x.set_iova_counters(&iova);
            if x.unmap_not_needed > 0 {
                d.dma.skip_unmaps();
            }
            for (level, (m, u, bm, bu)) in [
                (&mut d.dma, dma),
                (&mut d.iommu, iommu),
                (&mut d.coherent, coherent),
            ] {
                level.maps = m;
                level.unmaps = u;
                level.bytes_mapped = bm;
                level.bytes_unmapped = bu;
            }
            d.bytes_by_dir = by_dir;
            d.sg_maps = sg_maps;
            d.kernel_hits = hits;
        }
    }

    /// Takes the kernel's per-(device, op) log2 latency histograms (summed
    /// over CPUs); used where no latency was streamed (aggregate-only).
    pub fn apply_kernel_latency(&mut self, hists: &[(Arc<str>, u32, LatHist)]) {
        for (name, o, h) in hists {
            self.device(name).kernel_latency.insert(*o, *h);
        }
    }

    /// Takes the kernel's per-(device, class) log2 invalidation histograms
    /// (aggregate-only mode), summed over CPUs.
    pub fn apply_kernel_invalidations(&mut self, hists: &[(Arc<str>, u32, LatHist)]) {
        let mut per: BTreeMap<(Arc<str>, u32), LatHist> = BTreeMap::new();
        for (name, class, h) in hists {
            let key = (name.clone(), class & !gpudirect_trace_common::inval::NESTED);
            let sum = match per.get(&key) {
                Some(prev) => super::sum_log2([prev, h].into_iter()),
                None => *h,
            };
            per.insert(key, sum);
        }
        for ((name, class), h) in per {
            self.device(&name)
                .inval
                .by_class
                .entry(class)
                .or_default()
                .kernel_log2 = Some(h);
        }
    }

    /// Takes the kernel's outstanding DMA-API mappings (rows by device name)
    /// as the DMA-API level's outstanding set of every device.
    pub fn apply_kernel_mappings(&mut self, rows: &[(Arc<str>, MapKey, MapValue)]) {
        // (addr, size, ts_ns, pid) per device, as Level::replace_outstanding takes them.
        type Outstanding = Vec<(u64, u64, u64, u32)>;
        let mut by_device: BTreeMap<&Arc<str>, Outstanding> = BTreeMap::new();
        for (name, k, v) in rows {
            by_device
                .entry(name)
                .or_default()
                .push((k.addr, v.size, v.ts_ns, v.pid));
        }
        for d in self.devices.values_mut() {
            d.dma.replace_outstanding(std::iter::empty());
        }
        for (name, maps) in by_device {
            self.device(name).dma.replace_outstanding(maps.into_iter());
        }
    }
}

/// The lifetime percentiles the kernel kept for a device, where userspace
/// saw no lifetimes itself (aggregate-only).
pub(super) fn kernel_lifetimes(
    kernel_latency: &BTreeMap<u32, gpudirect_trace_common::LatHist>,
) -> Option<Percentiles> {
    let h = kernel_latency.get(&op::LIFETIME).filter(|h| h.count > 0)?;
    let l = LatencySnapshot::of_log2(h);
    Some(Percentiles {
        count: l.count,
        p50: l.p50,
        p90: l.p90,
        p99: l.p99,
        max: l.max,
    })
}
