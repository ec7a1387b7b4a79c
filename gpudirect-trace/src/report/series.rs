//! Time series of a replay, for the HTML page's charts: per device, map and
//! unmap counts, outstanding mappings and bytes, latencies per operation and
//! swiotlb bounces; the checkpoints' counters; mapped bytes per process.
//!
//! **Downsampling.** All series share one grid of at most `MAX_BUCKETS`
//! buckets starting at the window's start. Buckets are `FIRST_WIDTH_NS`
//! wide until an event falls past the last one; then the width doubles and
//! neighbouring buckets merge, as often as needed. Memory and the page's
//! size therefore depend on the number of devices and operations, not on
//! the recording's length or rate: a 10-minute recording ends with 469
//! buckets of 1.28 s, a 7-second one with 348 of 20 ms. Per bucket, counts
//! and bytes are summed; levels (outstanding mappings and bytes) keep their
//! minimum, maximum and last value, so a spike or dip shorter than a bucket
//! still shows; latencies keep a quarter-octave histogram whose percentiles
//! are bucket upper bounds (at most 19% above the exact value, capped by
//! the bucket's exact maximum; the tables' percentiles are exact). The page
//! may merge buckets further (`coarsen`) to stay within its size budget.

use std::{collections::BTreeMap, sync::Arc};

use gpudirect_trace_common::kind;

use crate::{
    aggregate::Aggregator,
    decode::Record,
    memory_budget::{self, Keeper},
    model::task_of,
    tracefile::Checkpoint,
};

pub const MAX_BUCKETS: usize = 512;
/// What a latency histogram of one bucket costs the reader's memory
/// budget (256 counts of 4 bytes, boxed).
const QHIST_BYTES: usize = std::mem::size_of::<QHist>() + 256 * 4 + 16;
/// What a checkpoint's per-device row costs within a bucket.
const CP_ROW_BYTES: usize = 128;
pub const FIRST_WIDTH_NS: u64 = 10_000_000;
/// (device, pid) pairs counted one by one; events of further pairs are
/// summed per device under `Series::other_processes` (counted, not lost).
pub const MAX_PROCESSES: usize = 4096;
/// Mapping levels, in this order everywhere: DMA API, IOMMU, coherent.
pub const LEVELS: [&str; 3] = ["DMA-API", "IOMMU", "coherent"];

/// Something a bucket holds: `merge` folds the next (later) bucket in.
pub trait Merge: Default + Clone {
    fn merge(&mut self, later: &Self);
}

/// A level within a bucket: smallest, largest and last value seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gauge {
    pub min: u64,
    pub max: u64,
    pub last: u64,
}

impl Gauge {
    fn set(g: &mut Option<Gauge>, v: u64) {
        *g = Some(match *g {
            None => Gauge {
                min: v,
                max: v,
                last: v,
            },
            Some(o) => Gauge {
                min: o.min.min(v),
                max: o.max.max(v),
                last: v,
            },
        });
    }

    fn fold(a: &mut Option<Gauge>, b: &Option<Gauge>) {
        *a = match (*a, *b) {
            (x, None) => x,
            (None, y) => y,
            (Some(x), Some(y)) => Some(Gauge {
                min: x.min.min(y.min),
                max: x.max.max(y.max),
                last: y.last,
            }),
        };
    }
}

/// One device's activity in one time bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    pub events: u64,
    /// Per level (`LEVELS`).
    pub maps: [u64; 3],
    pub unmaps: [u64; 3],
    pub bytes_mapped: [u64; 3],
    pub bounces: u64,
    pub bounce_bytes: u64,
    /// Outstanding mappings and bytes per level after the bucket's events.
    pub outstanding: [Option<Gauge>; 3],
    pub outstanding_bytes: [Option<Gauge>; 3],
}

impl Merge for Bucket {
    fn merge(&mut self, b: &Self) {
        self.events += b.events;
        for l in 0..3 {
            self.maps[l] += b.maps[l];
            self.unmaps[l] += b.unmaps[l];
            self.bytes_mapped[l] = self.bytes_mapped[l].saturating_add(b.bytes_mapped[l]);
            Gauge::fold(&mut self.outstanding[l], &b.outstanding[l]);
            Gauge::fold(&mut self.outstanding_bytes[l], &b.outstanding_bytes[l]);
        }
        self.bounces += b.bounces;
        self.bounce_bytes = self.bounce_bytes.saturating_add(b.bounce_bytes);
    }
}

/// Quarter-octave histogram of nanoseconds: bucket `4e + s` holds values
/// whose top bit is `e` and whose next two bits are `s`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QHist {
    pub counts: Box<[u32; 256]>,
    pub n: u64,
    pub max: u64,
}

impl Default for QHist {
    fn default() -> Self {
        Self {
            counts: Box::new([0; 256]),
            n: 0,
            max: 0,
        }
    }
}

impl QHist {
    fn index(v: u64) -> usize {
        let v = v.max(1);
        let e = 63 - v.leading_zeros() as usize;
        let s = if e >= 2 {
            ((v >> (e - 2)) & 3) as usize
        } else {
            (v << (2 - e) & 3) as usize
        };
        e * 4 + s
    }

    /// The largest value bucket `i` holds.
    fn upper(i: usize) -> u64 {
        let (e, s) = (i / 4, (i % 4) as u128);
        // Exclusive bound (4 + s + 1) * 2^e / 4, rounded up for e < 2.
        let hi = ((4 + s + 1) << e).div_ceil(4);
        u64::try_from(hi - 1).unwrap_or(u64::MAX)
    }

    pub fn record(&mut self, v: u64) {
        let c = &mut self.counts[Self::index(v)];
        *c = c.saturating_add(1);
        self.n += 1;
        self.max = self.max.max(v);
    }

    /// The value at quantile `q` (0..1]: its bucket's upper bound, capped
    /// by the exact maximum.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((self.n as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return Some(Self::upper(i).min(self.max));
            }
        }
        Some(self.max)
    }
}

impl Merge for QHist {
    fn merge(&mut self, b: &Self) {
        for (a, x) in self.counts.iter_mut().zip(b.counts.iter()) {
            *a = a.saturating_add(*x);
        }
        self.n += b.n;
        self.max = self.max.max(b.max);
    }
}

/// An optional latency histogram (most buckets of most operations are
/// empty: `None` costs a pointer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatBucket(pub Option<QHist>);

impl Merge for LatBucket {
    fn merge(&mut self, b: &Self) {
        match (&mut self.0, &b.0) {
            (_, None) => {}
            (None, Some(y)) => self.0 = Some(y.clone()),
            (Some(x), Some(y)) => x.merge(y),
        }
    }
}

/// The last checkpoint within a bucket: the recorder's self-metrics and
/// the kernel's loss-free per-device counters (cumulative since the start).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpBucket(pub Option<CpPoint>);

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpPoint {
    pub ts_ns: u64,
    pub events_written: u64,
    pub lost_total: u64,
    /// Tracepoint hits counted in-kernel, all kinds.
    pub hits: u64,
    /// Per device: (maps, unmaps, bytes mapped, bytes unmapped) per level.
    pub counters: BTreeMap<Arc<str>, [[u64; 4]; 3]>,
}

impl Merge for CpBucket {
    fn merge(&mut self, b: &Self) {
        if b.0.is_some() {
            self.0 = b.0.clone();
        }
    }
}

/// Mappings one process made (and unmappings it made) on one device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcStats {
    /// Per level (`LEVELS`).
    pub maps: [u64; 3],
    pub bytes_mapped: [u64; 3],
    pub unmaps: [u64; 3],
}

#[derive(Clone, Debug, Default)]
pub struct DeviceSeries {
    pub buckets: Vec<Bucket>,
    /// Per operation (`gpudirect_trace_common::op`).
    pub latency: BTreeMap<u32, Vec<LatBucket>>,
}

/// The replay's time series (see the module's comment).
#[derive(Clone, Debug)]
pub struct Series {
    pub t0_ns: u64,
    pub width_ns: u64,
    /// Buckets in use (the longest series).
    pub len: usize,
    pub devices: BTreeMap<Arc<str>, DeviceSeries>,
    pub checkpoints: Vec<CpBucket>,
    pub processes: BTreeMap<(Arc<str>, u32), ProcStats>,
    /// Per device, the events of processes beyond `MAX_PROCESSES`.
    pub other_processes: BTreeMap<Arc<str>, ProcStats>,
    /// What the series were charged to the reader's memory budget.
    charged: usize,
}

/// Bucket `i` of `v`, growing it within the reader's memory budget
/// (`charged` keeps the count); None, counted, without room.
fn put<'a, T: Merge>(v: &'a mut Vec<T>, i: usize, charged: &mut usize) -> Option<&'a mut T> {
    if v.len() <= i {
        let bytes = (i + 1 - v.len()) * std::mem::size_of::<T>();
        if !memory_budget::take_or_drop(Keeper::Series, bytes) {
            return None;
        }
        *charged += bytes;
        v.resize(i + 1, T::default());
    }
    Some(&mut v[i])
}

/// Merges neighbours: bucket `i` of the result is buckets `i*factor ..`.
pub fn coarsen<T: Merge>(v: &[T], factor: usize) -> Vec<T> {
    v.chunks(factor.max(1))
        .map(|c| {
            let mut a = c[0].clone();
            for b in &c[1..] {
                a.merge(b);
            }
            a
        })
        .collect()
}

/// Which level and whether a map (true) or unmap, for mapping events.
fn level_of(k: u16) -> Option<(usize, bool)> {
    crate::aggregate::span_of(k).map(|(l, open)| (usize::from(l), open))
}

impl Series {
    pub fn new(t0_ns: u64) -> Self {
        Self {
            t0_ns,
            width_ns: FIRST_WIDTH_NS,
            len: 0,
            devices: BTreeMap::new(),
            checkpoints: Vec::new(),
            processes: BTreeMap::new(),
            other_processes: BTreeMap::new(),
            charged: 0,
        }
    }

    /// What the series hold now, as the budget counts it.
    fn footprint(&self) -> usize {
        let mut n = self.checkpoints.len() * std::mem::size_of::<CpBucket>();
        for c in self.checkpoints.iter().flat_map(|c| &c.0) {
            n += c.counters.len() * CP_ROW_BYTES;
        }
        for d in self.devices.values() {
            n += d.buckets.len() * std::mem::size_of::<Bucket>();
            for l in d.latency.values() {
                n += l.len() * std::mem::size_of::<LatBucket>();
                n += l.iter().filter(|b| b.0.is_some()).count() * QHIST_BYTES;
            }
        }
        n
    }

    /// After buckets merged: gives back what they no longer hold.
    fn settle(&mut self) {
        let now = self.footprint();
        if now < self.charged {
            memory_budget::give(Keeper::Series, self.charged - now);
            self.charged = now;
        }
    }

    /// The bucket of `ts_ns`, widening the grid until it fits (events
    /// stamped before the start go to the first bucket).
    fn slot(&mut self, ts_ns: u64) -> usize {
        let off = ts_ns.saturating_sub(self.t0_ns);
        while off / self.width_ns >= MAX_BUCKETS as u64 {
            self.width_ns *= 2;
            for d in self.devices.values_mut() {
                d.buckets = coarsen(&d.buckets, 2);
                for l in d.latency.values_mut() {
                    *l = coarsen(l, 2);
                }
            }
            self.checkpoints = coarsen(&self.checkpoints, 2);
            self.len = self.len.div_ceil(2);
            self.settle();
        }
        let i = (off / self.width_ns) as usize;
        self.len = self.len.max(i + 1);
        i
    }

    /// One event of a device the report shows, after `agg` took it (the
    /// outstanding levels read from it include this event).
    pub fn event(&mut self, record: &Record, device: &Arc<str>, agg: &Aggregator) {
        let ev = *record.event();
        let i = self.slot(ev.ts_ns);
        if !self.devices.contains_key(device) {
            self.devices.insert(device.clone(), DeviceSeries::default());
        }
        let d = self.devices.get_mut(device).expect("inserted above");
        let charged = &mut self.charged;
        // Only the operations that exist (a crafted file may name 2^32).
        if ev.kind == kind::LATENCY && ev.aux < u64::from(gpudirect_trace_common::op::COUNT) {
            let l = d.latency.entry(ev.aux as u32).or_default();
            if let Some(b) = put(l, i, charged) {
                if b.0.is_none() && memory_budget::take_or_drop(Keeper::Series, QHIST_BYTES) {
                    *charged += QHIST_BYTES;
                    b.0 = Some(QHist::default());
                }
                if let Some(h) = b.0.as_mut() {
                    h.record(ev.size);
                }
            }
        }
        let Some(b) = put(&mut d.buckets, i, charged) else {
            return;
        };
        b.events += 1;
        if ev.kind == kind::SWIOTLB_BOUNCED {
            b.bounces += 1;
            b.bounce_bytes = b.bounce_bytes.saturating_add(ev.size);
        }
        let Some((l, is_map)) = level_of(ev.kind) else {
            return;
        };
        if is_map {
            b.maps[l] += 1;
            b.bytes_mapped[l] = b.bytes_mapped[l].saturating_add(ev.size);
        } else {
            b.unmaps[l] += 1;
        }
        if let Some(s) = agg.devices.get(device) {
            let level = [&s.dma, &s.iommu, &s.coherent][l];
            Gauge::set(
                &mut b.outstanding[l],
                level.outstanding() as u64 + level.untracked,
            );
            Gauge::set(&mut b.outstanding_bytes[l], level.outstanding_bytes);
        }
        let n = self.processes.len();
        let p = match self.processes.get_mut(&(device.clone(), task_of(&ev))) {
            Some(p) => p,
            None if n < MAX_PROCESSES => self
                .processes
                .entry((device.clone(), task_of(&ev)))
                .or_default(),
            None => self.other_processes.entry(device.clone()).or_default(),
        };
        if is_map {
            p.maps[l] += 1;
            p.bytes_mapped[l] = p.bytes_mapped[l].saturating_add(ev.size);
        } else {
            p.unmaps[l] += 1;
        }
    }

    /// A checkpoint inside the window.
    pub fn checkpoint(&mut self, cp: &Checkpoint) {
        let i = self.slot(cp.ts_ns);
        let mut counters: BTreeMap<Arc<str>, [[u64; 4]; 3]> = BTreeMap::new();
        for c in &cp.counters {
            let Some((l, is_map)) = u16::try_from(c.kind).ok().and_then(level_of) else {
                continue;
            };
            let row = &mut counters.entry(c.device.clone()).or_default()[l];
            let (n, b) = if is_map { (0, 2) } else { (1, 3) };
            row[n] = row[n].saturating_add(c.count);
            row[b] = row[b].saturating_add(c.bytes);
        }
        let rows = counters.len() * CP_ROW_BYTES;
        if !memory_budget::take_or_drop(Keeper::Series, rows) {
            return;
        }
        self.charged += rows;
        let Some(slot) = put(&mut self.checkpoints, i, &mut self.charged) else {
            return;
        };
        // The point it replaces (the bucket's earlier one) is let go.
        if let Some(old) = &slot.0 {
            let held = old.counters.len() * CP_ROW_BYTES;
            memory_budget::give(Keeper::Series, held);
            self.charged -= held.min(self.charged);
        }
        slot.0 = Some(CpPoint {
            ts_ns: cp.ts_ns,
            events_written: cp.events_written,
            lost_total: cp.lost_total,
            hits: crate::output::sum(cp.hits.iter().copied()),
            counters,
        });
    }

    /// Start of bucket `i`, CLOCK_MONOTONIC ns.
    pub fn bucket_start(&self, i: usize) -> u64 {
        self.t0_ns + i as u64 * self.width_ns
    }
}

#[cfg(test)]
mod tests {
    use gpudirect_trace_common::Event;

    use super::*;

    #[test]
    fn quarter_octaves_bound_every_value_within_19_percent() {
        for v in [
            1u64,
            2,
            3,
            4,
            5,
            7,
            8,
            9,
            1000,
            1023,
            1024,
            1025,
            123_456_789,
        ] {
            let i = QHist::index(v);
            let hi = QHist::upper(i);
            let lo = if i == 0 { 1 } else { QHist::upper(i - 1) + 1 };
            assert!(lo <= v && v <= hi, "{v} in [{lo}, {hi}] (bucket {i})");
            assert!(hi as f64 <= v as f64 * 1.25, "{v}: upper {hi}");
        }
        let mut h = QHist::default();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p50 = h.quantile(0.5).expect("p50");
        assert!((500_000..=500_000 * 119 / 100).contains(&p50), "{p50}");
        assert_eq!(h.quantile(1.0), Some(1_000_000), "capped by the exact max");
    }

    #[test]
    fn the_grid_doubles_and_stays_bounded_with_sums_and_levels_kept() {
        let mut s = Series::new(1_000);
        let mut agg = Aggregator::new();
        let dev: Arc<str> = Arc::from("0000:00:04.0");
        // One map per 10 ms for 100 s: 10 000 events, 10 000 fixed buckets
        // without the doubling.
        for i in 0..10_000u64 {
            let r = Record::Event(Event {
                kind: kind::DMA_MAP,
                ts_ns: 1_000 + i * 10_000_000,
                addr: 0x1000 * (i + 1),
                size: 4096,
                pid: 7 + (i % 2) as u32,
                ..Default::default()
            });
            agg.ingest(&r, &dev);
            s.event(&r, &dev, &agg);
        }
        assert!(s.len <= MAX_BUCKETS && s.len > MAX_BUCKETS / 2, "{}", s.len);
        assert_eq!(s.width_ns, FIRST_WIDTH_NS * 32, "100 s / 512 -> 320 ms");
        let b = &s.devices[&dev].buckets;
        assert_eq!(b.iter().map(|b| b.maps[0]).sum::<u64>(), 10_000);
        let last = b.last().and_then(|b| b.outstanding[0]).expect("level");
        assert_eq!(last.last, 10_000, "outstanding after the last map");
        assert_eq!(s.processes[&(dev.clone(), 7)].bytes_mapped[0], 5_000 * 4096);
        let c = coarsen(b, 4);
        assert_eq!(c.len(), b.len().div_ceil(4));
        assert_eq!(c.iter().map(|b| b.maps[0]).sum::<u64>(), 10_000);
    }
}
