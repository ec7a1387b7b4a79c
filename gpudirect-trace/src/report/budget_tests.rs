//! The readers' memory budget, keeper by keeper (issue 30): a file that
//! asks for more than the budget is read to its end, what each keeper
//! dropped is counted and said (stderr's warnings, the JSON, the text), and
//! what must stay exact stays exact. The budget is made small here so each
//! keeper hits it with a small file; the real binary under the real budget
//! is measured by the host test `hostile_budget`.
//!
//! `cargo test -p gpudirect-trace --lib report::budget_tests` (export:
//! `export::budget_tests`)

use std::{path::Path, sync::Arc};

use gpudirect_trace_common::{flags, kind, op, Event};

use super::{json, replay, text, Window};
use crate::{
    aggregate::ProcName,
    decode::Record,
    memory_budget,
    model::{misuse::CheckSetup, misuse::StackFrames, Fault, Source},
    tracefile::{tests::header, Checkpoint, CounterRow, End, Header, Loss, TraceWriter},
};

/// The budget every test here reads under.
const SMALL: usize = 2 << 20;

fn writer(path: &Path, h: &Header) -> TraceWriter<std::io::BufWriter<std::fs::File>> {
    let f = std::fs::File::create(path).expect("create");
    TraceWriter::new(std::io::BufWriter::new(f), h).expect("header")
}

fn map(k: u16, ts: u64, addr: u64, pid: u32, fl: u16) -> Record {
    Record::Event(Event {
        kind: k,
        ts_ns: ts,
        addr,
        phys: addr,
        size: 4096,
        pid,
        flags: fl,
        dir: 2,
        ..Default::default()
    })
}

/// Replays `path` under the small budget; the replay's JSON and text.
fn read_small(path: &Path) -> (super::Replay, serde_json::Value, String) {
    memory_budget::set_test_reader_limit(Some(SMALL));
    let mut r = replay(path, &Window::default()).expect("replay");
    memory_budget::set_test_reader_limit(None);
    let devices = r.analysis.agg.snapshot(1.0, &[]);
    let j = json("f.gdt", &r, &devices);
    let t = text("f.gdt", &r, &devices, 1.0);
    (r, j, t)
}

fn dropped(j: &serde_json::Value, keeper: &str) -> u64 {
    j["memory_budget"]["dropped"]
        .as_array()
        .expect("dropped")
        .iter()
        .find(|d| d["keeper"] == keeper)
        .and_then(|d| d["count"].as_u64())
        .unwrap_or(0)
}

/// `dma.<field>` summed over the report's devices.
fn dma_total(j: &serde_json::Value, field: &str) -> u64 {
    j["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| d["dma"][field].as_u64().unwrap_or(0))
        .sum()
}

/// The test header of a recording made with `--check` (and `--stacks`).
fn checked_header(stacks: bool) -> Header {
    Header {
        checks: Some(CheckSetup {
            kernel_image: Vec::new(),
            stacks,
        }),
        ..header()
    }
}

#[test]
fn never_unmapped_maps_over_devices_levels_and_pids_are_counted_past_the_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("maps.gdt");
    let h = checked_header(false);
    let mut w = writer(&f, &h);
    let (devices, per) = (16u64, 4000u64);
    for d in 0..devices {
        let dev = format!("0000:{d:02x}:00.0");
        for i in 0..per {
            let ts = h.start_ts_ns + i;
            let pid = 1 + i as u32;
            for (k, fl) in [
                (kind::DMA_MAP, 0),
                (kind::IOMMU_MAP, flags::VIA_DMA_API),
                (kind::DMA_ALLOC, flags::COHERENT),
            ] {
                w.push(&map(k, ts, 0x1000 + (i << 12), pid, fl), &dev)
                    .expect("push");
            }
        }
    }
    w.finish(&End::default()).expect("finish");
    let (r, j, t) = read_small(&f);
    for keeper in ["mappings", "processes", "handles"] {
        assert!(dropped(&j, keeper) > 0, "{keeper}: {}", j["memory_budget"]);
    }
    // Every map is still counted, and outstanding (tracked or not).
    assert_eq!(dma_total(&j, "maps"), devices * per);
    assert_eq!(dma_total(&j, "outstanding_mappings"), devices * per);
    let peak = j["memory_budget"]["peak_bytes"].as_u64().expect("peak");
    assert!(peak <= SMALL as u64 + (1 << 20), "{peak}");
    assert!(t.contains("note: the file asks a reader to keep more than its memory budget (2 MiB)"));
    assert!(j["warnings"].to_string().contains("mappings not tracked"));
    assert!(r.analysis.agg.devices.len() as u64 <= devices + 1);
}

#[test]
fn names_stacks_faults_triggers_and_losses_stay_within_and_say_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("text.gdt");
    let h = checked_header(true);
    let mut w = writer(&f, &h);
    let long = |tag: String| format!("{}{tag}", "x".repeat(3000));
    w.push(
        &map(kind::DMA_MAP, h.start_ts_ns, 0x1000, 1, 0),
        "0000:01:00.0",
    )
    .expect("push");
    let names: Vec<ProcName> = (0..2000)
        .map(|p| ProcName {
            pid: p,
            comm: Some(long(format!("c{p}"))),
            container: Some(long(format!("k{p}"))),
        })
        .collect();
    w.names(&names).expect("names");
    let stacks: Vec<StackFrames> = (0..200)
        .map(|id| StackFrames {
            id,
            frames: (0..16).map(|i| long(format!("{id}+{i}"))).collect(),
        })
        .collect();
    w.stacks(&stacks).expect("stacks");
    let faults: Vec<Fault> = (0..3000u64)
        .map(|i| {
            let mut f = Fault::new(Source::Vtd, long(format!("r{i}")), &long(format!("l{i}")));
            f.device = Some(format!("dev{i}"));
            f.address = Some(i << 12);
            f.timestamp_ns = Some(h.start_ts_ns + i);
            f
        })
        .collect();
    w.log_faults(&faults).expect("faults");
    let mut total = 0;
    for i in 0..70_000u64 {
        total += 3;
        w.loss(&Loss {
            ts_ns: h.start_ts_ns + i,
            lost: 3,
            total,
        })
        .expect("loss");
    }
    w.finish(&End::default()).expect("finish");
    let (r, j, _) = read_small(&f);
    for keeper in ["names", "stacks", "incidents", "rows", "losses"] {
        assert!(dropped(&j, keeper) > 0, "{keeper}: {}", j["memory_budget"]);
    }
    assert!(r.analysis.agg.names.len() < 2000);
    assert!(r.analysis.stacks.len() < 200);
    // Losses: fewer listed, every one counted.
    assert!(r.losses.len() < 70_000 && r.losses_unlisted > 0);
    assert_eq!(j["lost_events"], 210_000);
    // Incidents: the oldest evicted early, counted; the counts by cause
    // folded past their share, never lost.
    let kept = j["incidents"].as_array().expect("incidents").len() as u64;
    let evicted = j["incidents_evicted"].as_u64().expect("evicted");
    assert_eq!(kept + evicted, 3000);
    let counted: u64 = j["fault_counts"]
        .as_array()
        .expect("counts")
        .iter()
        .map(|c| c["count"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(counted, 3000);
    assert!(j["fault_counts"].to_string().contains("(other causes)"));
}

#[test]
fn the_page_s_series_and_checkpoint_rows_stay_within() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("series.gdt");
    let h = header();
    let mut w = writer(&f, &h);
    for d in 0..32u64 {
        let dev = format!("0000:{d:02x}:00.1");
        for b in 0..64u64 {
            for o in 0..u64::from(op::COUNT) {
                let e = Event {
                    kind: kind::LATENCY,
                    ts_ns: h.start_ts_ns + b * 10_000_000,
                    aux: o,
                    size: 100 + o,
                    ..Default::default()
                };
                w.push(&Record::Event(e), &dev).expect("push");
            }
        }
    }
    for c in 0..4u64 {
        w.checkpoint(&Checkpoint {
            ts_ns: h.start_ts_ns + c * 10_000_000,
            counters: (0..20_000u32)
                .map(|r| CounterRow {
                    device: Arc::from(format!("cp{r}")),
                    kind: u32::from(kind::DMA_MAP),
                    // A row each, whatever device it folds into.
                    dir: r,
                    count: c,
                    bytes: c,
                })
                .collect(),
            ..Default::default()
        })
        .expect("checkpoint");
    }
    w.finish(&End::default()).expect("finish");
    let (r, j, _) = read_small(&f);
    assert!(dropped(&j, "series") > 0, "{}", j["memory_budget"]);
    assert!(dropped(&j, "rows") > 0, "{}", j["memory_budget"]);
    // Checkpoint rows beyond the devices a report keeps are summed.
    let last = r.series.checkpoints.iter().rev().find_map(|c| c.0.as_ref());
    let devices = last.map_or(0, |c| c.counters.len());
    assert!(devices <= super::MAX_DEVICES + 1, "{devices}");
}
