//! Synthetic recordings for the page's tests, written with the real
//! `TraceWriter` (so the real reader, replay and ledger take them): one
//! small recording with every kind of thing the page shows, and a long,
//! fast one for the size budget. Synthetic because no machine here has the
//! devices; the H200 recording and the format-1.0 file are the real ones.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use gpudirect_trace_common::{kind, op, Event, SgEvent, XidEvent, XID_MSG_LEN};

use crate::{
    decode::Record,
    tracefile::{
        tests::{header, Rng},
        Checkpoint, CounterRow, End, Header, Loss, PciDevice, TraceWriter,
    },
};

/// A recording `make` writes as `name` in a fresh tempdir (the caller keeps
/// the tempdir while it uses the file; what `make` returns is not needed).
pub fn in_tempdir<T>(name: &str, make: impl FnOnce(&Path) -> T) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join(name);
    make(&f);
    (dir, f)
}

pub const GPU: &str = "0000:00:06.0";
pub const NVME: &str = "0000:00:04.0";
pub const NIC: &str = "0000:41:00.0";
/// Text a crafted log line carries: markup, a terminal escape, a
/// right-to-left override. The page must show it as text.
pub const HOSTILE: &str = "<script>alert(1)</script>\u{1b}[31m\u{202e}evil";

fn pci(bus: &str, vendor: &str, class: &str, driver: &str) -> PciDevice {
    PciDevice {
        bus_id: bus.into(),
        vendor: vendor.into(),
        device: "0x2335".into(),
        class: class.into(),
        driver: Some(driver.into()),
        iommu_group: Some(7),
        numa_node: Some(0),
        iommu_type: Some("DMA".into()),
        upstream: None,
        names: Vec::new(),
    }
}

fn synthetic_header() -> Header {
    let mut h = header();
    h.hostname = "synthetic-host".into();
    h.start_unix_ns = 1_764_556_800_000_000_000;
    h.devices = vec![
        pci(NVME, "0x1b36", "0x010802", "nvme"),
        pci(GPU, "0x10de", "0x030200", "nvidia"),
        pci(NIC, "0x15b3", "0x020000", "mlx5_core"),
    ];
    h
}

fn ev(kind: u16, ts_ns: u64, pid: u32, addr: u64, size: u64) -> Event {
    Event {
        kind,
        ts_ns,
        pid,
        tid: pid,
        addr,
        size,
        dir: 1,
        ..Default::default()
    }
}

/// What the timing hooks report of one `op` that took `ns`.
fn latency(op: u32, ts_ns: u64, pid: u32, addr: u64, ns: u64) -> Record {
    Record::Event(Event {
        aux: u64::from(op),
        ..ev(kind::LATENCY, ts_ns, pid, addr, ns)
    })
}

fn nvme_counters(maps: (u64, u64), unmaps: (u64, u64)) -> Vec<CounterRow> {
    [(kind::DMA_MAP, maps), (kind::DMA_UNMAP, unmaps)]
        .into_iter()
        .map(|(k, (count, bytes))| CounterRow {
            device: Arc::from(NVME),
            kind: u32::from(k),
            dir: 1,
            count,
            bytes,
        })
        .collect()
}

fn log_fault(w: &mut TraceWriter<std::fs::File>, line: &str, ts_ns: u64) {
    let mut f = crate::faults::parse_line(line).unwrap_or_else(|| panic!("decodes: {line}"));
    f.timestamp_ns = Some(ts_ns);
    w.log_fault(&f).expect("log fault");
}

/// 10 s with everything the page draws: DMA-API, sg, IOMMU and coherent
/// mappings by several processes (pid 4242 leaks), latencies of three
/// operations, swiotlb bounces, a VT-d fault after an unmap, an
/// io_page_fault, one Xid reported by both its tracepoint and its log line
/// (one incident), an AER error, a failed dma_map_sg, IOMMU group and
/// domain changes, a loss record with a hostile log line, checkpoints.
pub fn rich(path: &Path) {
    let h = synthetic_header();
    let t0 = h.start_ts_ns;
    let s = 1_000_000_000u64;
    let mut w = TraceWriter::new(std::fs::File::create(path).expect("create"), &h).expect("header");
    let mut rng = Rng::new(21);
    w.push(
        &Record::Event(Event {
            aux: 7,
            ..ev(kind::GROUP_ADD_DEVICE, t0 + s / 10, 1, 0, 0)
        }),
        NVME,
    )
    .expect("group");
    w.push(
        &Record::Event(ev(kind::DOMAIN_ATTACH, t0 + s / 5, 1, 0, 0)),
        NVME,
    )
    .expect("domain");
    let mut leaked = 0u64;
    // What the kernel's counters would say of the NVMe: (count, bytes).
    let (mut maps, mut unmaps) = ((0u64, 0u64), (0u64, 0u64));
    for i in 0..5000u64 {
        let ts = t0 + i * 2_000_000;
        let pid = [1201, 1202, 4242][(i % 3) as usize];
        let addr = 0x1_0000_0000 + (i % 512) * 0x10_0000;
        let size = 4096 << rng.below(6);
        // The NVMe: page maps and unmaps; pid 4242 never unmaps (a leak).
        let at = if pid == 4242 {
            0x8_0000_0000 + leaked * 0x10_0000
        } else {
            addr
        };
        w.push(&Record::Event(ev(kind::DMA_MAP, ts, pid, at, size)), NVME)
            .expect("map");
        maps = (maps.0 + 1, maps.1 + size);
        if pid == 4242 {
            leaked += 1;
        } else {
            unmaps = (unmaps.0 + 1, unmaps.1 + size);
            w.push(
                &Record::Event(ev(kind::DMA_UNMAP, ts + 300_000, pid, addr, size)),
                NVME,
            )
            .expect("unmap");
        }
        w.push(
            &latency(
                op::DMA_MAP,
                ts + 1,
                pid,
                addr,
                300 + rng.below(2000) + (i / 1000) * 400,
            ),
            NVME,
        )
        .expect("latency");
        // The IOMMU underneath it.
        if i % 4 == 0 {
            w.push(
                &Record::Event(ev(kind::IOMMU_MAP, ts + 2, pid, addr, size)),
                NVME,
            )
            .expect("iommu map");
            w.push(
                &Record::Event(ev(kind::IOMMU_UNMAP, ts + 200_000, pid, addr, size)),
                NVME,
            )
            .expect("iommu unmap");
            w.push(
                &latency(op::IOTLB_SYNC, ts + 3, pid, 0, 800 + rng.below(5000)),
                NVME,
            )
            .expect("latency");
        }
        // The GPU: pinned-memory scatterlists and coherent buffers.
        if i % 5 == 0 {
            let mut sg = SgEvent {
                event: ev(
                    kind::DMA_MAP_SG,
                    ts + 10,
                    700,
                    0x2_0000_0000 + i * 0x10_0000,
                    3 << 20,
                ),
                nents: 3,
                ents: 3,
                n_lens: 3,
                ..Default::default()
            };
            sg.lens[..3].copy_from_slice(&[1 << 20, 1 << 20, 1 << 20]);
            w.push(&Record::Sg(sg), GPU).expect("sg");
            let mut un = sg;
            un.event.kind = kind::DMA_UNMAP_SG;
            un.event.ts_ns = ts + 1_500_000;
            w.push(&Record::Sg(un), GPU).expect("unmap sg");
            w.push(
                &latency(op::DMA_MAP_SG, ts + 11, 700, 0, 5_000 + rng.below(40_000)),
                GPU,
            )
            .expect("latency");
        }
        if i % 50 == 0 {
            w.push(
                &Record::Event(ev(
                    kind::DMA_ALLOC,
                    ts + 20,
                    700,
                    0x3_0000_0000 + i * 0x1000,
                    65536,
                )),
                GPU,
            )
            .expect("alloc");
        }
        if i % 7 == 0 {
            w.push(
                &Record::Event(ev(kind::SWIOTLB_BOUNCED, ts + 30, 900, 0, 2048)),
                NIC,
            )
            .expect("bounce");
        }
        if i % 500 == 0 {
            let ts = ts + 40;
            w.checkpoint(&Checkpoint {
                ts_ns: ts,
                events_written: i * 5,
                lost_total: if i >= 2500 { 17 } else { 0 },
                hits: vec![i * 5 + i / 10],
                counters: nvme_counters(maps, unmaps),
            })
            .expect("checkpoint");
        }
    }
    // A VFIO-style IOMMU mapping of 0x200000 on the NIC, unmapped, then a
    // VT-d fault there: DMA after unmap.
    w.push(
        &Record::Event(ev(kind::IOMMU_MAP, t0 + 3 * s, 555, 0x200000, 4096)),
        NIC,
    )
    .expect("map");
    w.push(
        &Record::Event(ev(
            kind::IOMMU_UNMAP,
            t0 + 3 * s + 50_000_000,
            555,
            0x200000,
            4096,
        )),
        NIC,
    )
    .expect("unmap");
    log_fault(
        &mut w,
        "DMAR: [DMA Write NO_PASID] Request device [41:00.0] fault addr 0x200000 [fault reason 0x05] PTE Write access is not set",
        t0 + 3 * s + 117_000_000,
    );
    w.push(
        &Record::Event(Event {
            aux: 1,
            ..ev(kind::IO_PAGE_FAULT, t0 + 4 * s, 0, 0xdead_0000, 0)
        }),
        NIC,
    )
    .expect("io_page_fault");
    // One Xid, two channels: the tracepoint (in the driver's worker, pid
    // 181) and the driver's log line naming pid 619.
    let mut xid = XidEvent {
        event: ev(kind::NV_XID, t0 + 6 * s, 181, 0, 0),
        xid: 31,
        msg_truncated: 0,
        msg: [0; XID_MSG_LEN],
    };
    let msg = b"pid=619, name=trainer, channel 0x00000002, MMU Fault: ENGINE GRAPHICS faulted @ 0x7f00_00000000";
    xid.msg[..msg.len()].copy_from_slice(msg);
    w.push(&Record::Xid(xid), GPU).expect("xid");
    log_fault(
        &mut w,
        "NVRM: Xid (PCI:0000:00:06): 31, pid=619, name=trainer, channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
        t0 + 6 * s + 3_000_000,
    );
    w.push(
        &Record::Event(Event {
            addr: 0x1000,
            aux: 2,
            ..ev(kind::AER, t0 + 7 * s, 0, 0, 0)
        }),
        GPU,
    )
    .expect("aer");
    w.push(
        &Record::Event(Event {
            aux: (-12i64) as u64,
            dir: 2,
            ..ev(kind::DMA_MAP_SG_ERR, t0 + 8 * s, 4242, 0, 64)
        }),
        GPU,
    )
    .expect("map error");
    log_fault(
        &mut w,
        &format!("DMAR: [DMA Read NO_PASID] Request device [41:00.0] fault addr 0xbad000 [fault reason 0x06] PTE Read access is not set {HOSTILE}"),
        t0 + 9 * s,
    );
    w.loss(&Loss {
        ts_ns: t0 + 5 * s,
        lost: 17,
        total: 17,
    })
    .expect("loss");
    w.finish(&End {
        ts_ns: t0 + 10 * s,
        events_written: 25_000,
        lost_total: 17,
        exit_status: Some(0),
    })
    .expect("finish");
}

/// `seconds` of `rate` events per second: map/unmap pairs on four devices
/// from eight processes, with latencies of four operations per device (the
/// most series a page draws per device), a fault a minute, a loss record
/// and a checkpoint every second.
pub fn long(path: &Path, seconds: u64, rate: u64) -> u64 {
    let h = synthetic_header();
    let t0 = h.start_ts_ns;
    let devs = [NVME, GPU, NIC, "0000:81:00.0"];
    let ops = [op::DMA_MAP, op::DMA_UNMAP, op::IOMMU_MAP, op::IOTLB_SYNC];
    let f = std::fs::File::create(path).expect("create");
    let mut w = TraceWriter::new(f, &h).expect("header");
    let mut rng = Rng::new(7);
    let gap = 1_000_000_000 / rate.max(1);
    let total = seconds * rate;
    let mut n = 0u64;
    let mut k = 0u64;
    while n < total {
        let ts = t0 + n * gap;
        let d = (k % 4) as usize;
        let pid = 2000 + (k % 8) as u32;
        let addr = 0x1_0000_0000 + (k % 4096) * 0x1000;
        let size = 4096 << rng.below(5);
        w.push(
            &Record::Event(ev(kind::DMA_MAP, ts, pid, addr, size)),
            devs[d],
        )
        .expect("map");
        w.push(
            &Record::Event(ev(kind::DMA_UNMAP, ts + gap, pid, addr, size)),
            devs[d],
        )
        .expect("unmap");
        let o = ops[(k / 4 % 4) as usize];
        w.push(
            &latency(o, ts + gap, pid, 0, 200 + rng.below(4000)),
            devs[d],
        )
        .expect("latency");
        n += 3;
        k += 1;
        if k % (rate / 3).max(1) == 0 {
            let sec = n / rate;
            w.checkpoint(&Checkpoint {
                ts_ns: ts,
                events_written: n,
                hits: vec![n],
                ..Default::default()
            })
            .expect("checkpoint");
            if sec % 60 == 30 {
                w.push(
                    &Record::Event(Event {
                        aux: 1,
                        ..ev(kind::IO_PAGE_FAULT, ts, 0, 0xdead_0000 + sec, 0)
                    }),
                    NIC,
                )
                .expect("fault");
                w.loss(&Loss {
                    ts_ns: ts,
                    lost: 5,
                    total: 5 * (sec / 60 + 1),
                })
                .expect("loss");
            }
        }
    }
    w.finish(&End {
        ts_ns: t0 + seconds * 1_000_000_000,
        events_written: n,
        ..Default::default()
    })
    .expect("finish");
    n
}

/// An aggregate-only recording of 20 s: no mapping events, only the
/// kernel's counters at each second's checkpoint (maps outpacing unmaps
/// after 10 s: a leak) and one rare event, a VT-d fault from the log.
pub fn aggregate_only(path: &Path) {
    let mut h = synthetic_header();
    h.aggregate_only = true;
    let t0 = h.start_ts_ns;
    let mut w = TraceWriter::new(std::fs::File::create(path).expect("create"), &h).expect("header");
    let (mut maps, mut unmaps) = ((0u64, 0u64), (0u64, 0u64));
    for sec in 1..=20u64 {
        maps = (maps.0 + 5000, maps.1 + 5000 * 8192);
        let u = if sec > 10 { 4000 } else { 5000 };
        unmaps = (unmaps.0 + u, unmaps.1 + u * 8192);
        w.checkpoint(&Checkpoint {
            ts_ns: t0 + sec * 1_000_000_000,
            events_written: sec,
            lost_total: 0,
            hits: vec![maps.0 + unmaps.0],
            counters: nvme_counters(maps, unmaps),
        })
        .expect("checkpoint");
        if sec == 12 {
            log_fault(
                &mut w,
                "DMAR: [DMA Write NO_PASID] Request device [00:04.0] fault addr 0x9000 [fault reason 0x05] PTE Write access is not set",
                t0 + sec * 1_000_000_000 + 1,
            );
        }
    }
    w.finish(&End {
        ts_ns: t0 + 20_000_000_000,
        events_written: 20,
        ..Default::default()
    })
    .expect("finish");
}
