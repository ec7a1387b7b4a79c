//! Per-device aggregation: counts and bytes by operation and direction,
//! mapped-size distributions (HdrHistogram), outstanding mappings, and the
//! latest notable events (faults, Xids, errors, IOMMU group changes).
//!
//! Three levels are kept apart because they answer different questions and
//! one DMA-API call can cause several IOMMU operations: `dma` (streaming DMA
//! API: dma_map_page/phys/resource/sg), `iommu` (IOMMU page-table maps) and
//! `coherent` (dma_alloc/free). The flat `maps`/`unmaps`/`bytes_mapped`
//! fields report the DMA-API view when the kernel traces it (6.8+), else the
//! IOMMU view, and say which in `level`.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::Arc,
};

use gpudirect_trace_common::{kind, Counter, CounterKey, Event};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::decode::{c_string, dir_name, kind_name, Record};

/// Device name used for events that carry no device (iommu:map/unmap).
pub const UNATTRIBUTED: &str = "(iommu, unattributed)";
/// Outstanding mappings tracked per device and level before new ones are
/// only counted (bounded memory on hosts with millions of live mappings).
pub const MAX_TRACKED: usize = 1 << 20;
/// Notable events kept for display.
pub const RECENT_KEPT: usize = 64;

pub struct Level {
    pub maps: u64,
    pub unmaps: u64,
    pub bytes_mapped: u64,
    pub bytes_unmapped: u64,
    pub sizes: Histogram<u64>,
    /// Exact largest size (the histogram's max is rounded up to its bucket).
    pub max_size: u64,
    outstanding: HashMap<u64, u64>,
    pub outstanding_bytes: u64,
    /// Mappings not tracked because `MAX_TRACKED` was reached.
    pub untracked: u64,
    /// Unmaps of addresses mapped before the trace started.
    pub unmatched_unmaps: u64,
}

impl Default for Level {
    fn default() -> Self {
        Self {
            maps: 0,
            unmaps: 0,
            bytes_mapped: 0,
            bytes_unmapped: 0,
            sizes: Histogram::new(3).expect("3 significant digits is a valid histogram"),
            max_size: 0,
            outstanding: HashMap::new(),
            outstanding_bytes: 0,
            untracked: 0,
            unmatched_unmaps: 0,
        }
    }
}

impl Level {
    fn map(&mut self, addr: u64, size: u64) {
        self.map_entries(addr, size, std::iter::once(size));
    }

    /// One mapping of `size` bytes at `addr` made of entries of `entry_sizes`
    /// (one entry for page mappings; the scatterlist's for sg mappings).
    fn map_entries(&mut self, addr: u64, size: u64, entry_sizes: impl Iterator<Item = u64>) {
        self.maps += 1;
        self.bytes_mapped += size;
        for s in entry_sizes {
            record(&mut self.sizes, s);
            self.max_size = self.max_size.max(s);
        }
        if self.outstanding.len() >= MAX_TRACKED {
            self.untracked += 1;
            return;
        }
        if let Some(old) = self.outstanding.insert(addr, size) {
            // Re-mapped without an unmap we saw: keep bytes consistent.
            self.outstanding_bytes -= old;
        }
        self.outstanding_bytes += size;
    }

    fn unmap(&mut self, addr: u64, size: u64) {
        self.unmaps += 1;
        self.bytes_unmapped += size;
        match self.outstanding.remove(&addr) {
            Some(s) => self.outstanding_bytes -= s,
            None => self.unmatched_unmaps += 1,
        }
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Whether `addr` is inside a mapping this level saw and has not seen
    /// unmapped (linear scan: used only for rare events such as faults).
    pub fn covers(&self, addr: u64) -> bool {
        self.outstanding
            .iter()
            .any(|(&a, &s)| addr >= a && addr < a.saturating_add(s.max(1)))
    }

    fn snapshot(&self) -> LevelSnapshot {
        LevelSnapshot {
            maps: self.maps,
            unmaps: self.unmaps,
            bytes_mapped: self.bytes_mapped,
            bytes_unmapped: self.bytes_unmapped,
            size: Percentiles {
                max: self.max_size,
                ..Percentiles::of(&self.sizes)
            },
            outstanding_mappings: self.outstanding.len() as u64 + self.untracked,
            outstanding_bytes: self.outstanding_bytes,
        }
    }
}

#[derive(Default)]
pub struct DeviceStats {
    pub dma: Level,
    pub iommu: Level,
    pub coherent: Level,
    /// Bytes of streaming DMA-API mappings by `enum dma_data_direction`.
    pub bytes_by_dir: [u64; 4],
    pub sg_maps: u64,
    pub sg_entries: u64,
    pub swiotlb_bounces: u64,
    pub swiotlb_bytes: u64,
    pub map_errors: u64,
    pub faults: u64,
    pub xids: u64,
    pub events: u64,
    events_at_last_snapshot: u64,
    pub iommu_group: Option<u32>,
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
    pub outstanding_mappings: u64,
    pub outstanding_bytes: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DeviceSnapshot {
    pub device: String,
    /// "dma" or "iommu": which level the flat fields below report.
    pub level: &'static str,
    pub maps: u64,
    pub unmaps: u64,
    pub bytes_mapped: u64,
    pub bytes_unmapped: u64,
    pub map_size: Percentiles,
    pub outstanding_mappings: u64,
    pub outstanding_bytes: u64,
    pub bytes_to_device: u64,
    pub bytes_from_device: u64,
    pub bytes_bidirectional: u64,
    pub sg_maps: u64,
    pub sg_entries: u64,
    pub swiotlb_bounces: u64,
    pub swiotlb_bounced_bytes: u64,
    pub coherent_allocs: u64,
    pub coherent_frees: u64,
    pub coherent_bytes: u64,
    pub map_errors: u64,
    pub faults: u64,
    pub xids: u64,
    pub events: u64,
    pub events_per_sec: f64,
    pub iommu_group: Option<u32>,
    pub dma: LevelSnapshot,
    pub iommu: LevelSnapshot,
}

/// A rare event worth showing on its own line.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Notable {
    pub ts_ns: u64,
    pub kind: &'static str,
    pub device: String,
    pub pid: u32,
    /// Hex address ("0x…") where the event has one.
    pub address: Option<String>,
    pub detail: String,
}

#[derive(Default)]
pub struct Aggregator {
    pub devices: BTreeMap<Arc<str>, DeviceStats>,
    pub events: u64,
    pub decode_errors: u64,
    pub recent: VecDeque<Notable>,
}

impl Aggregator {
    pub fn new() -> Self {
        Self::default()
    }

    fn device(&mut self, name: &Arc<str>) -> &mut DeviceStats {
        if !self.devices.contains_key(name) {
            self.devices.insert(name.clone(), DeviceStats::default());
        }
        self.devices.get_mut(name).expect("inserted above")
    }

    fn notable(&mut self, ev: &Event, device: &str, address: Option<u64>, detail: String) {
        if self.recent.len() == RECENT_KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back(Notable {
            ts_ns: ev.ts_ns,
            kind: kind_name(ev.kind),
            device: device.to_owned(),
            pid: ev.pid,
            address: address.map(|a| format!("{a:#x}")),
            detail,
        });
    }

    /// Adds one decoded record, attributed to `device`.
    pub fn ingest(&mut self, record: &Record, device: &Arc<str>) {
        self.events += 1;
        let ev = *record.event();
        let d = self.device(device);
        d.events += 1;
        match record {
            Record::Sg(sg) => {
                if ev.kind == kind::DMA_MAP_SG {
                    d.sg_maps += 1;
                    d.sg_entries += u64::from(sg.nents);
                    let lens = &sg.lens[..(sg.n_lens as usize).min(sg.lens.len())];
                    d.dma.map_entries(
                        ev.addr,
                        ev.size,
                        lens.iter().filter(|&&l| l > 0).map(|&l| u64::from(l)),
                    );
                    if let Some(b) = d.bytes_by_dir.get_mut(ev.dir as usize) {
                        *b += ev.size;
                    }
                } else {
                    d.dma.unmap(ev.addr, ev.size);
                }
            }
            Record::Xid(x) => {
                d.xids += 1;
                let detail = format!("Xid {}: {}", x.xid, c_string(&x.msg));
                self.notable(&ev, device, None, detail);
            }
            Record::Event(_) => self.ingest_event(&ev, device),
        }
    }

    fn ingest_event(&mut self, ev: &Event, device: &Arc<str>) {
        let d = self.device(device);
        match ev.kind {
            kind::DMA_MAP => {
                d.dma.map(ev.addr, ev.size);
                if let Some(b) = d.bytes_by_dir.get_mut(ev.dir as usize) {
                    *b += ev.size;
                }
            }
            kind::DMA_UNMAP => d.dma.unmap(ev.addr, ev.size),
            kind::IOMMU_MAP => d.iommu.map(ev.addr, ev.size),
            kind::IOMMU_UNMAP => d.iommu.unmap(ev.addr, ev.aux.max(ev.size)),
            kind::DMA_ALLOC => d.coherent.map(ev.addr, ev.size),
            kind::DMA_FREE => d.coherent.unmap(ev.addr, ev.size),
            kind::SWIOTLB_BOUNCED => {
                d.swiotlb_bounces += 1;
                d.swiotlb_bytes += ev.size;
            }
            kind::DMA_MAP_SG_ERR => {
                d.map_errors += 1;
                let detail = format!(
                    "dma_map_sg failed: error {} ({} entries, {})",
                    ev.aux as i64,
                    ev.size,
                    dir_name(ev.dir)
                );
                self.notable(ev, device, None, detail);
            }
            kind::IO_PAGE_FAULT => {
                d.faults += 1;
                let access = fault_access(ev.aux);
                let detail = format!("IOMMU page fault ({access}, flags {:#x})", ev.aux);
                self.notable(ev, device, Some(ev.addr), detail);
            }
            kind::GROUP_ADD_DEVICE => {
                d.iommu_group = Some(ev.aux as u32);
                let detail = format!("added to IOMMU group {}", ev.aux);
                self.notable(ev, device, None, detail);
            }
            kind::GROUP_REMOVE_DEVICE => {
                d.iommu_group = None;
                let detail = format!("removed from IOMMU group {}", ev.aux);
                self.notable(ev, device, None, detail);
            }
            kind::DOMAIN_ATTACH | kind::DOMAIN_DETACH => {
                let detail = kind_name(ev.kind).replace('_', " ");
                self.notable(ev, device, None, detail);
            }
            _ => {}
        }
    }

    /// Replaces stream-derived counts with the kernel's per-CPU counters,
    /// which no ring buffer overflow can lose (and which are the only source
    /// in aggregate-only mode). Histograms and outstanding mappings stay
    /// stream-derived.
    pub fn apply_kernel_counters(&mut self, counters: &[(Arc<str>, CounterKey, Counter)]) {
        let mut per_dev: BTreeMap<Arc<str>, Vec<(CounterKey, Counter)>> = BTreeMap::new();
        for (name, k, c) in counters {
            per_dev.entry(name.clone()).or_default().push((*k, *c));
        }
        for (name, list) in per_dev {
            let d = self.device(&name);
            let mut dma = (0, 0, 0, 0);
            let mut by_dir = [0u64; 4];
            let mut iommu = (0, 0, 0, 0);
            let mut coherent = (0, 0, 0, 0);
            let mut sg_maps = 0;
            let mut hits = 0;
            for (k, c) in list {
                hits += c.count;
                match k.kind as u16 {
                    kind::DMA_MAP | kind::DMA_MAP_SG => {
                        dma.0 += c.count;
                        dma.2 += c.bytes;
                        if let Some(b) = by_dir.get_mut(k.dir as usize) {
                            *b += c.bytes;
                        }
                        if k.kind as u16 == kind::DMA_MAP_SG {
                            sg_maps += c.count;
                        }
                    }
                    kind::DMA_UNMAP | kind::DMA_UNMAP_SG => {
                        dma.1 += c.count;
                        dma.3 += c.bytes;
                    }
                    kind::IOMMU_MAP => {
                        iommu.0 += c.count;
                        iommu.2 += c.bytes;
                    }
                    kind::IOMMU_UNMAP => {
                        iommu.1 += c.count;
                        iommu.3 += c.bytes;
                    }
                    kind::DMA_ALLOC => {
                        coherent.0 += c.count;
                        coherent.2 += c.bytes;
                    }
                    kind::DMA_FREE => {
                        coherent.1 += c.count;
                        coherent.3 += c.bytes;
                    }
                    kind::SWIOTLB_BOUNCED => {
                        d.swiotlb_bounces = c.count;
                        d.swiotlb_bytes = c.bytes;
                    }
                    _ => {}
                }
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
            d.events = d.events.max(hits);
        }
    }

    /// Per-device snapshot; `interval_secs` is the time since the previous
    /// snapshot (for events/s), `filter` keeps only the named devices.
    pub fn snapshot(&mut self, interval_secs: f64, filter: &[String]) -> Vec<DeviceSnapshot> {
        let mut out = Vec::new();
        for (name, d) in &mut self.devices {
            if !filter.is_empty() && !filter.iter().any(|f| f.as_str() == &**name) {
                continue;
            }
            let rate = if interval_secs > 0.0 {
                (d.events - d.events_at_last_snapshot) as f64 / interval_secs
            } else {
                0.0
            };
            d.events_at_last_snapshot = d.events;
            let dma = d.dma.snapshot();
            let iommu = d.iommu.snapshot();
            let (level, primary) = if d.dma.maps > 0 || d.dma.unmaps > 0 {
                ("dma", &dma)
            } else {
                ("iommu", &iommu)
            };
            out.push(DeviceSnapshot {
                device: name.to_string(),
                level,
                maps: primary.maps,
                unmaps: primary.unmaps,
                bytes_mapped: primary.bytes_mapped,
                bytes_unmapped: primary.bytes_unmapped,
                map_size: primary.size.clone(),
                outstanding_mappings: primary.outstanding_mappings,
                outstanding_bytes: primary.outstanding_bytes,
                bytes_to_device: d.bytes_by_dir[1],
                bytes_from_device: d.bytes_by_dir[2],
                bytes_bidirectional: d.bytes_by_dir[0],
                sg_maps: d.sg_maps,
                sg_entries: d.sg_entries,
                swiotlb_bounces: d.swiotlb_bounces,
                swiotlb_bounced_bytes: d.swiotlb_bytes,
                coherent_allocs: d.coherent.maps,
                coherent_frees: d.coherent.unmaps,
                coherent_bytes: d.coherent.bytes_mapped,
                map_errors: d.map_errors,
                faults: d.faults,
                xids: d.xids,
                events: d.events,
                events_per_sec: rate,
                iommu_group: d.iommu_group,
                dma,
                iommu,
            });
        }
        out
    }
}

/// Records into an auto-resizing histogram (saturating_record would clamp to
/// the current, initially tiny, range instead of growing it).
pub fn record(h: &mut Histogram<u64>, value: u64) {
    let v = value.max(1);
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
}

/// iommu:io_page_fault flags: IOMMU_FAULT_READ 0x0, IOMMU_FAULT_WRITE 0x1
/// (include/linux/iommu.h).
pub fn fault_access(flags: u64) -> &'static str {
    if flags & 1 != 0 {
        "write"
    } else {
        "read"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(k: u16, addr: u64, size: u64, dir: u32) -> Record {
        Record::Event(Event {
            kind: k,
            addr,
            size,
            dir,
            ..Default::default()
        })
    }

    #[test]
    fn maps_unmaps_and_outstanding_per_device() {
        let mut agg = Aggregator::new();
        let nvme: Arc<str> = Arc::from("0000:00:04.0");
        let gpu: Arc<str> = Arc::from("0000:00:06.0");
        agg.ingest(&ev(kind::DMA_MAP, 0x1000, 4096, 2), &nvme);
        agg.ingest(&ev(kind::DMA_MAP, 0x3000, 8192, 1), &nvme);
        agg.ingest(&ev(kind::DMA_UNMAP, 0x1000, 4096, 2), &nvme);
        agg.ingest(&ev(kind::DMA_MAP, 0x9000, 65536, 0), &gpu);
        agg.ingest(&ev(kind::SWIOTLB_BOUNCED, 0x9000, 512, 0), &gpu);
        let snap = agg.snapshot(1.0, &[]);
        let n = snap
            .iter()
            .find(|d| d.device == "0000:00:04.0")
            .expect("nvme row");
        assert_eq!((n.maps, n.unmaps, n.bytes_mapped), (2, 1, 12288));
        assert_eq!((n.outstanding_mappings, n.outstanding_bytes), (1, 8192));
        assert_eq!((n.bytes_from_device, n.bytes_to_device), (4096, 8192));
        assert_eq!(n.level, "dma");
        assert_eq!(n.events_per_sec, 3.0);
        let g = snap
            .iter()
            .find(|d| d.device == "0000:00:06.0")
            .expect("gpu row");
        assert_eq!(
            (
                g.bytes_bidirectional,
                g.swiotlb_bounces,
                g.swiotlb_bounced_bytes
            ),
            (65536, 1, 512)
        );
        let only = agg.snapshot(1.0, &["0000:00:06.0".to_owned()]);
        assert_eq!(only.len(), 1);
    }

    #[test]
    fn iommu_level_reported_when_no_dma_api_events() {
        let mut agg = Aggregator::new();
        let dev: Arc<str> = Arc::from(UNATTRIBUTED);
        agg.ingest(&ev(kind::IOMMU_MAP, 0xfffff000, 4096, 0), &dev);
        let mut unmap = Event {
            kind: kind::IOMMU_UNMAP,
            addr: 0xfffff000,
            size: 4096,
            aux: 4096,
            ..Default::default()
        };
        agg.ingest(&Record::Event(unmap), &dev);
        unmap.addr = 0x1234000;
        agg.ingest(&Record::Event(unmap), &dev);
        let s = &agg.snapshot(0.0, &[])[0];
        assert_eq!(s.level, "iommu");
        assert_eq!((s.maps, s.unmaps, s.outstanding_mappings), (1, 2, 0));
        assert_eq!(agg.devices[&dev].iommu.unmatched_unmaps, 1);
    }

    #[test]
    fn size_percentiles_come_from_the_histogram() {
        let mut agg = Aggregator::new();
        let dev: Arc<str> = Arc::from("d");
        for i in 0..100u64 {
            agg.ingest(&ev(kind::DMA_MAP, i * 0x10000, 4096 * (i + 1), 1), &dev);
        }
        let s = &agg.snapshot(0.0, &[])[0];
        assert_eq!(s.map_size.count, 100);
        // 3 significant digits: within 0.1% of the exact order statistic.
        let near = |got: u64, want: u64| (got as f64 - want as f64).abs() <= want as f64 * 0.001;
        assert!(near(s.map_size.p50, 4096 * 50), "p50 {}", s.map_size.p50);
        assert!(near(s.map_size.p99, 4096 * 99), "p99 {}", s.map_size.p99);
        assert_eq!(s.map_size.max, 4096 * 100, "max is exact");
    }

    #[test]
    fn kernel_counters_override_stream_counts() {
        let mut agg = Aggregator::new();
        let dev: Arc<str> = Arc::from("0000:00:04.0");
        agg.ingest(&ev(kind::DMA_MAP, 0x1000, 4096, 2), &dev);
        let key = |k: u16, dir| CounterKey {
            dev: 1,
            kind: u32::from(k),
            dir,
        };
        agg.apply_kernel_counters(&[
            (
                dev.clone(),
                key(kind::DMA_MAP, 2),
                Counter {
                    count: 10,
                    bytes: 40960,
                },
            ),
            (
                dev.clone(),
                key(kind::DMA_UNMAP, 2),
                Counter {
                    count: 9,
                    bytes: 36864,
                },
            ),
        ]);
        let s = &agg.snapshot(0.0, &[])[0];
        assert_eq!(
            (s.maps, s.unmaps, s.bytes_mapped, s.bytes_from_device),
            (10, 9, 40960, 40960)
        );
        assert_eq!(s.events, 19);
    }

    #[test]
    fn faults_are_notable_with_hex_address() {
        let mut agg = Aggregator::new();
        let dev: Arc<str> = Arc::from("0000:00:03.0");
        let e = Event {
            kind: kind::IO_PAGE_FAULT,
            addr: 0x123000,
            aux: 1,
            ..Default::default()
        };
        agg.ingest(&Record::Event(e), &dev);
        let n = agg.recent.back().expect("fault kept");
        assert_eq!(n.address.as_deref(), Some("0x123000"));
        assert!(n.detail.contains("write"), "{}", n.detail);
        assert_eq!(agg.snapshot(0.0, &[])[0].faults, 1);
    }
}
