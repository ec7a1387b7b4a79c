//! The flight recorder's options, shared by `record --ring` and
//! `serve --snapshot-dir`.

use std::{path::PathBuf, time::Duration};

use clap::Args;

use super::trace::parse_duration;
use crate::flight::{FlightOptions, Trigger, KNOWN_TRIGGERS};

#[derive(Args, Debug, Clone, Default)]
pub struct FlightArgs {
    // The flight recorder's settings need --ring: without it they would be
    // ignored in silence (issue 30), so clap refuses them.
    /// Keep the trace in a bounded in-memory ring instead of a file, and
    /// write a snapshot when a trigger fires: a duration (60s), a size
    /// (512MiB), or both (60s,512MiB): whichever bound is reached first.
    #[arg(long, value_name = "DURATION|SIZE", value_parser = parse_ring)]
    pub ring: Option<RingBound>,
    /// What writes a snapshot (repeatable): fault, xid[=N,N...],
    /// aer[=corrected|nonfatal|fatal|uncorrected], map-error,
    /// misuse[=CHECK,...] (a --check finding), link-down, downtrain,
    /// removed (a PCIe link down or below its maximum, a device gone),
    /// signal (SIGUSR1), exit (-- CMD exited non-zero). Default: fault, xid,
    /// aer=uncorrected, map-error, misuse, link-down, removed, signal, and
    /// exit when there is a CMD.
    #[arg(long = "trigger", value_name = "TRIGGER", value_parser = parse_trigger, requires = "ring")]
    pub triggers: Vec<Trigger>,
    /// Keep recording this long after a trigger before the snapshot is
    /// closed.
    #[arg(long, default_value = "10s", value_parser = parse_duration, requires = "ring")]
    pub after: Duration,
    /// Write at most this many snapshots (later triggers are counted as
    /// suppressed).
    #[arg(long, value_name = "N", requires = "ring")]
    pub max_snapshots: Option<u64>,
    /// No new snapshot within this long of the previous trigger that wrote
    /// one (triggers in between are recorded in an open snapshot, else
    /// counted as suppressed).
    #[arg(long, default_value = "10s", value_parser = parse_spacing, requires = "ring")]
    pub min_spacing: Duration,
}

/// The ring's bounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingBound {
    pub age: Option<Duration>,
    pub bytes: Option<u64>,
}

/// Smallest and largest ring sizes and ages that can work: below a MiB the
/// ring holds less than one block of a busy second; above a TiB or a week
/// it is no longer a flight recorder.
const MIN_RING_BYTES: u64 = 1 << 20;
const MAX_RING_BYTES: u64 = 1 << 40;
const MIN_RING_AGE: Duration = Duration::from_secs(1);
const MAX_RING_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 512MiB, 2GiB, 100MB)"))?;
    let mult: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "K" | "KiB" => 1024.0,
        "KB" => 1e3,
        "M" | "MiB" => 1024.0 * 1024.0,
        "MB" => 1e6,
        "G" | "GiB" => 1024.0 * 1024.0 * 1024.0,
        "GB" => 1e9,
        "T" | "TiB" => 1024.0f64.powi(4),
        "TB" => 1e12,
        other => {
            return Err(format!(
                "unknown size unit {other:?} (use B, KiB, MiB, GiB, TiB or KB, MB, GB, TB)"
            ))
        }
    };
    let v = n * mult;
    if !v.is_finite() || v > u64::MAX as f64 {
        return Err(format!("{s:?} is too large"));
    }
    Ok(v as u64)
}

fn parse_ring(s: &str) -> Result<RingBound, String> {
    let mut b = RingBound::default();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part.ends_with('B') || part.chars().all(|c| c.is_ascii_digit()) {
            let n = parse_size(part)?;
            if !(MIN_RING_BYTES..=MAX_RING_BYTES).contains(&n) {
                return Err(format!("a ring of {part} cannot work: give 1MiB to 1TiB"));
            }
            b.bytes = Some(n);
        } else {
            let d = humantime::parse_duration(part).map_err(|e| {
                format!("{part:?}: {e} (a duration such as 60s, or a size such as 512MiB)")
            })?;
            if !(MIN_RING_AGE..=MAX_RING_AGE).contains(&d) {
                return Err(format!("a ring of {part} cannot work: give 1s to 7days"));
            }
            b.age = Some(d);
        }
    }
    if b.age.is_none() && b.bytes.is_none() {
        return Err("give a duration (60s), a size (512MiB), or both (60s,512MiB)".into());
    }
    Ok(b)
}

fn parse_trigger(s: &str) -> Result<Trigger, String> {
    s.parse().map_err(|e: String| {
        if e.contains("known:") {
            e
        } else {
            format!("{e} (known: {KNOWN_TRIGGERS})")
        }
    })
}

fn parse_spacing(s: &str) -> Result<Duration, String> {
    super::trace::parse_offset(s)
}

impl FlightArgs {
    /// The recorder's options for snapshots in `dir` (None without --ring).
    pub fn options(
        &self,
        dir: PathBuf,
        has_command: bool,
        retention: crate::flight::snapshot::Retention,
    ) -> Option<FlightOptions> {
        let ring = self.ring?;
        let triggers = if self.triggers.is_empty() {
            let mut t = vec![
                Trigger::Fault,
                Trigger::Xid(Vec::new()),
                Trigger::Aer(Some(crate::flight::trigger::AerSeverity::Uncorrected)),
                Trigger::MapError,
                // Fires only where --check finds something.
                Trigger::Misuse(Vec::new()),
                // A link lost or a device gone: what led up to it is the
                // point of a flight recorder (a downtrain is left to ask for).
                Trigger::Link("link-down"),
                Trigger::Link("removed"),
                Trigger::Signal,
            ];
            if has_command {
                t.push(Trigger::Exit);
            }
            t
        } else {
            self.triggers.clone()
        };
        Some(FlightOptions {
            dir,
            max_age: ring.age,
            max_bytes: ring.bytes,
            triggers,
            after: self.after,
            max_snapshots: self.max_snapshots,
            min_spacing: self.min_spacing,
            retention,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_bounds_parse_and_refuse_what_cannot_work() {
        assert_eq!(
            parse_ring("60s,512MiB"),
            Ok(RingBound {
                age: Some(Duration::from_secs(60)),
                bytes: Some(512 << 20)
            })
        );
        assert_eq!(parse_ring("512MiB").map(|b| b.bytes), Ok(Some(512 << 20)));
        assert_eq!(
            parse_ring("2m").map(|b| b.age),
            Ok(Some(Duration::from_secs(120)))
        );
        for bad in ["", "0s", "100B", "10days", "2TiB", "sixty", "5XB"] {
            assert!(parse_ring(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
    }
}
