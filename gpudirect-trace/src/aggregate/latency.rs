//! Time spent in the DMA-API, IOMMU and flush/bounce functions, per device
//! and operation: exact HdrHistograms from the event stream, or the kernel's
//! log2 histograms in aggregate-only mode (percentiles then are bucket upper
//! bounds, i.e. within a factor of 2, and max is exact).

use std::collections::BTreeMap;

use gpudirect_trace_common::{op, LatHist, LAT_BUCKETS};
use hdrhistogram::Histogram;
use serde::Serialize;

use super::level::record;

pub struct OpLatency {
    pub hist: Histogram<u64>,
    pub max: u64,
    /// Exact total of the durations.
    pub sum: u64,
}

/// What a new operation's histogram costs the reader's memory budget
/// before it grows (2048 counts of 8 bytes).
pub const OP_BYTES: usize = (16 << 10) + 64;

impl Default for OpLatency {
    fn default() -> Self {
        Self {
            hist: Histogram::new(3).expect("3 significant digits is a valid histogram"),
            max: 0,
            sum: 0,
        }
    }
}

impl OpLatency {
    pub fn record(&mut self, ns: u64) {
        record(&mut self.hist, ns);
        self.max = self.max.max(ns);
        self.sum = self.sum.saturating_add(ns);
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LatencySnapshot {
    pub count: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    /// Total time spent (exact in both sources).
    pub total_ns: u64,
    /// "stream" (exact within 0.1%) or "kernel-log2" (aggregate-only).
    pub source: &'static str,
}

impl LatencySnapshot {
    pub fn of_stream(l: &OpLatency) -> Self {
        let q = |x| l.hist.value_at_quantile(x).min(l.max);
        Self {
            count: l.hist.len(),
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: l.max,
            total_ns: l.sum,
            source: "stream",
        }
    }

    /// Percentiles of a log2 histogram: the upper bound of the bucket that
    /// holds the quantile, capped by the exact maximum.
    pub fn of_log2(h: &LatHist) -> Self {
        let q = |x: f64| -> u64 {
            if h.count == 0 {
                return 0;
            }
            let rank = ((h.count as f64) * x).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (b, &n) in h.buckets.iter().enumerate() {
                seen += n;
                if seen >= rank {
                    let upper = if b + 1 >= 64 {
                        u64::MAX
                    } else {
                        (1u64 << (b + 1)) - 1
                    };
                    return upper.min(h.max_ns);
                }
            }
            h.max_ns
        };
        Self {
            count: h.count,
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: h.max_ns,
            total_ns: h.sum_ns,
            source: "kernel-log2",
        }
    }
}

/// Sums per-CPU log2 histograms.
pub fn sum_log2<'a>(per_cpu: impl Iterator<Item = &'a LatHist>) -> LatHist {
    let mut out = LatHist {
        count: 0,
        sum_ns: 0,
        max_ns: 0,
        buckets: [0; LAT_BUCKETS],
    };
    for h in per_cpu {
        out.count += h.count;
        out.sum_ns += h.sum_ns;
        out.max_ns = out.max_ns.max(h.max_ns);
        for (o, i) in out.buckets.iter_mut().zip(h.buckets.iter()) {
            *o += i;
        }
    }
    out
}

/// A device's latency per operation: streamed where there was a stream,
/// else the kernel's log2 histograms.
pub(super) fn snapshot_of(d: &super::DeviceStats) -> BTreeMap<&'static str, LatencySnapshot> {
    let mut out = BTreeMap::new();
    // op::LIFETIME is not a function: it shows as the DMA level's lifetimes.
    for o in (0..op::COUNT).filter(|&o| o != op::LIFETIME) {
        let name = op::NAMES[o as usize];
        match (d.latency.get(&o), d.kernel_latency.get(&o)) {
            (Some(l), _) if !l.hist.is_empty() => {
                out.insert(name, LatencySnapshot::of_stream(l));
            }
            (_, Some(k)) if k.count > 0 => {
                out.insert(name, LatencySnapshot::of_log2(k));
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_and_log2_agree_within_a_bucket() {
        let mut stream = OpLatency::default();
        let mut log2 = LatHist {
            count: 0,
            sum_ns: 0,
            max_ns: 0,
            buckets: [0; LAT_BUCKETS],
        };
        for i in 1..=1000u64 {
            let ns = 500 + i * 37;
            stream.record(ns);
            log2.count += 1;
            log2.sum_ns += ns;
            log2.max_ns = log2.max_ns.max(ns);
            log2.buckets[63 - ns.leading_zeros() as usize] += 1;
        }
        let s = LatencySnapshot::of_stream(&stream);
        let k = LatencySnapshot::of_log2(&log2);
        assert_eq!((s.count, k.count), (1000, 1000));
        assert_eq!((s.max, k.max), (37500, 37500));
        for (a, b) in [(s.p50, k.p50), (s.p90, k.p90), (s.p99, k.p99)] {
            // The log2 answer is the upper bound of the bucket holding the
            // exact one: never below it, less than twice it.
            assert!(b >= a && b < 2 * a + 1, "stream {a} vs log2 {b}");
        }
    }
}
