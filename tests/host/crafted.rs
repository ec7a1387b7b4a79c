//! Crafted trace files for the readers' memory budget and output escaping
//! (issue 30): each builder makes a small, valid file whose content asks a
//! reader to keep much (never-unmapped maps over many devices, levels and
//! processes; huge names, stacks, faults and triggers; open spans; many
//! latency operations and checkpoint rows), at a scale the caller picks.
//! The files are written with the real writer, or with blocks framed as the
//! writer frames them where the writer would never produce their content.

use std::{fs, io::BufWriter, path::Path};

use gpudirect_trace::{
    aggregate::ProcName,
    decode::Record,
    model::{
        misuse::{CheckSetup, StackFrames},
        Fault, Source,
    },
    tracefile::{format::flag, Checkpoint, CounterRow, End, Header, TraceWriter},
};
use gpudirect_trace_common::{flags, kind, op, Event};

type Writer = TraceWriter<BufWriter<fs::File>>;

pub(crate) fn writer(path: &Path, header: &Header) -> Writer {
    let f = fs::File::create(path).expect("create");
    TraceWriter::new(BufWriter::new(f), header).expect("header")
}

pub(crate) fn base_header() -> Header {
    Header {
        hostname: "crafted".into(),
        start_ts_ns: 1_000,
        clock: "CLOCK_MONOTONIC".into(),
        ..Default::default()
    }
}

/// A JSON block as the writer frames one (zstd), whatever its content.
pub(crate) fn json_block(w: &mut Writer, typ: u16, json: &[u8]) {
    let z = zstd::bulk::compress(json, 3).expect("compress");
    w.raw_block(typ, flag::ZSTD, &z).expect("block");
}

/// A header saying the misuse checks ran (`--check`, with `--stacks` or
/// without).
fn checked_header(stacks: bool) -> Header {
    Header {
        checks: Some(CheckSetup {
            kernel_image: Vec::new(),
            stacks,
        }),
        ..base_header()
    }
}

fn map_event(kind: u16, ts_ns: u64, addr: u64, pid: u32, fl: u16) -> Record {
    Record::Event(Event {
        kind,
        ts_ns,
        addr,
        phys: addr,
        size: 4096,
        pid,
        tid: pid,
        flags: fl,
        dir: 2,
        ..Default::default()
    })
}

/// `per_level` maps never unmapped on each of `devices` devices at each of
/// the three levels, from `pids` processes in turn; the misuse checks on
/// (so the checker keeps every handle too).
pub(crate) fn never_unmapped(path: &Path, devices: u64, per_level: u64, pids: u32) {
    let mut w = writer(path, &checked_header(false));
    for d in 0..devices {
        let dev = format!("0000:{:02x}:{:02x}.0", d / 32, d % 32);
        for i in 0..per_level {
            let addr = 0x1_0000_0000 + (i << 12);
            let pid = 1 + (i % u64::from(pids)) as u32;
            let ts = 2_000 + i;
            for (k, fl) in [
                (kind::DMA_MAP, 0),
                (kind::IOMMU_MAP, flags::VIA_DMA_API),
                (kind::DMA_ALLOC, flags::COHERENT),
            ] {
                w.push(&map_event(k, ts, addr, pid, fl), &dev)
                    .expect("push");
            }
        }
    }
    w.finish(&End::default()).expect("finish");
}

/// `n` maps never unmapped on one device (the spans `export --format
/// chrome` keeps open).
pub(crate) fn open_spans(path: &Path, n: u64) {
    let mut w = writer(path, &base_header());
    for i in 0..n {
        let r = map_event(kind::DMA_MAP, 2_000 + i, 0x1000 + (i << 12), 7, 0);
        w.push(&r, "0000:01:00.0").expect("push");
    }
    w.finish(&End::default()).expect("finish");
}

/// A string of `len` bytes that ends in `tail`.
pub(crate) fn long_text(len: usize, tail: &str) -> String {
    let mut s = "x".repeat(len.saturating_sub(tail.len()));
    s.push_str(tail);
    s
}

/// `blocks` NAMES blocks naming `per_block` new pids each, every name
/// `name_len` bytes (with a container id as long).
pub(crate) fn huge_names(path: &Path, blocks: u32, per_block: u32, name_len: usize) {
    let mut w = writer(path, &base_header());
    w.push(
        &map_event(kind::DMA_MAP, 2_000, 0x1000, 1, 0),
        "0000:01:00.0",
    )
    .expect("push");
    for b in 0..blocks {
        let names: Vec<ProcName> = (0..per_block)
            .map(|i| ProcName {
                pid: b * per_block + i + 1,
                comm: Some(long_text(name_len, &format!("{b}/{i}"))),
                container: Some(long_text(name_len, "c")),
            })
            .collect();
        w.names(&names).expect("names");
    }
    w.finish(&End::default()).expect("finish");
}

/// `blocks` STACKS blocks of `per_block` stacks of `frames` frames of
/// `frame_len` bytes.
pub(crate) fn huge_stacks(
    path: &Path,
    blocks: u32,
    per_block: u32,
    frames: usize,
    frame_len: usize,
) {
    let mut w = writer(path, &checked_header(true));
    for b in 0..blocks {
        let list: Vec<StackFrames> = (0..per_block)
            .map(|i| StackFrames {
                id: b * per_block + i,
                frames: (0..frames)
                    .map(|f| long_text(frame_len, &format!("+{f}")))
                    .collect(),
            })
            .collect();
        w.stacks(&list).expect("stacks");
    }
    w.finish(&End::default()).expect("finish");
}

/// `n` faults from the kernel log, each of its own device, cause and Xid
/// number, with text of `text_len` bytes in every string it has.
pub(crate) fn huge_faults(path: &Path, n: u32, text_len: usize) {
    let mut w = writer(path, &base_header());
    let mut batch = Vec::new();
    for i in 0..n {
        let tail = format!("#{i}");
        let mut f = Fault::new(
            if i % 2 == 0 {
                Source::NvidiaXid
            } else {
                Source::Vtd
            },
            long_text(text_len, &tail),
            &long_text(text_len, &tail),
        );
        f.device = Some(long_text(text_len.min(4096), &tail));
        f.xid = Some(i);
        f.address = Some(u64::from(i) << 12);
        f.explanation = long_text(text_len, &tail);
        f.flags = vec![long_text(text_len, &tail)];
        f.timestamp_ns = Some(2_000 + u64::from(i));
        batch.push(f);
        if batch.len() == 256 {
            w.log_faults(&batch).expect("faults");
            batch.clear();
        }
    }
    w.log_faults(&batch).expect("faults");
    w.finish(&End::default()).expect("finish");
}

/// `n` TRIGGER blocks, each with an incident whose strings are `text_len`
/// bytes.
pub(crate) fn huge_triggers(path: &Path, n: u32, text_len: usize) {
    use gpudirect_trace::{
        analysis::Ledger,
        model::{Channel, TraceClock},
        tracefile::Trigger,
    };
    let mut w = writer(path, &base_header());
    let mut ledger = Ledger::new(TraceClock::new(1_000, 0));
    for i in 0..n {
        let t = long_text(text_len, &format!("#{i}"));
        let mut f = Fault::new(Source::Vtd, t.clone(), &t);
        f.device = Some(t.clone());
        f.explanation = t.clone();
        f.timestamp_ns = Some(2_000 + u64::from(i));
        let id = ledger.fault(f, Channel::KernelLog, |_| None).id();
        let trigger = Trigger {
            name: t.clone(),
            label: t.clone(),
            at_ns: 2_000 + u64::from(i),
            incident: ledger.get(id).cloned(),
            suppressed: Some(t),
        };
        w.trigger(&trigger).expect("trigger");
    }
    w.finish(&End::default()).expect("finish");
}

/// Latency events of `ops` distinct operation numbers on `devices` devices,
/// spread over `buckets` 10 ms steps (the page's series keep a histogram per
/// device, operation and bucket).
pub(crate) fn many_latency_ops(path: &Path, devices: u64, ops: u64, buckets: u64) {
    let mut w = writer(path, &base_header());
    for d in 0..devices {
        let dev = format!("0000:{:02x}:{:02x}.1", d / 32, d % 32);
        for b in 0..buckets {
            for o in 0..ops {
                let r = Record::Event(Event {
                    kind: kind::LATENCY,
                    ts_ns: 2_000 + b * 10_000_000,
                    aux: if o < u64::from(op::COUNT) {
                        o
                    } else {
                        1000 + o
                    },
                    size: 1000 + o,
                    ..Default::default()
                });
                w.push(&r, &dev).expect("push");
            }
        }
    }
    w.finish(&End::default()).expect("finish");
}

/// `n` checkpoints, 10 ms apart, each with `rows` counter rows over as many
/// devices and `hits` tracepoint kinds.
pub(crate) fn wide_checkpoints(path: &Path, n: u64, rows: u32, hits: usize) {
    let mut w = writer(path, &base_header());
    for c in 0..n {
        let cp = Checkpoint {
            ts_ns: 2_000 + c * 10_000_000,
            events_written: c,
            lost_total: 0,
            hits: vec![c; hits],
            counters: (0..rows)
                .map(|r| CounterRow {
                    device: std::sync::Arc::from(format!("cp{r}")),
                    kind: u32::from(kind::DMA_MAP),
                    dir: r % 4,
                    count: c,
                    bytes: c * 4096,
                })
                .collect(),
        };
        w.checkpoint(&cp).expect("checkpoint");
    }
    w.finish(&End::default()).expect("finish");
}

/// A header whose command is `args` arguments and whose host name is
/// `host_len` bytes.
pub(crate) fn huge_header(path: &Path, args: usize, host_len: usize) {
    let header = Header {
        hostname: long_text(host_len, "h"),
        command: vec![String::new(); args],
        ..base_header()
    };
    let w = writer(path, &header);
    w.finish(&End::default()).expect("finish");
}

/// What every string of `forging_strings` carries: a line feed that would
/// start a line of its own, and escape sequences.
pub(crate) const FORGE: &str = "ok\nFORGED line\r\u{1b}[2J\u{1b}]0;owned\u{7}\u{9b}31m\u{7f}";

/// A trace whose every string (host, kernel, boot id, command, probe
/// reason, device inventory, GPU, device, process and container names, a
/// fault's text, an Xid message, a driver change) carries `FORGE`.
pub(crate) fn forging_strings(path: &Path) {
    use gpudirect_trace::{
        gpu::{identity::IndexSource, GpuIdentity},
        model::pci::DriverChange,
        tracefile::{PciDevice, ProbeInfo},
    };
    use gpudirect_trace_common::{XidEvent, XID_MSG_LEN};
    let f = |s: &str| format!("{s}{FORGE}");
    let dev = f("0000:01:00.0");
    let header = Header {
        hostname: f("host"),
        kernel_release: f("6.18"),
        boot_id: f("boot"),
        tool_version: f("0.1"),
        command: vec![f("cmd"), f("arg")],
        probes: vec![ProbeInfo {
            name: f("probe"),
            kind: f("kind"),
            program: f("prog"),
            status: "attached".into(),
            reason: f("reason"),
            hot: true,
        }],
        devices: vec![PciDevice {
            bus_id: dev.clone(),
            vendor: f("10de"),
            device: f("2335"),
            class: f("0x030200"),
            driver: Some(f("nvidia")),
            iommu_group: Some(1),
            numa_node: None,
            iommu_type: Some(f("DMA")),
            upstream: Some(f("0000:00:01.0")),
            names: vec![f("nvme0")],
        }],
        gpus: vec![GpuIdentity {
            index: Some(0),
            index_source: IndexSource::PciOrder,
            uuid: Some(f("GPU-uuid")),
            bus_id: dev.clone(),
            name: f("NVIDIA H200"),
            minor: Some(0),
        }],
        ..base_header()
    };
    let mut w = writer(path, &header);
    for i in 0..4u64 {
        w.push(
            &map_event(kind::DMA_MAP, 2_000 + i, 0x1000 * (i + 1), 77, 0),
            &dev,
        )
        .expect("push");
    }
    let mut msg = [0u8; XID_MSG_LEN];
    let text = f("Xid message");
    msg[..text.len().min(XID_MSG_LEN - 1)]
        .copy_from_slice(&text.as_bytes()[..text.len().min(XID_MSG_LEN - 1)]);
    let xid = Record::Xid(XidEvent {
        event: Event {
            kind: kind::NV_XID,
            ts_ns: 3_000,
            pid: 77,
            ..Default::default()
        },
        xid: 79,
        msg_truncated: 0,
        msg,
    });
    w.push(&xid, &dev).expect("push");
    w.names(&[ProcName {
        pid: 77,
        comm: Some(f("comm")),
        container: Some(f("container")),
    }])
    .expect("names");
    let mut fault = Fault::new(Source::Vtd, f("reason"), &f("raw line"));
    fault.device = Some(dev.clone());
    fault.explanation = f("explanation");
    fault.flags = vec![f("flag")];
    fault.address = Some(0x1000);
    fault.timestamp_ns = Some(4_000);
    w.log_fault(&fault).expect("fault");
    w.driver(&DriverChange {
        ts_ns: 5_000,
        device: dev.clone(),
        driver: Some(f("driver")),
    })
    .expect("driver");
    w.finish(&End::default()).expect("finish");
}

/// A trace naming `devices` devices, each with u64-range values in every
/// histogram the aggregator keeps (three levels, all latency ops).
pub(crate) fn device_value_bombs(path: &Path, devices: u64) {
    let header = Header {
        start_ts_ns: 1,
        ..Default::default()
    };
    let mut w = writer(path, &header);
    let big = u64::MAX >> 1;
    for i in 0..devices {
        let dev = format!("crafted{i}");
        let mut push = |kind: u16, ts_ns: u64, aux: u64, flags: u16| {
            let e = Event {
                kind,
                ts_ns,
                addr: 0x1000,
                size: big,
                aux,
                flags,
                dir: 1,
                ..Default::default()
            };
            w.push(&Record::Event(e), &dev).expect("push");
        };
        for (map, unmap, fl) in [
            (kind::DMA_MAP, kind::DMA_UNMAP, 0),
            (kind::IOMMU_MAP, kind::IOMMU_UNMAP, flags::VIA_DMA_API),
            (kind::DMA_ALLOC, kind::DMA_FREE, flags::COHERENT),
        ] {
            push(map, 1, 0, fl);
            push(unmap, big, 0, fl);
        }
        for o in 0..u64::from(op::COUNT) {
            push(kind::LATENCY, 2, o, 0);
        }
    }
    w.finish(&End::default()).expect("finish");
}

/// JSON blocks whose lists are long and whose items are tiny (each `{}` or
/// `""` of a few bytes becomes tens of bytes parsed): a NAMES block of
/// `entries` pids, a STACKS block of one stack with `entries` empty frames.
pub(crate) fn json_lists(path: &Path, entries: u32) {
    use gpudirect_trace::tracefile::format::block;
    let mut w = writer(path, &base_header());
    let names: Vec<String> = (0..entries).map(|p| format!("{{\"pid\":{p}}}")).collect();
    json_block(
        &mut w,
        block::NAMES,
        format!("[{}]", names.join(",")).as_bytes(),
    );
    let frames = vec!["\"\""; entries as usize].join(",");
    json_block(
        &mut w,
        block::STACKS,
        format!("[{{\"id\":1,\"frames\":[{frames}]}}]").as_bytes(),
    );
    w.finish(&End::default()).expect("finish");
}

/// Full EVENTS blocks that do not compress (random addresses, sizes, pids
/// and 159-byte Xid messages, each Xid an incident), interleaved with maps
/// never unmapped over 128 devices: the reader's own buffers at their
/// largest while every keeper fills.
pub(crate) fn xid_flood(path: &Path, n: u64) {
    use gpudirect_trace_common::{XidEvent, XID_MSG_LEN};
    let mut w = writer(path, &base_header());
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..n {
        let dev = format!("0000:{:02x}:00.0", i % 128);
        let r = if i % 2 == 0 {
            let mut msg = [0u8; XID_MSG_LEN];
            for b in msg.iter_mut().take(XID_MSG_LEN - 1) {
                *b = b'a' + (next() % 26) as u8;
            }
            Record::Xid(XidEvent {
                event: Event {
                    kind: kind::NV_XID,
                    ts_ns: 2_000 + i * 1_000,
                    pid: next() as u32,
                    ..Default::default()
                },
                xid: (next() % 200) as u32,
                msg_truncated: 0,
                msg,
            })
        } else {
            let mut e = map_event(kind::DMA_MAP, 2_000 + i * 1_000, next(), next() as u32, 0);
            if let Record::Event(ev) = &mut e {
                ev.size = next() >> 20;
                ev.phys = next();
            }
            e
        };
        w.push(&r, &dev).expect("push");
    }
    w.finish(&End::default()).expect("finish");
}
