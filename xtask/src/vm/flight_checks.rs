//! Host-side checks of the flight-recorder scenarios.

use anyhow::{bail, ensure, Context, Result};

use super::{
    checks::{device, faults, find_fault, tagged},
    qemu::Device,
};

/// The values after `tag` on every line that has it.
fn all_tagged<'a>(lines: &'a [String], tag: &str) -> Vec<&'a str> {
    lines
        .iter()
        .filter_map(|l| l.trim().strip_prefix(tag))
        .map(str::trim)
        .collect()
}

/// `record --ring 5s --trigger fault --after 1s` around 12 s of NVMe reads
/// with a fault at ~8 s: one snapshot, ~5 s before the fault to ~1 s after,
/// with the NVMe's mappings and the fault.
pub fn flight_recorder(series: &str, lines: &[String]) -> Result<()> {
    let n: usize = all_tagged(lines, "SNAPSHOTS ")
        .last()
        .context("no SNAPSHOTS line")?
        .parse()?;
    ensure!(n == 1, "{n} snapshots written, want exactly one");
    let report = tagged(lines, "REPORT ")?;
    let snap = &report["header"]["snapshot"];
    ensure!(
        snap["trigger"]["name"] == "fault",
        "trigger {}",
        snap["trigger"]
    );
    let at = snap["trigger"]["at_ns"].as_u64().context("trigger time")?;
    let from = snap["ring_from_ns"].as_u64().context("ring_from_ns")?;
    let held = (at - from) as f64 / 1e9;
    // At least what was asked (issue 30: a loaded host's late flushes once
    // gave 3.94 s of a 5 s ring); the ring keeps whole blocks, one flush
    // apart (1 s, later under load): up to a few seconds more.
    ensure!(
        (5.0..=9.0).contains(&held),
        "the ring held {held:.2}s before the trigger, want at least 5 s (and under 9 s)"
    );
    let d = device(&report, Device::Nvme.bdf())?;
    let maps = d["maps"].as_u64().unwrap_or(0);
    ensure!(maps > 0, "no NVMe mappings in the snapshot: {d}");
    let fs = faults(&report);
    let f = find_fault(&fs, "0x123000")?;
    ensure!(f["source"] == "vtd", "fault {f}");
    let start = report["header"]["start_ts_ns"].as_u64().context("start")?;
    ensure!(
        start == from,
        "the snapshot's clock starts at its oldest data"
    );
    let first = tagged(lines, "FIRST ")?;
    let last = tagged(lines, "LAST ")?;
    let (t0, t1) = (
        first["t_s"].as_f64().context("first t_s")?,
        last["t_s"].as_f64().context("last t_s")?,
    );
    let trig = held;
    ensure!(
        t0 >= -1.0 && t0 <= trig,
        "the first event at {t0:.2}s is outside the ring's {trig:.2}s before the trigger"
    );
    ensure!(
        t1 >= trig && t1 <= trig + 3.0,
        "the last event at {t1:.2}s, the trigger at {trig:.2}s: want ~1 s after"
    );
    let dropped = snap["discarded_events"].as_u64().unwrap_or(0);
    ensure!(
        dropped > 0,
        "the ring dropped nothing: it held all 8 s before the fault?"
    );
    eprintln!(
        "xtask: {series}: one snapshot: {held:.2}s before the fault, events {t0:.2}s..{t1:.2}s, \
         {maps} NVMe maps, {dropped} older events dropped, the fault decoded"
    );
    Ok(())
}

/// `serve --snapshot-dir` with three faults in a second: one snapshot, two
/// suppressed triggers in the metrics.
pub fn flight_serve(series: &str, lines: &[String]) -> Result<()> {
    let files = all_tagged(lines, "FILE ");
    let snaps: Vec<_> = files
        .iter()
        .filter(|f| f.starts_with("gdt-") && f.ends_with(".gdt"))
        .collect();
    ensure!(snaps.len() == 1, "want one snapshot, found {files:?}");
    let metric = |name: &str| -> f64 {
        all_tagged(lines, "METRIC ")
            .iter()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum()
    };
    let written = metric("gpudirect_snapshots_written_total");
    let suppressed = metric("gpudirect_snapshot_triggers_suppressed_total");
    if written != 1.0 || suppressed != 2.0 {
        bail!("metrics: {written} written, {suppressed} suppressed; want 1 and 2");
    }
    let report = tagged(lines, "REPORT ")?;
    let n = faults(&report).len();
    ensure!(n >= 1, "the snapshot holds no fault");
    eprintln!(
        "xtask: {series}: serve: 1 snapshot ({}), 2 triggers suppressed, {n} fault(s) in it",
        snaps[0]
    );
    Ok(())
}
