//! The flight recorder on the real programs: events injected with
//! BPF_PROG_TEST_RUN go through a session into the recorder's ring; an
//! injected iommu:io_page_fault fires the `fault` trigger; the snapshot is
//! an ordinary trace file holding the ring and the fault. And a recorder
//! killed while writing a snapshot leaves no file under a final name that
//! is not complete. With `--check --stacks`, a snapshot carries the frames
//! of every stack its records name.

use std::{path::Path, time::Duration};

use gpudirect_trace::{
    flight::{FlightOptions, Recorder, Trigger},
    report::{self, Window},
    session::Session,
};

use crate::{
    hostile::{bin, run_ok},
    inject::{known_kernel_object, load_unattached, run_program, stacks_session},
    record::{read_items, stacks_named_and_written},
    require_root,
};

fn snapshots(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .expect("ls")
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            n.starts_with("gdt-") && n.ends_with(".gdt")
        })
        .collect();
    v.sort();
    v
}

/// A recorder of `session` into `dir` whose ring keeps 8 KiB (a burst of
/// the tests' maps compresses to ~1 KiB: the first bursts are dropped by
/// the time of the fault), fired by a fault, closing at the next tick.
fn small_ring_recorder(session: &Session, dir: &Path) -> Recorder {
    Recorder::new(
        session,
        FlightOptions {
            dir: dir.to_owned(),
            max_age: None,
            max_bytes: Some(8 << 10),
            triggers: vec![Trigger::Fault],
            after: Duration::ZERO,
            max_snapshots: None,
            min_spacing: Duration::from_secs(10),
            retention: Default::default(),
        },
        &[],
    )
    .expect("recorder")
}

#[test]
fn a_fault_writes_a_snapshot_of_the_ring_before_it() {
    require_root();
    let tracer = load_unattached(8 << 20);
    let dev = known_kernel_object();
    let mut session = Session::from_tracer(tracer, true);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rec = small_ring_recorder(&session, dir.path());
    let run = |s: &Session, prog: &str, args: &[u64]| run_program(&s.tracer, prog, args);
    let pump = |s: &mut Session, rec: &mut Recorder| {
        s.pump(&mut |o| rec.observe(&o)).expect("pump");
    };
    for burst in 0..40u64 {
        for i in 0..500u64 {
            let a = (burst * 500 + i) << 12;
            run(&session, "dma_map", &[dev.addr, a, a, 4096, 2, 0]);
        }
        pump(&mut session, &mut rec);
        rec.tick(&mut session).expect("tick");
    }
    assert!(
        snapshots(dir.path()).is_empty(),
        "nothing is written before a trigger"
    );
    run(&session, "iommu_io_page_fault", &[dev.addr, 0x123000, 1]);
    pump(&mut session, &mut rec);
    // The fault fired; --after 0s: the next tick closes the snapshot.
    rec.tick(&mut session).expect("tick");
    let files = snapshots(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0]
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(name.ends_with("-fault.gdt"), "{name}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&files[0]).expect("meta").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let r = report::replay(&files[0], &Window::default()).expect("report reads a snapshot");
    assert!(r.stats.clean_end);
    let info = r.header.snapshot.clone().expect("snapshot info");
    assert_eq!(info.trigger.name, "fault");
    assert!(
        info.discarded_events > 0,
        "the 8 KiB ring dropped old bursts"
    );
    let events = r.analysis.agg.events;
    assert_eq!(
        events + info.discarded_events,
        40 * 500 + 1,
        "what the ring held plus what it dropped is what was injected"
    );
    let faults: Vec<_> = r.incidents().filter(|i| i.fault.is_some()).collect();
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].address, Some(0x123000));
    let lead = r.lead.as_ref().expect("what led to it");
    assert_eq!(lead.device, dev.name);
    assert!(
        lead.live_mappings > 0,
        "the device's live mappings at the fault"
    );
    let stats = rec.stats();
    assert_eq!(stats.written.get("fault"), Some(&1));
}

/// `--flight-recorder` with `--check --stacks`: a snapshot holds the frames
/// of every stack its records name, though the ring dropped the block that
/// first carried them (each flush writes the stacks of its own records; a
/// stack written once, as a recording does, would be gone with its block).
#[test]
fn a_snapshot_keeps_the_frames_of_every_stack_its_records_name() {
    require_root();
    let mut session = stacks_session(8 << 20);
    let dev = known_kernel_object().addr;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rec = small_ring_recorder(&session, dir.path());
    // Every second the same call path maps (one stack) and unmaps.
    for burst in 0..20u64 {
        for i in 0..200u64 {
            let a = (burst * 200 + i) << 12;
            run_program(&session.tracer, "dma_map", &[dev, a, a, 4096, 2, 0]);
            run_program(&session.tracer, "dma_unmap", &[dev, a, 4096, 2, 0]);
        }
        session.pump(&mut |o| rec.observe(&o)).expect("pump");
        rec.tick(&mut session).expect("tick");
    }
    run_program(&session.tracer, "iommu_io_page_fault", &[dev, 0x123000, 1]);
    session.pump(&mut |o| rec.observe(&o)).expect("pump");
    rec.tick(&mut session).expect("tick");
    let files = snapshots(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let (header, items, _) = read_items(&files[0]);
    let info = header.snapshot.expect("snapshot info");
    assert!(
        info.discarded_blocks > 0,
        "the 8 KiB ring dropped the first seconds' blocks"
    );
    let (named, written) = stacks_named_and_written(&items);
    assert!(!named.is_empty(), "the maps carry a stack id");
    let missing: Vec<_> = named.iter().filter(|id| !written.contains(id)).collect();
    assert!(
        missing.is_empty(),
        "stacks named without their frames: {missing:?} (written: {written:?})"
    );
}

/// SIGKILL at any moment of a snapshot's writing leaves no file under a
/// final name, or a complete one.
#[test]
fn a_recorder_killed_while_writing_a_snapshot_leaves_no_partial_file() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    // One run to completion: the snapshot it writes is whole.
    let at = dir.path().to_str().expect("utf-8 path");
    run_ok(&[
        "selftest",
        "snapshot-write",
        "--events",
        "200000",
        "--dir",
        at,
    ]);
    assert_eq!(snapshots(dir.path()).len(), 1);
    let mut killed_mid = 0;
    for delay_ms in [50u64, 150, 300, 500, 800, 1200, 1700, 2500] {
        let d = tempfile::tempdir().expect("tempdir");
        let mut child = bin()
            .args(["selftest", "snapshot-write", "--events", "3000000", "--dir"])
            .arg(d.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(Duration::from_millis(delay_ms));
        let finished = child.try_wait().expect("wait").is_some();
        let _ = child.kill();
        let _ = child.wait();
        let files = snapshots(d.path());
        if !finished && files.is_empty() {
            killed_mid += 1;
        }
        for f in files {
            let r = report::replay(&f, &Window::default()).expect("a final name reads");
            assert!(r.stats.clean_end, "{} is incomplete", f.display());
            assert_eq!(r.stats.truncated_at, None);
        }
    }
    assert!(
        killed_mid > 0,
        "no run was killed before its snapshot was done"
    );
}
