//! What the IOMMU costs, as metrics: the invalidation-queue latency per
//! device, unit and type, the descriptors and cache-tag flushes the
//! kernel's tracepoints count, and each device's translation budget.
//! Labels are bounded: `device` through the device-label cap, `iommu`
//! by the host's units, `type`/`tag`/`flush`/`part` fixed sets.

use super::{HistogramValue, Model, LATENCY_BUCKETS_NS};
use crate::aggregate::{
    budget,
    inval::{type_name, unit_name},
    Aggregator, DeviceStats,
};

impl Model {
    /// Per device: `gpudirect_iommu_invalidation_seconds{device,iommu,type}`
    /// (the kernel's log2 histogram in aggregate-only mode, else the
    /// streamed one: one source per series), cache-tag flushes, and the
    /// translation budget.
    pub(super) fn add_invalidations(&mut self, dev: &str, d: &DeviceStats) {
        for (&class, acc) in &d.inval.by_class {
            let v = match &acc.kernel_log2 {
                Some(k) if k.count > 0 => HistogramValue::from_log2(k, LATENCY_BUCKETS_NS, 1e-9),
                _ if !acc.stream.hist.is_empty() => {
                    HistogramValue::from_hdr(&acc.stream.hist, LATENCY_BUCKETS_NS, 1e-9)
                }
                _ => continue,
            };
            let l = vec![
                ("device", dev.to_owned()),
                ("iommu", unit_name(class)),
                ("type", type_name(class).to_owned()),
            ];
            self.add_histogram(
                &crate::families::inval::metrics::IOMMU_INVALIDATION_SECONDS,
                l,
                &v,
            );
        }
        for r in d.inval.tag_rows() {
            let l = vec![
                ("device", dev.to_owned()),
                ("iommu", r.iommu),
                ("tag", r.tag.to_owned()),
                ("flush", r.flush.to_owned()),
            ];
            self.add(
                &crate::families::inval::metrics::IOMMU_CACHE_TAG_FLUSHES_TOTAL,
                l,
                r.count,
            );
        }
        let Some(b) = budget::of_device(d) else {
            return;
        };
        let part = |p: &str| vec![("device", dev.to_owned()), ("part", p.to_owned())];
        for (p, ns) in [
            ("dma_api", b.dma_api_ns),
            ("iommu", b.iommu_ns),
            ("invalidation", b.invalidation_ns),
        ] {
            self.add_f64(
                &crate::families::inval::metrics::TRANSLATION_SECONDS_TOTAL,
                part(p),
                ns as f64 / 1e9,
            );
        }
        for (p, v) in [
            ("dma_api", b.dma_api_ms_per_s),
            ("iommu", b.iommu_ms_per_s),
            ("invalidation", b.invalidation_ms_per_s),
            ("identity_saves", b.identity_saves_ms_per_s),
        ] {
            // CPU seconds per second (the report's ms/s / 1000): promtool
            // wants base units.
            let m = &crate::families::inval::metrics::TRANSLATION_BUDGET_RATIO;
            self.add_f64(m, part(p), v / 1e3);
        }
    }

    /// Host-wide: descriptors queued per unit and type (intel_iommu:qi_submit).
    pub(super) fn add_units(&mut self, agg: &Aggregator) {
        for (&class, c) in &agg.units.descriptors {
            let l = vec![
                ("iommu", unit_name(class)),
                ("type", type_name(class).to_owned()),
            ];
            let m = &crate::families::inval::metrics::IOMMU_INVALIDATION_DESCRIPTORS_TOTAL;
            self.add(m, l, c.count);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gpudirect_trace_common::{inval, kind, op, Event};

    use super::super::{tests::sample, text_of};
    use super::*;
    use crate::decode::Record;

    #[test]
    fn invalidations_and_the_budget_are_exported_per_device_unit_and_type() {
        let mut agg = Aggregator::new();
        let nvme: Arc<str> = Arc::from("0000:00:04.0");
        let inv = |ts: u64, ns: u64| Event {
            kind: kind::IOMMU_INVAL,
            ts_ns: ts,
            dir: inval::class(inval::VENDOR_INTEL, inval::QI_IOTLB, 0, true),
            phys: 0x32 | 5 << 16,
            size: ns,
            aux: 1,
            ..Default::default()
        };
        let lat = |ts: u64, o: u32, ns: u64| Event {
            kind: kind::LATENCY,
            ts_ns: ts,
            size: ns,
            aux: u64::from(o),
            ..Default::default()
        };
        agg.ingest(
            &Record::Event(lat(1_000_000_000, op::DMA_UNMAP, 8_000)),
            &nvme,
        );
        agg.ingest(
            &Record::Event(lat(1_000_001_000, op::IOTLB_SYNC, 3_000)),
            &nvme,
        );
        agg.ingest(&Record::Event(inv(1_000_002_000, 2_000)), &nvme);
        agg.ingest(&Record::Event(inv(2_000_000_000, 1_000)), &nvme);
        let text = text_of(&agg);
        let l = r#"device="0000:00:04.0",iommu="dmar0",type="iotlb""#;
        assert_eq!(
            sample(
                &text,
                &format!("gpudirect_iommu_invalidation_seconds_count{{{l}}}")
            ),
            Some(2.0),
            "{text}"
        );
        assert!(text.contains("# TYPE gpudirect_iommu_invalidation_seconds histogram"));
        let part = |p: &str| format!(r#"{{device="0000:00:04.0",part="{p}"}}"#);
        let secs = |p: &str| {
            sample(
                &text,
                &format!("gpudirect_translation_seconds_total{}", part(p)),
            )
        };
        assert_eq!(secs("dma_api"), Some(8e-6));
        // Nested invalidations are inside the timed iotlb_sync already.
        assert_eq!(secs("iommu"), Some(3e-6));
        assert_eq!(secs("invalidation"), Some(3e-6));
        let rate = sample(
            &text,
            &format!("gpudirect_translation_budget_ratio{}", part("invalidation")),
        );
        assert_eq!(rate, Some(3e-6), "3 us over the device's 1 s window");
        for name in [
            "gpudirect_iommu_invalidation_seconds",
            "gpudirect_translation_seconds_total",
            "gpudirect_translation_budget_ratio",
        ] {
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "{name} has help text"
            );
        }
    }
}
