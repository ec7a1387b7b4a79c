//! The IOVA API (6.17+) and skipped unmaps in the aggregation, with records
//! shaped as the hooks make them for an NVMe read through the block layer
//! (`blk_rq_dma_map_iter_start`: alloc, links, sync; completion: destroy).

use gpudirect_trace_common::{dir, flags, kind, Counter, CounterKey, Event, COUNTER_IOVA};

use super::*;
use crate::decode::Record;

const IOVA: u16 = flags::IOVA | flags::FROM_HOOK;

fn rec(k: u16, f: u16, addr: u64, size: u64, phys: u64, ts: u64) -> Record {
    Record::Event(Event {
        kind: k,
        flags: f,
        addr,
        size,
        phys,
        dir: dir::FROM_DEVICE,
        ts_ns: ts,
        ..Default::default()
    })
}

/// One 128 KiB read at `base`: 32 links of 4 KiB, a sync, a destroy.
fn read(agg: &mut Aggregator, dev: &Arc<str>, base: u64, ts: u64) {
    agg.ingest(&rec(kind::IOVA_ALLOC, IOVA, base, 128 << 10, 0, ts), dev);
    for i in 0..32 {
        let link = rec(
            kind::DMA_MAP,
            IOVA,
            base + i * 4096,
            4096,
            0x10_0000 + i * 4096,
            ts + 1,
        );
        agg.ingest(&link, dev);
    }
    agg.ingest(&rec(kind::IOVA_SYNC, IOVA, base, 128 << 10, 0, ts + 2), dev);
    let destroy = IOVA | flags::IOVA_DESTROY;
    agg.ingest(
        &rec(kind::DMA_UNMAP, destroy, base, 128 << 10, 32, ts + 1000),
        dev,
    );
    agg.ingest(
        &rec(kind::IOVA_FREE, destroy, base, 128 << 10, 0, ts + 1000),
        dev,
    );
}

#[test]
fn iova_links_are_the_devices_maps_and_a_destroy_ends_every_one() {
    let mut agg = Aggregator::new();
    let nvme: Arc<str> = Arc::from("0000:00:04.0");
    for r in 0..4u64 {
        read(&mut agg, &nvme, 0xfff0_0000 - r * 0x2_0000, r * 10_000);
    }
    let s = &agg.snapshot(1.0, &[])[0];
    assert_eq!(s.level, "dma");
    assert_eq!((s.maps, s.unmaps), (128, 128));
    assert_eq!(s.bytes_from_device, 4 * (128 << 10));
    assert_eq!((s.outstanding_mappings, s.outstanding_bytes), (0, 0));
    assert_eq!(s.dma.lifetime_ns.count, 128);
    assert_eq!(s.dma_sources.get("iova"), Some(&"hook"));
    let v = s.iova.as_ref().expect("iova row");
    assert_eq!(
        (v.allocs, v.links, v.unlinks, v.destroys, v.frees),
        (4, 128, 128, 4, 4)
    );
    assert_eq!((v.syncs, v.out_of_range), (4, 0));
}

#[test]
fn the_kernels_iova_counters_replace_the_streamed_counts() {
    let mut agg = Aggregator::new();
    let nvme: Arc<str> = Arc::from("0000:00:04.0");
    let key = |k: u16, iova: bool| {
        let mut key = CounterKey::new(0x1000, k, 0, dir::FROM_DEVICE);
        key.kind |= gpudirect_trace_common::COUNTER_FROM_HOOK;
        if iova {
            key.kind |= COUNTER_IOVA;
        }
        key
    };
    let c = |count, bytes| Counter { count, bytes };
    agg.apply_kernel_counters(&[
        (nvme.clone(), key(kind::IOVA_ALLOC, true), c(64, 4 << 20)),
        (nvme.clone(), key(kind::DMA_MAP, true), c(896, 4 << 20)),
        // 64 destroys ended 896 links.
        (nvme.clone(), key(kind::DMA_UNMAP, true), c(896, 4 << 20)),
        (nvme.clone(), key(kind::IOVA_FREE, true), c(64, 4 << 20)),
        (nvme.clone(), key(kind::IOVA_DECLINED, false), c(2, 0)),
    ]);
    let s = &agg.snapshot(1.0, &[])[0];
    assert_eq!((s.maps, s.unmaps, s.bytes_from_device), (896, 896, 4 << 20));
    let v = s.iova.as_ref().expect("iova row");
    assert_eq!(
        (v.allocs, v.links, v.unlinks, v.frees, v.declined),
        (64, 896, 896, 64, 2)
    );
}

#[test]
fn a_device_whose_unmaps_the_kernel_skips_has_nothing_outstanding() {
    let mut agg = Aggregator::new();
    let nvme: Arc<str> = Arc::from("0000:00:04.0");
    for i in 0..15u64 {
        agg.ingest(
            &rec(kind::DMA_MAP, 0, 0x20_0000 + i * 4096, 4096, 0, i),
            &nvme,
        );
    }
    assert_eq!(agg.snapshot(1.0, &[])[0].outstanding_mappings, 15);
    // dma_need_unmap() said false (counter-only kind).
    let key = CounterKey::new(0x1000, kind::UNMAP_NOT_NEEDED, 0, 0);
    let maps = CounterKey::new(0x1000, kind::DMA_MAP, 0, dir::FROM_DEVICE);
    agg.apply_kernel_counters(&[
        (
            nvme.clone(),
            key,
            Counter {
                count: 30,
                bytes: 0,
            },
        ),
        (
            nvme.clone(),
            maps,
            Counter {
                count: 15,
                bytes: 15 * 4096,
            },
        ),
    ]);
    // Later maps are not tracked either.
    agg.ingest(&rec(kind::DMA_MAP, 0, 0x90_0000, 4096, 0, 99), &nvme);
    let s = &agg.snapshot(1.0, &[])[0];
    assert_eq!((s.outstanding_mappings, s.outstanding_bytes), (0, 0));
    assert_eq!(
        (s.dma.unmaps_skipped, s.dma.unmaps_skipped_bytes),
        (16, 16 * 4096)
    );
    assert_eq!(s.unmap_not_needed, 30);
    assert!(agg.long_lived(1 << 40, 0, 10).is_empty());
    let row = &s.processes[0];
    assert_eq!(row.outstanding_mappings, 0);
    // render.rs's tests check the note the text view makes of it.
}
