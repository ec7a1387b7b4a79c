//! `report DIR` over a fleet's snapshots (issue 29): 100 files from 10
//! hosts, made from the real H200 recordings under other host names and
//! boot ids (the one part synthetic), one of them cut short.

use std::{fs, time::Duration};

use crate::{
    hostile::{assert_stderr_has, bin, run, stderr, succeeds},
    hostile_bounds::{peak_rss, spawn_quiet, RSS_BOUND_KIB},
};

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/gpu-host-h200-session3"
);

/// DIR/node-NN/gdt-...gdt: 10 hosts, 10 snapshots each, the real Xid 31
/// snapshot and the real recording in turn; node-07 s ninth cut.
fn fleet_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let snapshot = fs::read(format!("{FIXTURES}/flight-xid31.gdt")).expect("fixture");
    let recording = fs::read(format!("{FIXTURES}/h200.gdt")).expect("fixture");
    for host in 0..10 {
        let node = dir.path().join(format!("node-{host:02}"));
        fs::create_dir(&node).expect("mkdir");
        for n in 0..10 {
            let src = if n % 2 == 0 { &snapshot } else { &recording };
            let mut bytes = gpudirect_trace::tracefile::with_header(src, |h| {
                h.hostname = format!("node-{host:02}");
                h.boot_id = format!("boot-{host:02}-{}", n / 5);
                h.start_unix_ns += n * 3_600_000_000_000;
            })
            .expect("rewrite");
            if host == 7 && n == 8 {
                bytes.truncate(bytes.len() - 1500);
            }
            fs::write(
                node.join(format!("gdt-2026120{n}T000000Z-node-{host:02}.gdt")),
                bytes,
            )
            .expect("write");
        }
    }
    dir
}

#[test]
fn report_over_100_snapshots_of_10_hosts_names_each_host_and_the_damaged_one() {
    let dir = fleet_dir();
    let out = run(bin().arg("report").arg(dir.path()));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text.starts_with("Fleet: 100 files, 10 hosts (20 boots), 20 GPUs"),
        "{text}"
    );
    assert!(text.contains("1 damaged or unreadable"), "{text}");
    let cut = text
        .lines()
        .find(|l| l.contains("node-07/gdt-20261208T"))
        .expect("the cut file's row");
    assert!(
        cut.contains("damaged: ") && cut.contains("is cut short"),
        "{cut}"
    );
    assert!(
        text.contains("xid Xid 31: ") && text.contains("on 10 hosts"),
        "the shared Xid: {text}"
    );
    assert_eq!(
        text.matches("    first: ").count(),
        20,
        "a first cause per boot: {text}"
    );
    // JSON: every file a row, the damaged one with its warning.
    let out = succeeds(bin().arg("report").arg(dir.path()).arg("--json"));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(doc["files"].as_array().map(Vec::len), Some(100));
    assert_eq!(doc["damaged_files"], 1);
    assert_eq!(doc["hosts"].as_array().map(Vec::len), Some(20));
    // HTML beside it; the page is not one of the inputs.
    let page = dir.path().join("fleet.html");
    succeeds(bin().arg("report").arg(dir.path()).arg("--html").arg(&page));
    let html = fs::read_to_string(&page).expect("page");
    assert!(
        html.contains("id=\"file-100\""),
        "every file has its anchor"
    );
    // Options for one file's report are refused over many, in one line.
    let out = run(bin().arg("report").arg(dir.path()).args(["--from", "1s"]));
    assert_eq!(out.status.code(), Some(1));
    assert_stderr_has(&out, "--from, --to and --device are for one file");
}

#[test]
fn report_over_a_fleet_stays_within_the_readers_memory_bound() {
    let dir = fleet_dir();
    let child = spawn_quiet(bin().arg("report").arg(dir.path()).arg("--json"));
    let (kib, running) = peak_rss(child, Duration::from_secs(300));
    assert!(!running, "report over 100 files did not finish in 300 s");
    eprintln!("report over 100 snapshots: peak RSS {kib} KiB");
    assert!(kib < RSS_BOUND_KIB, "{kib} KiB");
}
