use std::sync::Arc;

use gpudirect_trace_common::{kind, op, Event, LatHist, XidEvent, LAT_BUCKETS, XID_MSG_LEN};

use super::*;
use crate::{
    aggregate::{tests::ev, UNATTRIBUTED},
    decode::Record,
    ebpf::Status,
    model::Source,
};

fn xid(n: u32) -> Record {
    Record::Xid(XidEvent {
        event: Event {
            kind: kind::NV_XID,
            ..Default::default()
        },
        xid: n,
        msg_truncated: 0,
        msg: [0; XID_MSG_LEN],
    })
}

fn probe(name: &'static str, status: Status) -> ProbeStatus {
    ProbeStatus {
        name,
        kind: "raw_tracepoint",
        program: "p",
        status,
        reason: String::new(),
        hot: true,
    }
}

fn stats() -> SelfStats {
    let mut hits = vec![0; kind::COUNT as usize];
    hits[kind::DMA_MAP as usize] = 4;
    SelfStats {
        lost_events: 3,
        hits,
        ..Default::default()
    }
}

/// Fails, showing the text, unless it declares `family` of type `kind`.
pub(super) fn assert_declared(text: &str, family: &str, kind: &str) {
    let line = format!("# TYPE {family} {kind}\n");
    assert!(text.contains(&line), "no {line:?} in\n{text}");
}

/// The value of the sample line `series` (name and labels exactly as
/// written) in the text format; the GPU and invalidation tests read theirs
/// with it too.
pub(super) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().expect("numeric sample"))
}

fn fault(source: Source, reason: &str, count: u64) -> FaultCount {
    FaultCount {
        device: "0000:00:06.0".to_owned(),
        source,
        cause: reason.to_owned(),
        count,
    }
}

/// Records through the analysis, as a session takes them: the tables, and
/// the ledger that counts faults and Xids.
fn gpu_aggregator() -> Aggregator {
    let mut agg = crate::analysis::Analysis::new(crate::model::TraceClock::default());
    let gpu: Arc<str> = Arc::from("0000:00:06.0");
    for i in 0..3 {
        agg.record(&ev(kind::DMA_MAP, 0x1000 * (i + 1), 4096, 2), &gpu);
    }
    agg.record(&ev(kind::DMA_MAP, 0x10_0000, 2 << 20, 1), &gpu);
    agg.record(&ev(kind::DMA_UNMAP, 0x1000, 4096, 2), &gpu);
    agg.record(&ev(kind::SWIOTLB_BOUNCED, 0x2000, 2048, 0), &gpu);
    agg.record(&ev(kind::IO_PAGE_FAULT, 0xdead_0000, 0, 0), &gpu);
    for n in [79, 79, 13] {
        agg.record(&xid(n), &gpu);
    }
    let unattributed: Arc<str> = Arc::from(UNATTRIBUTED);
    agg.record(&ev(kind::IOMMU_MAP, 0xffff_0000, 8192, 0), &unattributed);
    agg.agg
}

#[test]
fn device_labels_are_bounded_stable_and_address_free() {
    let mut l = DeviceLabels::new(2);
    assert_eq!(&*l.label("0000:00:04.0"), "0000:00:04.0");
    assert_eq!(&*l.label("dev@0xffff888012345678"), "unnamed");
    assert_eq!(&*l.label("dev@0xffff888087654321"), "unnamed");
    assert_eq!(&*l.label("0000:00:06.0"), OTHER_DEVICE);
    assert_eq!(&*l.label(UNATTRIBUTED), OTHER_DEVICE);
    assert_eq!(
        &*l.label("0000:00:06.0"),
        OTHER_DEVICE,
        "folded stays folded"
    );
    assert_eq!(&*l.label("0000:00:04.0"), "0000:00:04.0", "admitted stays");
    assert_eq!(l.folded(), 2);
    let mut u = DeviceLabels::new(8);
    assert_eq!(&*u.label(UNATTRIBUTED), "unattributed");
    assert_eq!(
        &*u.label(OTHER_DEVICE),
        OTHER_DEVICE,
        "a device named other"
    );
    assert_eq!(u.folded(), 1);
}

#[test]
fn prometheus_text_has_the_documented_series_and_values() {
    let agg = gpu_aggregator();
    let probes = [
        probe("iommu:map", Status::Attached),
        probe("nvidia:nvidia_dev_xid", Status::Unavailable),
    ];
    let mut labels = DeviceLabels::new(256);
    let faults = [
        fault(
            Source::IommuTracepoint,
            "IOMMU page fault (report_iommu_fault)",
            1,
        ),
        fault(Source::Vtd, "PTE Write access is not set", 3),
        fault(Source::Aer, "Corrected: Receiver Error", 2),
        fault(Source::NvidiaXid, "Xid 79: GPU has fallen off the bus", 1),
    ];
    let model = Model::build(&agg, &stats(), &probes, &faults, &mut labels, true);
    let text = render(model, false).expect("encodes");
    let dev = r#"device="0000:00:06.0""#;
    let want = [
        (
            format!(r#"gpudirect_dma_map_bytes_total{{{dev},direction="from_device"}}"#),
            3.0 * 4096.0,
        ),
        (
            format!(r#"gpudirect_dma_map_bytes_total{{{dev},direction="to_device"}}"#),
            2097152.0,
        ),
        (
            format!(r#"gpudirect_dma_maps_total{{{dev},level="dma"}}"#),
            4.0,
        ),
        (
            format!(r#"gpudirect_dma_unmaps_total{{{dev},level="dma"}}"#),
            1.0,
        ),
        (
            format!(r#"gpudirect_mappings_outstanding{{{dev},level="dma"}}"#),
            3.0,
        ),
        (
            format!(r#"gpudirect_mappings_outstanding_bytes{{{dev},level="dma"}}"#),
            2.0 * 4096.0 + 2097152.0,
        ),
        (
            format!(r#"gpudirect_dma_map_size_bytes_bucket{{{dev},level="dma",le="4096"}}"#),
            3.0,
        ),
        (
            format!(r#"gpudirect_dma_map_size_bytes_bucket{{{dev},level="dma",le="+Inf"}}"#),
            4.0,
        ),
        (
            format!(r#"gpudirect_dma_map_size_bytes_sum{{{dev},level="dma"}}"#),
            3.0 * 4096.0 + 2097152.0,
        ),
        (
            format!(r#"gpudirect_swiotlb_bounced_bytes_total{{{dev}}}"#),
            2048.0,
        ),
        (format!(r#"gpudirect_swiotlb_bounces_total{{{dev}}}"#), 1.0),
        (
            format!(
                r#"gpudirect_iommu_faults_total{{{dev},source="iommu-tracepoint",reason="IOMMU page fault (report_iommu_fault)"}}"#
            ),
            1.0,
        ),
        (
            format!(
                r#"gpudirect_iommu_faults_total{{{dev},source="vtd",reason="PTE Write access is not set"}}"#
            ),
            3.0,
        ),
        (
            format!(
                r#"gpudirect_pcie_aer_errors_total{{{dev},reason="Corrected: Receiver Error"}}"#
            ),
            2.0,
        ),
        (
            format!(r#"gpudirect_nvidia_xid_total{{{dev},xid="79"}}"#),
            2.0,
        ),
        (
            format!(r#"gpudirect_nvidia_xid_total{{{dev},xid="13"}}"#),
            1.0,
        ),
        (
            r#"gpudirect_iommu_map_bytes_total{device="unattributed"}"#.to_owned(),
            8192.0,
        ),
        (
            r#"gpudirect_probe_attached{probe="iommu:map",kind="raw_tracepoint"}"#.to_owned(),
            1.0,
        ),
        (
            r#"gpudirect_probe_attached{probe="nvidia:nvidia_dev_xid",kind="raw_tracepoint"}"#
                .to_owned(),
            0.0,
        ),
        (r#"gpudirect_events_total{kind="dma_map"}"#.to_owned(), 4.0),
        ("gpudirect_events_received_total".to_owned(), 11.0),
        ("gpudirect_events_lost_total".to_owned(), 3.0),
        ("gpudirect_devices_folded_total".to_owned(), 0.0),
    ];
    for (series, value) in want {
        assert_eq!(sample(&text, &series), Some(value), "{series} in\n{text}");
    }
    assert_declared(&text, "gpudirect_dma_map_bytes_total", "counter");
    assert_declared(&text, "gpudirect_dma_map_size_bytes", "histogram");
    assert!(
        !text.contains("0x") && !text.contains("dead"),
        "no addresses:\n{text}"
    );
    assert!(
        !text.contains("gpudirect_iommu_map_latency"),
        "no latency was measured, so no latency family"
    );
    assert!(
        !text.contains(r#"source="nvidia-xid""#),
        "Xids are counted per number, not as faults"
    );
    assert!(!text.contains("# EOF"));
}

#[test]
fn openmetrics_has_units_and_eof() {
    let mut labels = DeviceLabels::new(256);
    let model = Model::build(&gpu_aggregator(), &stats(), &[], &[], &mut labels, true);
    let text = render(model, true).expect("encodes");
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert_declared(&text, "gpudirect_dma_map_bytes", "counter");
    assert!(
        text.contains("# UNIT gpudirect_dma_map_bytes bytes\n"),
        "{text}"
    );
    assert!(text.contains("gpudirect_events_lost_total 3\n"), "{text}");
}

#[test]
fn devices_past_the_cap_fold_into_other_and_sum() {
    let mut a = crate::analysis::Analysis::new(crate::model::TraceClock::default());
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        let dev: Arc<str> = Arc::from(name);
        a.record(&ev(kind::DMA_MAP, 0x1000, 4096 << i, 1), &dev);
        a.record(&xid(48), &dev);
    }
    let agg = a.agg;
    let mut labels = DeviceLabels::new(1);
    let model = Model::build(&agg, &stats(), &[], &[], &mut labels, true);
    let names = model.exported_names();
    let text = render(model, false).expect("encodes");
    let bytes = |d: &str| {
        let s = format!(r#"gpudirect_dma_map_bytes_total{{device="{d}",direction="to_device"}}"#);
        sample(&text, &s)
    };
    assert_eq!(bytes("a"), Some(4096.0));
    assert_eq!(bytes("other"), Some(8192.0 + 16384.0));
    assert_eq!(bytes("b"), None);
    let xids = sample(
        &text,
        r#"gpudirect_nvidia_xid_total{device="other",xid="48"}"#,
    );
    assert_eq!(xids, Some(2.0));
    assert_eq!(sample(&text, "gpudirect_devices_folded_total"), Some(2.0));
    let other_count = r#"gpudirect_dma_map_size_bytes_count{device="other",level="dma"}"#;
    assert_eq!(sample(&text, other_count), Some(2.0));
    for n in [
        "gpudirect_dma_map_bytes_total",
        "gpudirect_dma_map_size_bytes",
    ] {
        assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
    }
}

#[test]
fn histogram_buckets_from_hdr_are_exact_for_page_sizes() {
    let mut h = Histogram::<u64>::new(3).expect("histogram");
    for v in [512, 4096, 4096, 65536, 2 << 20, 3 << 30] {
        crate::aggregate::record(&mut h, v);
    }
    let v = HistogramValue::from_hdr(&h, SIZE_BUCKETS, 1.0);
    let count_at = |bound: f64| v.buckets.iter().find(|b| b.0 == bound).map(|b| b.1);
    assert_eq!(count_at(512.0), Some(1));
    assert_eq!(count_at(4096.0), Some(2));
    assert_eq!(count_at(65536.0), Some(1));
    assert_eq!(count_at(2097152.0), Some(1));
    assert_eq!(count_at(f64::INFINITY), Some(1), "3 GiB overflows");
    assert_eq!(v.count, 6);
    let exact = 512.0 + 8192.0 + 65536.0 + 2097152.0 + 3.0 * 1073741824.0;
    assert!(
        (v.sum - exact).abs() <= exact * 0.001,
        "{} vs {exact}",
        v.sum
    );
}

#[test]
fn latency_comes_from_the_kernel_log2_histogram_else_the_stream() {
    let mut agg = Aggregator::new();
    let dev: Arc<str> = Arc::from("0000:00:06.0");
    let latency = |o: u32, ns: u64| {
        Record::Event(Event {
            kind: kind::LATENCY,
            size: ns,
            aux: u64::from(o),
            ..Default::default()
        })
    };
    // Streamed iommu_map latencies: 1.5 µs x3, 20 µs.
    for ns in [1500, 1500, 1500, 20_000] {
        agg.ingest(&latency(op::IOMMU_MAP, ns), &dev);
    }
    // The kernel's log2 histogram: 2 in [2^10, 2^11) ns, 1 in [2^14, 2^15),
    // for iotlb_sync, and for dma_map, which was streamed too: the kernel's
    // (loss-free) wins.
    let mut k = LatHist {
        count: 3,
        sum_ns: 1100 + 1200 + 20_000,
        max_ns: 20_000,
        buckets: [0; LAT_BUCKETS],
    };
    k.buckets[10] = 2;
    k.buckets[14] = 1;
    agg.apply_kernel_latency(&[
        (dev.clone(), op::IOTLB_SYNC, k),
        (dev.clone(), op::DMA_MAP, k),
    ]);
    agg.ingest(&latency(op::DMA_MAP, 999_999), &dev);

    let mut labels = DeviceLabels::new(4);
    let model = Model::build(&agg, &stats(), &[], &[], &mut labels, true);
    let text = render(model, false).expect("encodes");
    let series = |op: &str, suffix: &str| {
        let s = format!(
            r#"gpudirect_iommu_map_latency_seconds_{suffix}{{device="0000:00:06.0",op="{op}"}}"#
        );
        sample(&text, &s)
    };
    assert_eq!(series("iommu_map", "count"), Some(4.0), "{text}");
    let sum = series("iommu_map", "sum").expect("sum");
    assert!((sum - 24.5e-6).abs() < 1e-9, "{sum}");
    assert_eq!(series("iotlb_sync", "count"), Some(3.0));
    let sum = series("iotlb_sync", "sum").expect("sum");
    assert!((sum - 22.3e-6).abs() < 1e-12, "{sum}");
    assert_eq!(
        series("dma_map", "count"),
        Some(3.0),
        "kernel histogram preferred"
    );

    let bucket = |v: &HistogramValue, ns: u64| {
        let i = LATENCY_BUCKETS_NS.iter().position(|&b| b == ns);
        v.buckets[i.expect("a bound")].1
    };
    let v = HistogramValue::from_log2(&k, LATENCY_BUCKETS_NS, 1e-9);
    assert_eq!(bucket(&v, 1 << 11), 2, "[1024, 2048) ns is <= 2048 ns");
    assert_eq!(bucket(&v, 1 << 10), 0);
    assert_eq!(bucket(&v, 1 << 15), 1);
    assert_eq!(v.count, 3);
    let stream = &agg.devices[&dev].latency[&op::IOMMU_MAP].hist;
    let s = HistogramValue::from_hdr(stream, LATENCY_BUCKETS_NS, 1e-9);
    assert_eq!((bucket(&s, 1 << 11), bucket(&s, 1 << 15)), (3, 1), "{s:?}");
}

#[test]
fn faults_from_other_sources_keep_their_labels() {
    let mut labels = DeviceLabels::new(4);
    let mut model = Model::default();
    let f = |source: Source, reason: &str, count| FaultCount {
        device: "0000:41:00.0".to_owned(),
        source,
        cause: reason.to_owned(),
        count,
    };
    let long = "x".repeat(200);
    model.add_faults(
        &[
            f(Source::Smmu, "F_TRANSLATION", 2),
            f(Source::AmdVi, &long, 1),
        ],
        &mut labels,
    );
    let text = render(model, false).expect("encodes");
    let s = r#"gpudirect_iommu_faults_total{device="0000:41:00.0",source="smmu",reason="F_TRANSLATION"}"#;
    assert_eq!(sample(&text, s), Some(2.0), "{text}");
    let cut = "x".repeat(MAX_REASON_LEN);
    let s = format!(
        r#"gpudirect_iommu_faults_total{{device="0000:41:00.0",source="amd-vi",reason="{cut}"}}"#
    );
    assert_eq!(
        sample(&text, &s),
        Some(1.0),
        "reason cut to {MAX_REASON_LEN}:\n{text}"
    );
}

#[test]
fn aggregate_only_exports_counts_but_no_outstanding_mappings() {
    let mut labels = DeviceLabels::new(4);
    let model = Model::build(&gpu_aggregator(), &stats(), &[], &[], &mut labels, false);
    let names = model.exported_names();
    let text = render(model, false).expect("encodes");
    let maps = r#"gpudirect_dma_maps_total{device="0000:00:06.0",level="dma"}"#;
    assert_eq!(sample(&text, maps), Some(4.0));
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("gpudirect_mappings_outstanding")),
        "unknown without the stream, so absent rather than 0: {names:?}"
    );
}
