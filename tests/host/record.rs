//! Trace files: records produced by the real programs (BPF_PROG_TEST_RUN)
//! through the writer and reader, and the `record`/`report` commands as
//! processes (attached for real, including a recorder killed with SIGKILL).

use std::{
    collections::BTreeSet, os::unix::fs::PermissionsExt as _, path::Path, process::Stdio,
    sync::Arc, time::Duration,
};

use gpudirect_trace::{
    aggregate::Aggregator,
    decode::{decode, Record},
    ebpf::testrun::run_raw_tracepoint,
    families::tracepoints,
    record,
    session::{Ending, Observed, Session, Sink as _, StopReason},
    tracefile::{self, End, Item, TraceReader, TraceWriter},
};
use gpudirect_trace_common::kind;

use crate::{
    bench_reader::record_sink,
    hostile::{bin, run_ok},
    inject::{known_kernel_object, load_unattached, run_program, stacks_session, Injector},
    require_root,
};

pub(crate) fn read_items(path: &Path) -> (tracefile::Header, Vec<Item>, tracefile::ReadStats) {
    let mut r = tracefile::open(path).expect("readable trace");
    let mut items = Vec::new();
    while let Some(i) = r.next_item().expect("read") {
        items.push(i);
    }
    (r.header().clone(), items, r.stats().clone())
}

#[test]
fn records_from_the_real_programs_round_trip_through_a_trace_file() {
    let mut inj = Injector::as_root();
    let dev = inj.device.addr;
    for i in 0..20u64 {
        let (phys, iova) = (0x1_0000_0000 + i * 0x1000, 0xfeed_0000 + i * 0x1000);
        inj.run("dma_map", &[dev, phys, iova, 4096 << (i % 4), 2, 0]);
    }
    for i in 0..10u64 {
        inj.run("dma_unmap", &[dev, 0xfeed_0000 + i * 0x1000, 4096, 2, 0]);
    }
    inj.run("iommu_io_page_fault", &[dev, 0x123000, 1]);
    inj.run("iommu_map", &[0xffff_f000, 0x3_0000_0000, 8192]);
    let mut records: Vec<Record> = Vec::new();
    inj.tracer
        .drain(|b| records.push(decode(b).expect("decodable")));
    assert_eq!(records.len(), 32);
    let names: Vec<Arc<str>> = records
        .iter()
        .map(|r| inj.tracer.device_name(r.event().dev))
        .collect();

    let header = tracefile::host_header(&inj.tracer.kernel.release, &inj.tracer.probes, false, &[]);
    let mut w = TraceWriter::new(Vec::new(), &header).expect("header");
    for (r, n) in records.iter().zip(&names) {
        w.push(r, n).expect("push");
    }
    let bytes = w.finish(&End::default()).expect("finish");

    let mut rd = TraceReader::new(&bytes[..]).expect("readable");
    assert_eq!(
        rd.header(),
        &header,
        "the probe table and inventory round-trip"
    );
    assert!(header.probes.len() >= tracepoints().len());
    assert_eq!(rd.header().clock, "CLOCK_MONOTONIC");
    let mut got = Vec::new();
    while let Some(item) = rd.next_item().expect("read") {
        if let Item::Event { record, device } = item {
            got.push((record, device));
        }
    }
    assert_eq!(got.len(), records.len());
    let (mut before, mut after) = (Aggregator::new(), Aggregator::new());
    for ((orig, name), (back, device)) in records.iter().zip(&names).zip(&got) {
        let (a, b) = (orig.event(), back.event());
        assert_eq!(
            (a.kind, a.ts_ns, a.addr, a.phys, a.size, a.dir, a.aux, a.pid, a.tid),
            (b.kind, b.ts_ns, b.addr, b.phys, b.size, b.dir, b.aux, b.pid, b.tid)
        );
        assert_eq!(name, device);
        before.ingest(orig, name);
        after.ingest(back, device);
    }
    assert!(names.iter().any(|n| **n == *inj.device.name));
    let (s1, s2) = (before.snapshot(1.0, &[]), after.snapshot(1.0, &[]));
    assert_eq!(
        serde_json::to_value(&s1).expect("json"),
        serde_json::to_value(&s2).expect("json"),
        "the same tables from the file as from the live stream"
    );
    assert!(rd.stats().clean_end);
}

#[test]
fn record_writes_a_private_readable_file_with_the_attached_probes() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("rec.gdt");
    let fs = f.to_str().expect("utf-8 path");
    run_ok(&["record", "-o", fs, "--duration", "2s"]);
    let mode = std::fs::metadata(&f).expect("file").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let (header, items, stats) = read_items(&f);
    assert!(stats.clean_end, "{stats:?}");
    assert!(!header.boot_id.is_empty() && !header.hostname.is_empty());
    let map = header
        .probes
        .iter()
        .find(|p| p.name == "iommu:map")
        .expect("iommu:map in the probe table");
    assert_eq!(map.status, "attached");
    assert!(
        items.iter().any(|i| matches!(i, Item::Checkpoint(_))),
        "per-second checkpoints"
    );
    let out = run_ok(&["report", fs, "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report --json");
    assert_eq!(doc["read"]["clean_end"], true);
    // The page of a real recording: private like the recording, with the
    // probe table of this host.
    let page = dir.path().join("rec.html");
    run_ok(&["report", fs, "--html", page.to_str().expect("utf-8 path")]);
    let mode = std::fs::metadata(&page).expect("page").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let html = std::fs::read_to_string(&page).expect("page");
    for want in [
        "<section id=\"summary\"",
        "<section id=\"losses\"",
        "<td>iommu:map</td>",
    ] {
        assert!(html.contains(want), "the page lacks {want}");
    }

    // A second recording to the same file is refused without --force.
    let out = bin()
        .args(["record", "-o", fs, "--duration", "1s"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
}

#[test]
fn record_of_a_command_exits_with_its_status() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("cmd.gdt");
    let out = bin()
        .args([
            "record",
            "-o",
            f.to_str().expect("path"),
            "--",
            "sh",
            "-c",
            "sleep 0.3; exit 3",
        ])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (header, items, _) = read_items(&f);
    assert_eq!(header.command, ["sh", "-c", "sleep 0.3; exit 3"]);
    let Some(Item::End(end)) = items.last() else {
        panic!("no end block");
    };
    assert_eq!(end.exit_status, Some(3));
}

#[test]
fn a_recorder_killed_with_sigkill_leaves_a_readable_file() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("killed.gdt");
    let fs = f.to_str().expect("utf-8 path");
    let mut child = bin()
        .args(["record", "-o", fs])
        .stderr(Stdio::null())
        .spawn()
        .expect("start record");
    // Killed once it is recording (the header is written after the probes
    // attach, which takes seconds on a loaded machine) and a checkpoint later.
    let started = std::time::Instant::now();
    while std::fs::metadata(&f).map_or(0, |m| m.len()) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the recorder never wrote its header"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
    let out = run_ok(&["report", fs]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("report of"), "{text}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("error"), "{err}");
    let (header, _, stats) = read_items(&f);
    assert!(!stats.clean_end);
    assert!(!header.probes.is_empty());
}

/// What the recorder does with a drain: every record into the file.
fn pump_into(session: &mut Session, w: &mut TraceWriter<Vec<u8>>) {
    session
        .pump(&mut |o| {
            if let Observed::Record { record, device } = o {
                w.push(record, device)?;
            }
            Ok(())
        })
        .expect("pump");
}

#[test]
fn ring_overflow_becomes_loss_records_and_checkpoints_in_the_file() {
    require_root();
    // A one-page ring buffer: most of each burst is dropped in-kernel.
    let inj = Injector::new(load_unattached(4096));
    let dev = inj.device.addr;
    let device_name = inj.device.name.clone();
    let burst = |inj: &Injector, base: u64| {
        for i in 0..500u64 {
            inj.run(
                "dma_map",
                &[dev, (base + i) << 12, (base + i) << 12, 4096, 0, 0],
            );
        }
    };
    burst(&inj, 0);
    let mut session = Session::from_tracer(inj.tracer, true);
    let header = tracefile::host_header("test", &session.tracer.probes, false, &[]);
    let mut w = TraceWriter::new(Vec::new(), &header).expect("header");
    let mut lost_seen = 0;
    pump_into(&mut session, &mut w);
    record::checkpoint(&mut session, &mut w, &mut lost_seen).expect("checkpoint");
    let first_loss = lost_seen;
    assert!(first_loss > 0, "a 4 KiB ring overflows with 500 events");
    // Drive the programs again through the session's own tracer.
    for i in 0..500u64 {
        let fd = session.tracer.program_fd("dma_map").expect("program");
        let a = (1000 + i) << 12;
        run_raw_tracepoint(fd, &[dev, a, a, 4096, 0, 0], None).expect("test run");
    }
    pump_into(&mut session, &mut w);
    record::checkpoint(&mut session, &mut w, &mut lost_seen).expect("checkpoint");
    let total_lost = session.tracer.self_stats().lost_events;
    assert_eq!(lost_seen, total_lost);
    let bytes = w.finish(&End::default()).expect("finish");

    let mut rd = TraceReader::new(&bytes[..]).expect("readable");
    let (mut events, mut losses, mut last_cp) = (0u64, Vec::new(), None);
    while let Some(item) = rd.next_item().expect("read") {
        match item {
            Item::Event { .. } => events += 1,
            Item::Loss(l) => losses.push(l),
            Item::Checkpoint(cp) => last_cp = Some(cp),
            _ => {}
        }
    }
    assert_eq!(losses.len(), 2, "{losses:?}");
    assert_eq!(losses[0].lost, first_loss);
    assert_eq!(losses[1].lost, total_lost - first_loss);
    assert_eq!(losses[1].total, total_lost);
    assert_eq!(events + total_lost, 1000, "written + lost = injected");
    let cp = last_cp.expect("checkpoint");
    let maps: u64 = cp
        .counters
        .iter()
        .filter(|c| *c.device == *device_name && c.kind == u32::from(kind::DMA_MAP))
        .map(|c| c.count)
        .sum();
    assert_eq!(
        maps, 1000,
        "the kernel counters in the checkpoint saw every event"
    );
}

/// `record --check --stacks`: each stack a DMA-API record names is in the
/// file with its frames, once, finding or not. (Only the findings' stacks
/// were written before: a recording of the GPU driver's real calls
/// exported stack ids that no `"kind":"stacks"` line named, session 21.)
#[test]
fn a_recording_keeps_the_frames_of_every_stack_its_records_name() {
    require_root();
    let mut session = stacks_session(1 << 20);
    let dev = known_kernel_object().addr;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("stacks.gdt");
    let mut sink = record_sink(&session, &path);
    // A map and its unmap (which takes no stack: its map is in the table),
    // in two seconds' blocks: the stack is named again after it was written.
    for round in 0..2u64 {
        let iova = 0xfff0_0000 + round * 0x1000;
        run_program(
            &session.tracer,
            "dma_map",
            &[dev, 0x10_0000, iova, 64, 1, 0],
        );
        run_program(&session.tracer, "dma_unmap", &[dev, iova, 64, 1, 0]);
        session.pump(&mut |o| sink.observe(o)).expect("pump");
        sink.tick(&mut session).expect("tick");
    }
    let end = Ending {
        reason: StopReason::Stopped,
        command_status: None,
    };
    sink.finish(&mut session, &end).expect("finish");

    let (header, items, _) = read_items(&path);
    assert!(header.checks.is_some_and(|c| c.stacks));
    let (named, written) = stacks_named_and_written(&items);
    assert!(!named.is_empty(), "the maps carry a stack id");
    assert_eq!(
        written,
        named.into_iter().collect::<Vec<_>>(),
        "each named stack written once"
    );
}

/// The stack ids a trace file's DMA-API records name, and the ids of its
/// stacks items in file order, each checked to hold the test run's frames
/// (the programs run through BPF_PROG_TEST_RUN).
pub(crate) fn stacks_named_and_written(items: &[Item]) -> (BTreeSet<u32>, Vec<u32>) {
    let mut named = BTreeSet::new();
    let mut written = Vec::new();
    for item in items {
        match item {
            Item::Event { record, .. } => {
                let e = record.event();
                if kind::info(e.kind).stack {
                    named.extend(gpudirect_trace_common::aux_stack(e.aux));
                }
            }
            Item::Stacks(list) => {
                for s in list {
                    assert!(
                        s.frames
                            .iter()
                            .any(|f| f.contains("bpf_prog_test_run") || f.contains("__sys_bpf")),
                        "stack {} symbolized: {:#?}",
                        s.id,
                        s.frames
                    );
                    written.push(s.id);
                }
            }
            _ => {}
        }
    }
    (named, written)
}
