//! The exported metrics: the aggregator's cumulative totals as bounded
//! Prometheus families (docs/metrics.md), encoded by `prometheus-client`.
//!
//! A [`Model`] is built from the aggregator at every scrape and registered as
//! the registry's [`Collector`], so there is no second set of counters to keep
//! in step: the values are the aggregator's own, which are monotonic (the
//! loss-free in-kernel totals, refreshed right before the model is built).

use std::collections::BTreeMap;

use gpudirect_trace_common::{op, LatHist};
use hdrhistogram::Histogram;
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric as _, NoLabelSet},
    metrics::{counter::ConstCounter, gauge::ConstGauge, MetricType},
    registry::{Registry, Unit},
};

use crate::{
    aggregate::{Aggregator, DeviceStats},
    decode::{dir_name, kind_name},
    ebpf::{ProbeStatus, SelfStats, Status},
    metrics::{self, Metric, Type},
};

/// The label that devices past `--max-devices` fold into.
pub const OTHER_DEVICE: &str = "other";
pub const DEFAULT_MAX_DEVICES: usize = 256;
/// Longest `reason` label value; longer reasons are cut.
pub const MAX_REASON_LEN: usize = 80;
/// Content-Type of the OpenMetrics text format that `prometheus-client` writes.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds (bytes) of the mapped-size buckets: the sub-page range, the
/// page sizes (4 KiB, 64 KiB, 2 MiB, 1 GiB) and the steps between them.
pub const SIZE_BUCKETS: &[u64] = &[
    512,
    4 << 10,
    8 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
    256 << 20,
    1 << 30,
];

/// Upper bounds (nanoseconds) of the latency buckets: powers of two from
/// 512 ns to 134 ms, the kernel's own log2 buckets (bucket b holds
/// [2^b, 2^(b+1)) ns), so streamed and in-kernel histograms export alike.
pub const LATENCY_BUCKETS_NS: &[u64] = &[
    1 << 9,
    1 << 10,
    1 << 11,
    1 << 12,
    1 << 13,
    1 << 14,
    1 << 15,
    1 << 16,
    1 << 17,
    1 << 18,
    1 << 19,
    1 << 20,
    1 << 21,
    1 << 22,
    1 << 23,
    1 << 24,
    1 << 25,
    1 << 26,
    1 << 27,
];

/// Faults of one (device, source, cause): the ledger's rows, as the JSON
/// documents have them (the iommu:io_page_fault tracepoint and the kernel
/// log decoders).
pub use crate::analysis::ledger::FaultCount;

/// A classic histogram: per-bucket (not cumulative) counts, `+Inf` last.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramValue {
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
    pub count: u64,
}

impl HistogramValue {
    /// Buckets with upper bounds `bounds` (in the histogram's unit, exported
    /// multiplied by `scale`) from an HdrHistogram. Each recorded value is
    /// placed by the lowest value it stands for: exact for sizes below 2048
    /// and for page multiples below 8 MiB, within 0.1% otherwise.
    pub fn from_hdr(h: &Histogram<u64>, bounds: &[u64], scale: f64) -> Self {
        let mut counts = vec![0u64; bounds.len() + 1];
        let mut sum = 0.0;
        for v in h.iter_recorded() {
            let low = h.lowest_equivalent(v.value_iterated_to());
            let n = v.count_at_value();
            counts[bounds.partition_point(|&b| b < low)] += n;
            sum += low as f64 * n as f64;
        }
        Self::at_bounds(bounds, scale, counts, sum * scale, h.len())
    }

    /// Buckets of a kernel log2 histogram (bucket b: [2^b, 2^(b+1)) ns) at
    /// the power-of-two `bounds_ns`: exact, as every log2 bucket lies wholly
    /// below or above each bound. Sum and count are the kernel's.
    pub fn from_log2(h: &LatHist, bounds_ns: &[u64], scale: f64) -> Self {
        let mut counts = vec![0u64; bounds_ns.len() + 1];
        for (b, &n) in h.buckets.iter().enumerate() {
            // Everything in bucket b is < 2^(b+1): the first bound >= that.
            let upper = 1u128 << (b + 1);
            counts[bounds_ns.partition_point(|&x| u128::from(x) < upper)] += n;
        }
        Self::at_bounds(bounds_ns, scale, counts, h.sum_ns as f64 * scale, h.count)
    }

    /// `counts[i]` under upper bound `bounds[i]` (exported multiplied by
    /// `scale`), the last under +Inf.
    fn at_bounds(bounds: &[u64], scale: f64, counts: Vec<u64>, sum: f64, count: u64) -> Self {
        let uppers = bounds
            .iter()
            .map(|&b| b as f64 * scale)
            .chain(std::iter::once(f64::INFINITY));
        Self {
            buckets: uppers.zip(counts).collect(),
            sum,
            count,
        }
    }

    fn add(&mut self, other: &Self) {
        if self.buckets.is_empty() {
            *self = other.clone();
            return;
        }
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            a.1 += b.1;
        }
        self.sum += other.sum;
        self.count += other.count;
    }
}

type Labels = Vec<(&'static str, String)>;

/// One metric family. Samples with equal labels are summed (devices folded
/// into `other`).
#[derive(Clone, Debug)]
struct Family {
    metric: &'static Metric,
    values: BTreeMap<Labels, u64>,
    /// Samples that are not whole numbers (seconds, rates).
    fvalues: BTreeMap<Labels, f64>,
    histograms: BTreeMap<Labels, HistogramValue>,
}

/// Every exported family with its current samples, in output order.
#[derive(Clone, Debug, Default)]
pub struct Model {
    families: Vec<Family>,
}

impl Model {
    /// The model of everything the session knows: per-device DMA/IOMMU
    /// activity and latency, `faults` (all sources), Xids, and the tracer's
    /// self-metrics. `streamed`: hot events come through the ring buffer (not
    /// `--aggregate-only`); without them outstanding mappings are unknown
    /// and not exported.
    pub fn build(
        agg: &Aggregator,
        stats: &SelfStats,
        probes: &[ProbeStatus],
        faults: &[FaultCount],
        labels: &mut DeviceLabels,
        streamed: bool,
    ) -> Self {
        let mut m = Self::default();
        m.add_devices(agg, labels, streamed);
        m.add_faults(faults, labels);
        m.add_self(agg, stats, probes, labels);
        m
    }

    fn family(&mut self, metric: &'static Metric, labels: &Labels) -> &mut Family {
        // The declaration says which labels every series has.
        debug_assert!(
            labels
                .iter()
                .map(|(k, _)| *k)
                .eq(metric.labels.iter().copied()),
            "{}: labels {:?}, declared {:?}",
            metric.exported(),
            labels.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            metric.labels
        );
        let i = match self
            .families
            .iter()
            .position(|f| std::ptr::eq(f.metric, metric))
        {
            Some(i) => i,
            None => {
                self.families.push(Family {
                    metric,
                    values: BTreeMap::new(),
                    fvalues: BTreeMap::new(),
                    histograms: BTreeMap::new(),
                });
                self.families.len() - 1
            }
        };
        &mut self.families[i]
    }

    fn add(&mut self, m: &'static Metric, l: Labels, v: u64) {
        *self.family(m, &l).values.entry(l).or_default() += v;
    }

    fn add_f64(&mut self, m: &'static Metric, l: Labels, v: f64) {
        *self.family(m, &l).fvalues.entry(l).or_default() += v;
    }

    fn add_histogram(&mut self, m: &'static Metric, l: Labels, h: &HistogramValue) {
        let f = self.family(m, &l);
        f.histograms.entry(l).or_default().add(h);
    }

    fn add_devices(&mut self, agg: &Aggregator, labels: &mut DeviceLabels, streamed: bool) {
        for (name, d) in &agg.devices {
            let dev = labels.label(name).to_string();
            let l1 = |k: &'static str, v: &str| vec![("device", dev.clone()), (k, v.to_owned())];
            for (dir, &b) in d.bytes_by_dir.iter().enumerate() {
                if b > 0 {
                    let l = l1("direction", dir_name(dir as u32));
                    self.add(
                        &crate::families::dma_api::metrics::DMA_MAP_BYTES_TOTAL,
                        l,
                        b,
                    );
                }
            }
            for (level, lv) in [
                ("dma", &d.dma),
                ("iommu", &d.iommu),
                ("coherent", &d.coherent),
            ] {
                if lv.maps == 0 && lv.unmaps == 0 && lv.sizes.is_empty() {
                    continue;
                }
                self.add(
                    &crate::families::dma_api::metrics::DMA_MAPS_TOTAL,
                    l1("level", level),
                    lv.maps,
                );
                self.add(
                    &crate::families::dma_api::metrics::DMA_UNMAPS_TOTAL,
                    l1("level", level),
                    lv.unmaps,
                );
                if streamed {
                    let outstanding = lv.outstanding() as u64 + lv.untracked;
                    let l = l1("level", level);
                    self.add(
                        &crate::families::dma_api::metrics::MAPPINGS_OUTSTANDING,
                        l,
                        outstanding,
                    );
                    let (l, ob) = (l1("level", level), lv.outstanding_bytes);
                    self.add(
                        &crate::families::dma_api::metrics::MAPPINGS_OUTSTANDING_BYTES,
                        l,
                        ob,
                    );
                }
                if !lv.sizes.is_empty() {
                    let h = HistogramValue::from_hdr(&lv.sizes, SIZE_BUCKETS, 1.0);
                    let l = l1("level", level);
                    self.add_histogram(
                        &crate::families::dma_api::metrics::DMA_MAP_SIZE_BYTES,
                        l,
                        &h,
                    );
                }
            }
            let l = vec![("device", dev.clone())];
            if d.iommu.bytes_mapped > 0 {
                let b = d.iommu.bytes_mapped;
                self.add(
                    &crate::families::iommu::metrics::IOMMU_MAP_BYTES_TOTAL,
                    l.clone(),
                    b,
                );
            }
            d.families.metrics(&dev, agg.now_ns, self);
            let x = &d.dma_api;
            if x.syncs > 0 {
                let (n, b) = (x.syncs, x.sync_bytes);
                self.add(
                    &crate::families::dma_api::metrics::DMA_SYNCS_TOTAL,
                    l.clone(),
                    n,
                );
                self.add(
                    &crate::families::dma_api::metrics::DMA_SYNC_BYTES_TOTAL,
                    l.clone(),
                    b,
                );
            }
            let v = &x.iova;
            for (op, n) in [
                ("alloc", v.allocs),
                ("declined", v.declined),
                ("link", v.links),
                ("unlink", v.unlinks),
                ("sync", v.syncs),
                ("free", v.frees),
            ] {
                if n > 0 {
                    self.add(
                        &crate::families::dma_api::metrics::IOVA_CALLS_TOTAL,
                        l1("op", op),
                        n,
                    );
                }
            }
            let skipped = d.dma.skipped().0;
            if skipped > 0 {
                let n = skipped;
                self.add(
                    &crate::families::dma_api::metrics::DMA_UNMAPS_SKIPPED_TOTAL,
                    l.clone(),
                    n,
                );
            }
            // Scatterlists not walked to the end: this device's byte counts
            // are lower bounds.
            for (op, n) in [("map", x.sg_truncated), ("unmap", x.sg_unmap_truncated)] {
                if n > 0 {
                    self.add(
                        &crate::families::dma_api::metrics::SG_TRUNCATED_TOTAL,
                        l1("op", op),
                        n,
                    );
                }
            }
            if d.map_errors > 0 {
                self.add(
                    &crate::families::dma_api::metrics::DMA_MAP_ERRORS_TOTAL,
                    l,
                    d.map_errors,
                );
            }
            for (xid, &n) in &d.xid_counts {
                let l = l1("xid", &xid.to_string());
                self.add(&crate::families::nvidia::metrics::NVIDIA_XID_TOTAL, l, n);
            }
            self.add_latency(&dev, d);
            self.add_invalidations(&dev, d);
        }
        self.add_units(agg);
    }

    /// `gpudirect_iommu_map_latency_seconds{device,op}`: the kernel's
    /// loss-free log2 histogram of each operation where it has one, else the
    /// streamed HdrHistogram (never both: one source per series, so its
    /// counts only grow).
    fn add_latency(&mut self, dev: &str, d: &DeviceStats) {
        // op::LIFETIME is a mapping lifetime, not time spent in a function.
        for o in (0..op::COUNT).filter(|&o| o != op::LIFETIME) {
            let kernel = d.kernel_latency.get(&o).filter(|k| k.count > 0);
            let stream = d.latency.get(&o).filter(|l| !l.hist.is_empty());
            let v = match (kernel, stream) {
                (Some(k), _) => HistogramValue::from_log2(k, LATENCY_BUCKETS_NS, 1e-9),
                (None, Some(l)) => HistogramValue::from_hdr(&l.hist, LATENCY_BUCKETS_NS, 1e-9),
                (None, None) => continue,
            };
            let l = vec![
                ("device", dev.to_owned()),
                ("op", op::NAMES[o as usize].to_owned()),
            ];
            self.add_histogram(&crate::metrics::timing::IOMMU_MAP_LATENCY_SECONDS, l, &v);
        }
    }

    /// Adds fault counts: IOMMU faults (tracepoint, VT-d, AMD-Vi, SMMU) to
    /// `gpudirect_iommu_faults_total`, PCIe AER errors to
    /// `gpudirect_pcie_aer_errors_total`. Xids are left out: they are counted
    /// per Xid number in the aggregator (`gpudirect_nvidia_xid_total`).
    pub fn add_faults(&mut self, faults: &[FaultCount], labels: &mut DeviceLabels) {
        for f in faults {
            let device = ("device", labels.label(&f.device).to_string());
            let reason = (
                "reason",
                crate::sanitize::cut(&f.cause, MAX_REASON_LEN).to_owned(),
            );
            match f.source.as_str() {
                "nvidia-xid" => {}
                "aer" => {
                    let l = vec![device, reason];
                    self.add(
                        &crate::families::faults::metrics::PCIE_AER_ERRORS_TOTAL,
                        l,
                        f.count,
                    );
                }
                source => {
                    let l = vec![device, ("source", source.to_owned()), reason];
                    self.add(
                        &crate::families::faults::metrics::IOMMU_FAULTS_TOTAL,
                        l,
                        f.count,
                    );
                }
            }
        }
    }

    fn add_self(
        &mut self,
        agg: &Aggregator,
        stats: &SelfStats,
        probes: &[ProbeStatus],
        labels: &DeviceLabels,
    ) {
        for p in probes {
            let l = vec![("probe", p.name.to_owned()), ("kind", p.kind.to_owned())];
            let up = u64::from(p.status == Status::Attached);
            self.add(&crate::metrics::tracer::PROBE_ATTACHED, l, up);
        }
        // Truncated walks are counted maps, not events of their own.
        let hit = |k: usize| gpudirect_trace_common::kind::is_hit(k as u16);
        for (k, &n) in stats
            .hits
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(k, _)| hit(*k))
        {
            let l = vec![("kind", kind_name(k as u16).to_owned())];
            self.add(&crate::metrics::tracer::EVENTS_TOTAL, l, n);
        }
        // The tracer's own unlabelled counters, in the order they are exported.
        use crate::metrics::tracer as t;
        for (metric, value) in [
            (&t::EVENTS_RECEIVED_TOTAL, agg.events),
            (&t::EVENTS_LOST_TOTAL, stats.lost_events),
            (&t::EVENTS_MISSED_TOTAL, stats.missed_events),
            (&t::EVENTS_UNDECODABLE_TOTAL, agg.decode_errors),
            (&t::TIMINGS_SKIPPED_TOTAL, stats.timing_nest_full),
            (&t::STACKS_LOST_TOTAL, stats.stacks_lost),
            (&t::MAPPINGS_UNTRACKED_TOTAL, stats.mappings_untracked),
            (&t::UNMAPS_UNMATCHED_TOTAL, stats.lifetime_unmatched),
            (&t::DEVICES_FOLDED_TOTAL, labels.folded()),
        ] {
            self.add(metric, vec![], value);
        }
    }

    /// The metric names as exported (with unit and `_total` suffixes).
    pub fn exported_names(&self) -> Vec<String> {
        self.families.iter().map(|f| f.metric.exported()).collect()
    }
}

impl metrics::Sink for Model {
    fn add(&mut self, m: &'static Metric, l: Labels, v: u64) {
        Model::add(self, m, l, v);
    }

    fn add_f64(&mut self, m: &'static Metric, l: Labels, v: f64) {
        Model::add_f64(self, m, l, v);
    }
}

impl Collector for Model {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.families {
            let d = f.metric;
            let kind = match d.kind {
                Type::Counter => MetricType::Counter,
                Type::Gauge => MetricType::Gauge,
                Type::Histogram => MetricType::Histogram,
            };
            let unit = d.unit.map(|u| match u {
                metrics::Unit::Bytes => Unit::Bytes,
                metrics::Unit::Seconds => Unit::Seconds,
            });
            let mut m = encoder.encode_descriptor(d.name, d.help, unit.as_ref(), kind)?;
            for (l, h) in &f.histograms {
                m.encode_family(l)?
                    .encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets, None)?;
            }
            if let [(l, &v)] = f.values.iter().collect::<Vec<_>>()[..] {
                if l.is_empty() {
                    encode_value(d.kind, v, m)?;
                    continue;
                }
            }
            for (l, &v) in &f.values {
                encode_value(d.kind, v, m.encode_family(l)?)?;
            }
            for (l, &v) in &f.fvalues {
                let e = m.encode_family(l)?;
                match d.kind {
                    Type::Counter => ConstCounter::new(v).encode(e)?,
                    _ => ConstGauge::new(v).encode(e)?,
                }
            }
        }
        Ok(())
    }
}

fn encode_value(
    kind: Type,
    v: u64,
    m: prometheus_client::encoding::MetricEncoder<'_>,
) -> Result<(), std::fmt::Error> {
    match kind {
        Type::Counter => ConstCounter::new(v).encode(m),
        _ => ConstGauge::new(v).encode(m),
    }
}

/// The Prometheus text of `agg` alone (no self-statistics, probes or
/// faults; up to 8 device labels): what the invalidation tests, here and on
/// the host, read.
#[cfg(any(test, feature = "test-support"))]
pub fn text_of(agg: &crate::aggregate::Aggregator) -> String {
    let model = Model::build(
        agg,
        &SelfStats::default(),
        &[],
        &[],
        &mut DeviceLabels::new(8),
        true,
    );
    render(model, false).expect("encodes")
}

/// The model encoded as OpenMetrics 1.0 (`openmetrics`) or the Prometheus
/// text format 0.0.4.
pub fn render(model: Model, openmetrics: bool) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(model));
    let mut out = String::new();
    if openmetrics {
        prometheus_client::encoding::text::encode(&mut out, &registry)?;
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?;
    }
    Ok(out)
}

#[path = "metrics_flight.rs"]
mod flight;
#[path = "metrics_gpu.rs"]
pub mod gpu;
#[path = "metrics_inval.rs"]
mod inval;
#[path = "metrics_labels.rs"]
mod labels;
#[path = "metrics_misuse.rs"]
mod misuse;
pub use gpu::{ContainerLabels, DEFAULT_MAX_CONTAINERS, HOST_CONTAINER, OTHER_CONTAINER};
pub use labels::DeviceLabels;

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
