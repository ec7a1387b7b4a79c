//! The invalidation programs and families: the intel_iommu:qi_submit
//! program driven with BPF_PROG_TEST_RUN (the CI host has no VT-d: the
//! descriptor is synthetic, the program, counters and aggregation are the
//! production ones), and the exported families checked by promtool. The
//! timing hooks themselves (fentry/kprobe on qi_submit_sync) need a kernel
//! with VT-d: the flush-strict/flush-lazy VM scenarios check them.

use std::sync::Arc;

use gpudirect_trace::{aggregate::Aggregator, decode::Record, serve::metrics::text_of};
use gpudirect_trace_common::{inval, kind, Event};

use crate::{gpu_metrics::promtool, inject::Injector};

#[test]
fn qi_submit_descriptors_are_counted_per_unit_type_and_pages() {
    let mut inj = Injector::as_root();
    // A page-selective IOTLB invalidation (type 2, granularity 3 in bits
    // 4..6, domain id 7) of 2^3 pages, twice; one interrupt-entry-cache one.
    let iotlb = 0x2 | 0x30 | 7 << 16;
    for _ in 0..2 {
        inj.run("intel_qi_submit", &[0, iotlb, 0x1234_5000 | 3, 0, 0]);
    }
    inj.run("intel_qi_submit", &[0, 0x4, 0, 0, 0]);
    assert_eq!(inj.drain_all(), 0, "descriptors are counted, not streamed");
    let counters = inj.tracer.kernel_counters();
    let descs: Vec<_> = counters
        .iter()
        .filter(|(_, k, _)| k.event_kind() == kind::QI_DESCRIPTOR)
        .map(|(_, k, c)| (inval::ty(k.dir), inval::unit(k.dir), c.count, c.bytes))
        .collect();
    // The intel_iommu pointer is null here: the unit is unknown.
    assert_eq!(
        descs,
        [
            (inval::QI_IOTLB, inval::UNIT_UNKNOWN, 2, 16),
            (inval::QI_IEC, inval::UNIT_UNKNOWN, 1, 0)
        ]
    );
    inj.analysis.agg.apply_kernel_counters(&counters);
    let rows = inj.analysis.agg.unit_rows();
    let find = |t: &str| {
        rows.iter()
            .find(|r| r.row.kind == t)
            .map(|r| r.descriptors_queued)
    };
    assert_eq!(find("iotlb"), Some(Some(2)), "{rows:?}");
    assert_eq!(find("interrupt_entry_cache"), Some(Some(1)), "{rows:?}");
    assert_eq!(rows[0].row.iommu, "dmar?");
    let stats = inj.tracer.self_stats();
    assert_eq!(
        stats.hits[kind::QI_DESCRIPTOR as usize],
        3,
        "tracepoint hits"
    );
}

#[test]
fn invalidation_and_budget_families_pass_promtool() {
    let mut agg = Aggregator::new();
    let dev: Arc<str> = Arc::from("0000:00:04.0");
    for (i, (ty, nested)) in [
        (inval::QI_IOTLB, true),
        (inval::QI_IOTLB, false),
        (inval::QI_IEC, false),
    ]
    .into_iter()
    .enumerate()
    {
        let ev = Event {
            kind: kind::IOMMU_INVAL,
            ts_ns: 1_000_000 * (i as u64 + 1),
            dir: inval::class(inval::VENDOR_INTEL, ty, 0, nested),
            phys: u64::from(ty) | 3 << 16,
            size: 2_500,
            aux: 1,
            ..Default::default()
        };
        agg.ingest(&Record::Event(ev), &dev);
    }
    let text = text_of(&agg);
    for family in [
        "gpudirect_iommu_invalidation_seconds_bucket",
        "gpudirect_translation_seconds_total",
        "gpudirect_translation_budget_ratio",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
    let (ok, said) = promtool(&text);
    assert!(ok, "promtool check metrics: {said}\n{text}");
}
