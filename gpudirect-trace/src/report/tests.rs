//! `report` and `export` on a synthetic recording (no root needed).

use std::{path::Path, sync::Arc, time::Duration};

use gpudirect_trace_common::{kind, Event};
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

use super::{html, html::synthetic::in_tempdir, replay, Window};
use crate::{
    decode::Record,
    export::{self, ExportOptions, Format},
    tracefile::{
        tests::{header, map_unmap_stream},
        Checkpoint, CounterRow, End, Loss, TraceWriter,
    },
};

const N: usize = 1000;
const SHARED_PHYS: u64 = 0x7_7777_7000;

/// A trace file at `path` with the test header, and the header's start
/// time (the recordings' t0).
fn test_writer(path: &Path) -> (TraceWriter<std::fs::File>, u64) {
    let h = header();
    let w = TraceWriter::new(std::fs::File::create(path).expect("create"), &h).expect("header");
    (w, h.start_ts_ns)
}

/// 1000 map/unmap events 10 ms apart (10 s), a fault at 3 s, a loss at 5 s,
/// checkpoints at 1 s and 9 s; the first two maps share a physical page.
fn sample(path: &Path) -> u64 {
    let (mut w, t0) = test_writer(path);
    let mut shared = 0;
    for (i, (mut r, d)) in map_unmap_stream(N, 3).into_iter().enumerate() {
        if let Record::Event(e) = &mut r {
            e.ts_ns = t0 + i as u64 * 10_000_000;
            if e.kind == kind::DMA_MAP && shared < 2 {
                e.phys = SHARED_PHYS;
                shared += 1;
            }
        }
        w.push(&r, d).expect("push");
        if i == 100 || i == 900 {
            w.checkpoint(&Checkpoint {
                ts_ns: t0 + i as u64 * 10_000_000,
                counters: vec![CounterRow {
                    device: Arc::from("0000:00:04.0"),
                    kind: u32::from(kind::DMA_MAP),
                    dir: 1,
                    count: i as u64 * 10,
                    bytes: i as u64 * 40960,
                }],
                ..Default::default()
            })
            .expect("checkpoint");
        }
    }
    let fault = Event {
        kind: kind::IO_PAGE_FAULT,
        ts_ns: t0 + 3_000_000_005,
        addr: 0xdead_0000,
        aux: 1,
        ..Default::default()
    };
    w.push(&Record::Event(fault), "0000:41:00.0")
        .expect("fault");
    // A VT-d fault from the kernel log, on the same device.
    let mut vtd = crate::faults::parse_line(
        "DMAR: [DMA Write NO_PASID] Request device [41:00.0] fault addr 0xbeef000 [fault reason 0x05] PTE Write access is not set",
    )
    .expect("VT-d line");
    vtd.timestamp_ns = Some(t0 + 4_000_000_000);
    w.log_fault(&vtd).expect("faults");
    w.loss(&Loss {
        ts_ns: t0 + 5_000_000_000,
        lost: 42,
        total: 42,
    })
    .expect("loss");
    w.finish(&End {
        ts_ns: t0 + 10_000_000_000,
        ..Default::default()
    })
    .expect("finish");
    t0
}

#[test]
fn report_replays_whole_file_and_windows() {
    let (_dir, f) = in_tempdir("t.gdt", sample);
    let r = replay(&f, &Window::default()).expect("replay");
    assert_eq!(r.analysis.agg.events, N as u64 + 1);
    assert_eq!(r.losses.iter().map(|l| l.lost).sum::<u64>(), 42);
    let incidents: Vec<_> = r.incidents().collect();
    assert_eq!(incidents.len(), 2, "the tracepoint's fault and the log's");
    assert_eq!(incidents[0].address, Some(0xdead_0000));
    assert_eq!(incidents[0].at.t_s, 3.0, "microseconds on the trace clock");
    assert!(r.stats.clean_end);
    let vtd = incidents[1].fault.as_ref().expect("the VT-d fault");
    assert_eq!(vtd.reason, "PTE Write access is not set");
    assert_eq!(incidents[1].at.t_s, 4.0);
    // Whole file: the last checkpoint's loss-free counts replace the stream's.
    let mut agg = r.analysis.agg;
    let snap = agg.snapshot(1.0, &["0000:00:04.0".to_owned()]);
    assert_eq!(snap[0].maps, 9000);
    let gpu = agg.snapshot(1.0, &["0000:41:00.0".to_owned()]);
    assert_eq!(gpu[0].faults, 2, "the tracepoint's fault and the log's");

    let window = |from: u64, to: u64| Window {
        from: Some(Duration::from_secs(from)),
        to: Some(Duration::from_secs(to)),
        devices: Vec::new(),
    };
    let w = replay(&f, &window(2, 4)).expect("window");
    assert_eq!(
        w.analysis.agg.events, 201,
        "200 events 10 ms apart + the fault"
    );
    assert!(w.losses.is_empty() && w.counters.is_none());
    assert_eq!(
        w.incidents().count(),
        1,
        "the log's fault is at 4 s, outside"
    );
    assert_eq!(
        w.kernel_hits, None,
        "no checkpoint inside 2..4 s: the in-kernel count of the window is unknown, not 0"
    );
    let only = replay(
        &f,
        &Window {
            devices: vec!["0000:00:04.0".to_owned()],
            ..Default::default()
        },
    )
    .expect("filtered");
    assert_eq!(
        only.incidents().count(),
        0,
        "the faults are on another device"
    );
    assert!(replay(&f, &window(5, 1)).is_err());
}

// The HTML page's own tests (with and without a browser) are in
// report/html/tests.rs and report/html/browser_tests.rs.

fn export(f: &Path, format: Format, redact: bool) -> String {
    let out = f.with_extension(format!("{format:?}{redact}"));
    export::run(&ExportOptions::whole(f, format, &out, redact)).expect("export");
    std::fs::read_to_string(out).expect("output")
}

#[test]
fn jsonl_has_every_event_and_redaction_keeps_pseudonyms_stable() {
    let (_dir, f) = in_tempdir("t.gdt", sample);
    let plain = export(&f, Format::Jsonl, false);
    let lines: Vec<serde_json::Value> = plain
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(
        lines.len(),
        N + 3,
        "events, the fault event, the log's fault, the loss"
    );
    assert!(lines
        .iter()
        .any(|l| l["kind"] == "decoded_fault" && l["t_s"] == 4.0));
    let shared = format!("{SHARED_PHYS:#x}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l["phys"] == shared.as_str())
            .count(),
        2
    );
    assert!(lines
        .iter()
        .any(|l| l["kind"] == "lost_events" && l["lost"] == 42));

    let red = export(&f, Format::Jsonl, true);
    let rl: Vec<serde_json::Value> = red
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    for (a, b) in lines.iter().zip(&rl) {
        assert_eq!(a["addr"], b["addr"], "IOVAs stay");
        assert_eq!(a["device"], b["device"], "bus ids stay");
        if let Some(orig) = a["phys"].as_str().filter(|p| *p != "0x0") {
            let p = b["phys"].as_str().expect("pseudonym");
            assert!(p.starts_with('p') && !red.contains(orig), "{orig} -> {p}");
        }
    }
    let pseud: Vec<_> = lines
        .iter()
        .zip(&rl)
        .filter(|(a, _)| a["phys"] == shared.as_str())
        .map(|(_, b)| b["phys"].clone())
        .collect();
    assert_eq!(pseud[0], pseud[1], "same address, same pseudonym");
}

#[test]
fn chrome_export_has_device_tracks_spans_and_instants() {
    let (_dir, f) = in_tempdir("t.gdt", sample);
    let doc: serde_json::Value =
        serde_json::from_str(&export(&f, Format::Chrome, false)).expect("chrome JSON");
    let ev = doc["traceEvents"].as_array().expect("traceEvents");
    let names: Vec<_> = ev
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        names.contains(&"0000:00:04.0".to_owned()) && names.contains(&"0000:41:00.0".to_owned())
    );
    let spans = ev.iter().filter(|e| e["ph"] == "X").count();
    let maps = N / 2; // roughly half the stream are maps
    assert!(spans > maps / 2 && spans <= N, "{spans} spans");
    assert!(ev
        .iter()
        .all(|e| e["ph"] != "X" || e["dur"].as_f64().unwrap_or(-1.0) >= 0.0));
    assert!(ev
        .iter()
        .any(|e| e["ph"] == "i" && e["name"] == "io_page_fault"));
    assert!(
        ev.iter().any(|e| e["ph"] == "i" && e["s"] == "g"),
        "loss marker"
    );
}

#[test]
fn hdr_export_is_a_v2_interval_log_per_device_and_operation() {
    let (_dir, f) = in_tempdir("t.gdt", sample);
    let log = export(&f, Format::Hdr, false);
    let mut tags = std::collections::BTreeSet::new();
    let mut intervals = 0;
    for entry in IntervalLogIterator::new(log.as_bytes()) {
        if let LogEntry::Interval(h) = entry.expect("parses") {
            intervals += 1;
            tags.insert(h.tag().map(|t| t.as_str().to_owned()).unwrap_or_default());
        }
    }
    assert!(tags.contains("0000:00:04.0/dma_map"), "{tags:?}");
    assert!(intervals >= 10, "one per second per device: {intervals}");
    assert_eq!(
        export::hdr_tag("(iommu, unattributed)", "iommu_map"),
        "(iommu__unattributed)/iommu_map"
    );
}

/// A real recording from the 2x H200 GPU host (tests/fixtures/
/// gpu-host-h200x2-trace/session2/record: `record` during 500 iterations of
/// scripts/gpu-host/workload.py): both GPUs' mappings come back on their bus
/// ids, every unmap pairs with its map, and the file reads cleanly.
#[test]
fn recording_from_the_gpu_host_replays_with_every_mapping_paired() {
    let f = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu-host-h200x2-trace/session2/record/gpu-h200x2.gdt");
    let mut r = replay(&f, &Window::default()).expect("replay the GPU-host recording");
    assert!(
        r.header.kernel_release.contains("gpu"),
        "{}",
        r.header.kernel_release
    );
    let devices = r.analysis.agg.snapshot(1.0, &[]);
    for bdf in ["0000:00:06.0", "0000:00:07.0"] {
        let d = devices
            .iter()
            .find(|d| d.device == bdf)
            .unwrap_or_else(|| panic!("no {bdf} in {devices:?}"));
        assert_eq!((d.level, d.maps, d.unmaps), ("dma", 2086, 2086), "{bdf}");
        assert_eq!(d.sg_maps, 1019, "{bdf}: cudaHostRegister maps scatterlists");
        assert_eq!(d.dma.lifetime_ns.count, 2086, "{bdf}: every unmap paired");
        assert_eq!(d.outstanding_mappings, 0, "{bdf}");
    }
}

/// A file written by format 1.0 (tests/fixtures/format-1.0/README.md) reads
/// with 1.1's reader and tells its story through the ledger: the VT-d
/// fault after the unmap is "DMA after unmap", the Xid is one incident
/// whose process comes from the driver's message, the tracepoint duplicates
/// 1.0 stored as fault objects are dropped, and there is one clock.
#[test]
fn format_1_0_file_still_reads() {
    use crate::model::{incident::Category, MappingState, Process};
    let f = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/format-1.0/dma-after-unmap.gdt");
    let r = replay(&f, &Window::default()).expect("a 1.0 file reads");
    assert_eq!(r.stats.version, (1, 0));
    assert!(r.stats.clean_end);
    let incidents: Vec<_> = r.incidents().collect();
    let cats: Vec<_> = incidents.iter().map(|i| i.category).collect();
    assert_eq!(
        cats,
        [Category::IommuFault, Category::Xid, Category::IommuFault],
        "VT-d fault, Xid, io_page_fault: each once"
    );
    let vtd = incidents[0].fault.as_ref().expect("fault");
    assert_eq!(incidents[0].at.t_s, 1.1674);
    match &vtd.mapping {
        Some(MappingState::Unmapped { before_ns, by, .. }) => {
            assert_eq!(*before_ns, 67_400_000);
            assert_eq!(by.as_ref().map(|p| p.pid), Some(121));
        }
        other => panic!("expected DMA after unmap, got {other:?}"),
    }
    assert_eq!(
        incidents[1].process,
        Some(Process::reported(619, Some("xid".into()))),
        "the Xid's process from the driver's message, not pid 181"
    );
    assert_eq!(incidents[1].at.t_s, 2.0);
    let devices = {
        let mut agg = r.analysis.agg;
        agg.snapshot(1.0, &[])
    };
    let gpu = devices
        .iter()
        .find(|d| d.device == "0000:00:06.0")
        .expect("GPU");
    assert_eq!((gpu.xids, gpu.faults), (1, 0));
}

/// One clock in every view: the report's text, JSON and HTML show each
/// incident at its seconds since the recording's start, never at the
/// kernel's boot clock (the 1.0 fixture starts 1 s after boot, so the two
/// differ by exactly 1 s), and JSON's `t_s` agrees with its monotonic ns.
#[test]
fn every_view_shows_one_clock() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/format-1.0/dma-after-unmap.gdt");
    let mut r = replay(&f, &Window::default()).expect("replay");
    let devices = r.analysis.agg.snapshot(3.0, &[]);
    let text = super::text("f", &r, &devices, 3.0);
    let json = super::json("f", &r, &devices);
    let page = html::page("f", &r, &devices);
    let start = r.header.start_ts_ns;
    let incidents = json["incidents"].as_array().expect("incidents");
    assert_eq!(incidents.len(), 3);
    for i in incidents {
        let t = i["t_s"].as_f64().expect("t_s");
        let mono = i["mono_ns"].as_u64().expect("mono_ns");
        assert_eq!(t, (mono - start) as f64 / 1e9, "{i}");
        let trace_clock = format!("{t:.6}s");
        let boot_clock = format!("{:.6}s", mono as f64 / 1e9);
        for (view, s) in [("text", &text), ("html", &page)] {
            assert!(s.contains(&trace_clock), "{view} lacks {trace_clock}");
            assert!(
                !s.contains(&boot_clock),
                "{view} shows the boot clock {boot_clock}"
            );
        }
        if let Some(ft) = i["fault"]["t_s"].as_f64() {
            assert_eq!(ft, t, "the fault's own time is the incident's");
        }
    }
}

/// A crafted file (issue 19): sizes that overflow any sum, and events
/// stamped far after the start on many devices.
#[test]
fn crafted_sizes_and_far_timestamps_neither_panic_nor_bomb_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("crafted.gdt");
    let (mut w, t0) = test_writer(&path);
    for d in 0..64u64 {
        for (kind, size) in [(kind::DMA_MAP, u64::MAX), (kind::DMA_MAP, u64::MAX)] {
            let e = Event {
                kind,
                ts_ns: t0 + ((1 << 24) - 1) * 100_000_000,
                addr: 0x1000 * (d + 1),
                size,
                dir: 1,
                ..Default::default()
            };
            w.push(&Record::Event(e), &format!("0000:{d:02x}:00.0"))
                .expect("push");
        }
    }
    for lost in [u64::MAX, u64::MAX] {
        w.loss(&Loss {
            ts_ns: t0 + 1,
            lost,
            total: u64::MAX,
        })
        .expect("loss");
    }
    w.finish(&End::default()).expect("finish");
    let mut r = replay(&path, &Window::default()).expect("replays");
    assert_eq!(r.losses_total(), u64::MAX);
    let devices = r.analysis.agg.snapshot(1.0, &[]);
    assert!(devices.iter().any(|d| d.bytes_mapped == u64::MAX));
    // The page renders too (its time labels add to the start).
    let page = html::page("crafted.gdt", &r, &devices);
    assert!(page.contains("</html>"));
}

/// Issue 13's Xid proof through a whole recording: every driver format of
/// faults/xid_formats_tests.rs under a log prefix (each prefix in turn),
/// and its nvidia:nvidia_dev_xid event fired in the driver's worker (pid
/// 181) with the message the driver hands the tracepoint (the caller's
/// text: no `pid=`/`name=`, no root-cause suffix), the two in either
/// order. Replayed, each Xid is one incident seen on both channels whose
/// process is the one its line names, reported; where the line names none,
/// the tracepoint's task, marked current-task. The JSON says the same.
#[test]
fn xid_formats_replayed_take_the_process_from_the_line_not_the_tracepoints_task() {
    use gpudirect_trace_common::{XidEvent, XID_MSG_LEN};

    use crate::{
        faults::xid::formats::{FORMS, PREFIXES},
        model::{incident::Category, Process},
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("xids.gdt");
    let (mut w, t0) = test_writer(&path);
    for (i, form) in FORMS.iter().enumerate() {
        let ts = t0 + (i as u64 + 1) * 3_000_000_000;
        let msg = form
            .reason
            .split(" caused by previous Xid")
            .next()
            .unwrap_or("");
        let mut xid = XidEvent {
            event: Event {
                kind: kind::NV_XID,
                ts_ns: ts,
                pid: 181,
                ..Default::default()
            },
            xid: form.xid,
            msg_truncated: 0,
            msg: [0; XID_MSG_LEN],
        };
        xid.msg[..msg.len()].copy_from_slice(msg.as_bytes());
        let line = format!("{}NVRM: {}", PREFIXES[i % PREFIXES.len()].text, form.body);
        let mut f = crate::faults::parse_line(&line).unwrap_or_else(|| panic!("{line}"));
        if i % 2 == 0 {
            w.push(&Record::Xid(xid), form.device).expect("xid");
            f.timestamp_ns = Some(ts + 3_000_000);
            w.log_fault(&f).expect("line");
        } else {
            f.timestamp_ns = Some(ts);
            w.log_fault(&f).expect("line");
            xid.event.ts_ns = ts + 3_000_000;
            w.push(&Record::Xid(xid), form.device).expect("xid");
        }
    }
    w.finish(&End {
        ts_ns: t0 + (FORMS.len() as u64 + 2) * 3_000_000_000,
        ..Default::default()
    })
    .expect("finish");
    let mut r = replay(&path, &Window::default()).expect("replay");
    let want = |p: Option<(u32, Option<&str>)>| match p {
        Some((pid, name)) => Process::reported(pid, name.map(str::to_owned)),
        None => Process::current_task(181),
    };
    let xids: Vec<_> = r
        .incidents()
        .filter(|i| i.category == Category::Xid)
        .collect();
    assert_eq!(xids.len(), FORMS.len(), "each Xid once");
    for (inc, form) in xids.iter().zip(FORMS) {
        assert_eq!(inc.process, Some(want(form.process)), "{}", form.body);
        assert_eq!(inc.device, form.device, "{}", form.body);
        let fault = inc.fault.as_ref().expect("fault");
        assert_eq!(fault.seen_in.len(), 2, "{}: both channels", form.body);
        assert_eq!(fault.reason, format!("Xid {}: {}", form.xid, form.reason));
    }
    let devices = r.analysis.agg.snapshot(1.0, &[]);
    let json = super::json("xids.gdt", &r, &devices);
    let incidents = json["incidents"].as_array().expect("incidents");
    assert_eq!(incidents.len(), FORMS.len());
    for (i, form) in incidents.iter().zip(FORMS) {
        let p = want(form.process);
        assert_eq!(i["process"]["pid"], p.pid, "{i}");
        let from = if form.process.is_some() {
            "reported"
        } else {
            "current-task"
        };
        assert_eq!(i["process"]["from"], from, "{i}");
    }
}
