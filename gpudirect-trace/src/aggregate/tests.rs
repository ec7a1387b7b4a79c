//! Unit tests of the aggregation.

use gpudirect_trace_common::{kind, Counter, CounterKey, Event};

use super::*;
use crate::{
    decode::Record,
    model::{MappingState, Process},
};

/// An event of kind `k` and nothing else set: the serve tests build their
/// aggregates from these too.
pub(crate) fn ev(k: u16, addr: u64, size: u64, dir: u32) -> Record {
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
            g.families.swiotlb.swiotlb_bounces,
            g.families.swiotlb.swiotlb_bounced_bytes
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
fn process_exit_counters_make_no_device_row() {
    // Every process that exits while a stream runs is counted by the kernel
    // under dev 0 (the name of its record): that made an all-zero
    // "(iommu, unattributed)" row in every live view and report of a host
    // without IOMMU activity.
    let mut agg = Aggregator::new();
    let exits = CounterKey {
        dev: 0,
        kind: u32::from(kind::PROC_EXIT),
        dir: 0,
    };
    let c = Counter { count: 3, bytes: 0 };
    agg.apply_kernel_counters(&[(Arc::from(super::UNATTRIBUTED), exits, c)]);
    assert!(agg.snapshot(0.0, &[]).is_empty());
}

#[test]
fn faults_are_counted_by_the_ledger_not_on_ingest() {
    // One fault reported by two channels must count once: the ledger counts
    // (analysis::ledger), the tables only take what it tells them.
    let mut agg = Aggregator::new();
    let dev: Arc<str> = Arc::from("0000:00:03.0");
    let e = Event {
        kind: kind::IO_PAGE_FAULT,
        addr: 0x123000,
        aux: 1,
        ..Default::default()
    };
    agg.ingest(&Record::Event(e), &dev);
    assert_eq!(agg.snapshot(0.0, &[])[0].faults, 0);
    agg.count_fault(&dev, None, 1);
    agg.count_fault(&dev, Some(31), 2);
    let s = &agg.snapshot(0.0, &[])[0];
    assert_eq!((s.faults, s.xids), (1, 2));
}

#[test]
fn a_dma_api_unmap_ends_only_the_mapping_of_its_handle() {
    // Without an IOMMU a scatterlist's DMA addresses are its pages' physical
    // addresses, scattered: a 3-page sg mapping at 0x10000 "spans" 12 KiB
    // from its first address, and another mapping may start in between (seen
    // on the GPU host: ~1% of streamed lifetimes went missing that way).
    let mut agg = Aggregator::new();
    let dev: Arc<str> = Arc::from("0000:00:06.0");
    let at = |k: u16, addr: u64, size: u64, ts_ns: u64| {
        Record::Event(Event {
            kind: k,
            addr,
            size,
            ts_ns,
            ..Default::default()
        })
    };
    agg.ingest(&at(kind::DMA_MAP, 0x10000, 3 * 4096, 1_000), &dev);
    agg.ingest(&at(kind::DMA_MAP, 0x11000, 4096, 2_000), &dev);
    agg.ingest(&at(kind::DMA_UNMAP, 0x10000, 3 * 4096, 3_000), &dev);
    let s = &agg.snapshot(0.0, &[])[0];
    assert_eq!((s.dma.unmaps, s.dma.outstanding_mappings), (1, 1));
    agg.ingest(&at(kind::DMA_UNMAP, 0x11000, 4096, 7_000), &dev);
    let s = &agg.snapshot(0.0, &[])[0];
    assert_eq!(
        s.dma.lifetime_ns.count, 2,
        "both unmaps found their mapping"
    );
    assert_eq!(s.dma.lifetime_ns.max, 5_000);
    assert_eq!(s.dma.outstanding_mappings, 0);
}

#[test]
fn one_unmap_ends_every_mapping_in_its_range() {
    let mut agg = Aggregator::new();
    let dev: Arc<str> = Arc::from("0000:00:04.0");
    // dma-iommu maps a 3-entry scatterlist as 3 iommu:map calls in one IOVA
    // range, and unmaps the range with a single iommu_unmap_fast.
    for (i, size) in [4096u64, 8192, 4096].iter().enumerate() {
        let e = Event {
            kind: kind::IOMMU_MAP,
            addr: 0xffff_0000 + i as u64 * 0x4000,
            size: *size,
            ts_ns: 1_000 + i as u64,
            ..Default::default()
        };
        agg.ingest(&Record::Event(e), &dev);
    }
    let e = Event {
        kind: kind::IOMMU_UNMAP,
        addr: 0xffff_0000,
        size: 0xc000,
        aux: 0xc000,
        ts_ns: 5_000,
        ..Default::default()
    };
    agg.ingest(&Record::Event(e), &dev);
    let s = &agg.snapshot(0.0, &[])[0];
    assert_eq!(
        (s.iommu.maps, s.iommu.unmaps, s.iommu.outstanding_mappings),
        (3, 1, 0)
    );
    assert_eq!(s.iommu.outstanding_bytes, 0);
    assert_eq!(s.iommu.lifetime_ns.count, 1);
    assert_eq!(
        s.iommu.lifetime_ns.max, 4_000,
        "lifetime from the oldest mapping"
    );
}

#[test]
fn fault_mapping_state_distinguishes_live_unmapped_and_never_mapped() {
    let mut agg = Aggregator::new();
    let dev: Arc<str> = Arc::from("0000:00:03.0");
    let ev = |k, addr, ts_ns, pid| {
        Record::Event(Event {
            kind: k,
            addr,
            size: 4096,
            aux: 4096,
            ts_ns,
            pid,
            ..Default::default()
        })
    };
    agg.ingest(&ev(kind::IOMMU_MAP, 0x200000, 1_000, 812), &dev);
    agg.ingest(&ev(kind::IOMMU_MAP, 0x300000, 1_000, 812), &dev);
    agg.ingest(&ev(kind::IOMMU_UNMAP, 0x200000, 10_000, 812), &dev);
    let unmapped = agg.mapping_state("0000:00:03.0", 0x200010, Some(45_000));
    assert_eq!(
        unmapped,
        MappingState::Unmapped {
            level: MapLevel::Iommu,
            before_ns: 35_000,
            by: Some(Process::current_task(812)),
        }
    );
    assert_eq!(
        unmapped.to_string(),
        "unmapped 35.0us before the fault by pid 812 [current task] (IOMMU mapping): DMA after unmap"
    );
    assert_eq!(
        agg.mapping_state("0000:00:03.0", 0x300010, Some(45_000)),
        MappingState::Mapped {
            level: MapLevel::Iommu,
            age_ns: 44_000,
            by: Some(Process::current_task(812)),
        }
    );
    assert_eq!(
        agg.mapping_state("0000:00:03.0", 0x123000, Some(45_000)),
        MappingState::NeverMapped { device_seen: true }
    );
    assert_eq!(
        agg.mapping_state("0000:00:09.0", 0x123000, None),
        MappingState::NeverMapped { device_seen: false }
    );
}

/// Input from trace files is untrusted (issue 19): devices past the cap
/// share one row, latency ops that do not exist are not kept, histogram
/// growth stays within its budget, and totals saturate.
#[test]
fn crafted_input_is_bounded() {
    let mut agg = Aggregator::with_max_devices(2);
    for d in ["a", "b", "c", "d"] {
        agg.ingest(&ev(kind::DMA_MAP, 0x1000, u64::MAX, 1), &Arc::from(d));
        agg.ingest(&ev(kind::DMA_MAP, 0x2000, u64::MAX, 1), &Arc::from(d));
    }
    let names: Vec<_> = agg.devices.keys().map(|k| k.to_string()).collect();
    assert_eq!(names, vec![FOLDED_DEVICES, "a", "b"]);
    assert!(agg.folded >= 4, "{}", agg.folded);
    assert_eq!(agg.devices["a"].dma.bytes_mapped, u64::MAX, "saturated");

    let mut lat = Aggregator::new();
    let mut e = Event {
        kind: kind::LATENCY,
        size: 100,
        ..Default::default()
    };
    for aux in [0, u64::from(op::COUNT), u64::from(u32::MAX) + 7] {
        e.aux = aux;
        lat.ingest(&Record::Event(e), &Arc::from("x"));
    }
    assert_eq!(lat.devices["x"].latency.len(), 1);
    assert_eq!(lat.decode_errors, 2);

    // On a thread of its own: the budget is per thread.
    std::thread::spawn(|| {
        use crate::memory_budget::{self, Keeper};
        memory_budget::limit(0);
        let mut h = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
        let size = h.distinct_values();
        record(&mut h, u64::MAX >> 1);
        assert_eq!(h.distinct_values(), size, "no growth past the budget");
        let clamped = memory_budget::dropped_by(Keeper::Histograms);
        assert_eq!((h.len(), clamped), (1, 1));
    })
    .join()
    .expect("budget thread");
}

/// The DMA-API source of a device's level (hook records and counters carry
/// their mark), a failed map as an error rather than a mapping, syncs, and
/// "none" (never "iommu") for a device without IOMMU activity.
#[test]
fn dma_source_map_errors_syncs_and_level_none() {
    use gpudirect_trace_common::{flags, COUNTER_FROM_HOOK, DMA_MAPPING_ERROR};
    let mut agg = Aggregator::new();
    let nvme: Arc<str> = Arc::from("0000:00:04.0");
    let gpu: Arc<str> = Arc::from("0000:00:06.0");
    let edu: Arc<str> = Arc::from("0000:00:03.0");
    let hooked = |k, addr, size| {
        Record::Event(Event {
            kind: k,
            flags: flags::FROM_HOOK,
            addr,
            size,
            dir: 2,
            ..Default::default()
        })
    };
    agg.ingest(&hooked(kind::DMA_MAP, 0x1000, 4096), &nvme);
    agg.ingest(&hooked(kind::DMA_MAP_ERR, DMA_MAPPING_ERROR, 4096), &nvme);
    agg.ingest(&hooked(kind::DMA_SYNC_CPU, 0x1000, 4096), &nvme);
    agg.ingest(&ev(kind::DMA_MAP, 0x9000, 8192, 1), &gpu);
    // Only a coherent allocation: no streaming or IOMMU level at all.
    agg.ingest(&ev(kind::DMA_ALLOC, 0x5000, 4096, 0), &edu);
    let snap = agg.snapshot(1.0, &[]);
    let get = |name: &str| snap.iter().find(|d| d.device == name).expect(name);
    let n = get("0000:00:04.0");
    assert_eq!((n.level, n.dma_source), ("dma", "hooks"));
    assert_eq!((n.maps, n.bytes_mapped, n.map_errors), (1, 4096, 1));
    assert_eq!((n.dma_syncs, n.dma_sync_bytes), (1, 4096));
    assert_eq!(
        n.outstanding_mappings, 1,
        "the failed map is not outstanding"
    );
    assert_eq!(get("0000:00:06.0").dma_source, "tracepoints");
    assert_eq!(get("0000:00:03.0").level, "none");
    // The counters' source bit says the same in aggregate-only mode.
    let key = |k: u16, from_hook: bool| CounterKey {
        dev: 0,
        kind: u32::from(k) | if from_hook { COUNTER_FROM_HOOK } else { 0 },
        dir: 2,
    };
    let mut agg = Aggregator::new();
    let c = Counter {
        count: 3,
        bytes: 3 << 12,
    };
    agg.apply_kernel_counters(&[
        (nvme.clone(), key(kind::DMA_MAP_SG, true), c),
        (
            nvme.clone(),
            key(kind::SG_TRUNCATED, true),
            Counter {
                count: 1,
                bytes: 4096,
            },
        ),
    ]);
    let snap = agg.snapshot(1.0, &[]);
    let n = snap
        .iter()
        .find(|d| d.device == "0000:00:04.0")
        .expect("nvme");
    assert_eq!((n.dma_source, n.maps, n.sg_truncated), ("hooks", 3, 1));
    assert_eq!(
        n.bytes_mapped,
        3 << 12,
        "the truncation counter adds no bytes"
    );
}

/// Issue 20: a map made in interrupt context (an e1000e refill in NAPI) is
/// its own row, never the interrupted task's; an unmap from a completion
/// interrupt names no process in the mapping's state.
#[test]
fn interrupt_context_is_its_own_row_not_the_interrupted_task() {
    use gpudirect_trace_common::flags::IN_INTERRUPT;
    let mut agg = Aggregator::new();
    let nic: Arc<str> = Arc::from("0000:00:03.0");
    let task = |pid, flags, k, addr| {
        Record::Event(Event {
            kind: k,
            addr,
            size: 4096,
            pid,
            tid: pid,
            flags,
            ts_ns: 1_000,
            ..Default::default()
        })
    };
    agg.ingest(&task(500, 0, kind::DMA_MAP, 0x1000), &nic);
    agg.ingest(&task(500, IN_INTERRUPT, kind::DMA_MAP, 0x2000), &nic);
    agg.ingest(&task(500, IN_INTERRUPT, kind::DMA_MAP, 0x3000), &nic);
    agg.ingest(&task(77, IN_INTERRUPT, kind::DMA_UNMAP, 0x1000), &nic);
    let snap = agg.snapshot(1.0, &[]);
    let rows = &snap[0].processes;
    let irq = rows
        .iter()
        .find(|r| r.context == Some("interrupt"))
        .expect("an interrupt row");
    assert_eq!((irq.pid, irq.maps, irq.outstanding_bytes), (0, 2, 8192));
    assert_eq!(irq.comm.as_deref(), Some("(interrupt context)"));
    let p = rows.iter().find(|r| r.pid == 500).expect("pid 500");
    assert_eq!((p.maps, p.unmaps, p.outstanding_mappings), (1, 1, 0));
    assert!(!agg.unnamed_pids().contains(&INTERRUPT_PID));
    match agg.mapping_state("0000:00:03.0", 0x1000, Some(2_000)) {
        MappingState::Unmapped { by, .. } => {
            assert_eq!(by, Some(Process::interrupt()));
            assert_eq!(by.expect("by").to_string(), "interrupt context");
        }
        other => panic!("{other:?}"),
    }
    let json = serde_json::to_value(irq).expect("json");
    assert_eq!(json["context"], "interrupt");
    assert!(serde_json::to_value(p)
        .expect("json")
        .get("context")
        .is_none());
}
