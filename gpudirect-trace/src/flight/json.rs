//! `record --ring --json`: the session's object (`summary`) with what the
//! flight recorder did under `flight`, typed like the rest of it. Kept
//! apart from the recorder (mod.rs): it only shapes the final line.

use std::{collections::BTreeMap, path::PathBuf};

use super::FlightStats;
use crate::summary::SessionJson;

/// `record --ring --json`: the session's object with the recorder's stats
/// under `flight`.
#[derive(serde::Serialize)]
pub(super) struct WithFlight<'a> {
    #[serde(flatten)]
    session: SessionJson<'a>,
    flight: FlightJson<'a>,
}

/// The recorder's stats as JSON (`record --ring --json`).
#[derive(serde::Serialize)]
struct FlightJson<'a> {
    written: &'a BTreeMap<String, u64>,
    suppressed: Vec<SuppressedJson<'a>>,
    failures: u64,
    deleted: u64,
    last_path: Option<&'a PathBuf>,
    ring_bytes: u64,
    ring_seconds: f64,
    ring_dropped_events: u64,
}

/// Triggers the recorder let pass without a snapshot, by why.
#[derive(serde::Serialize)]
struct SuppressedJson<'a> {
    trigger: &'a str,
    reason: &'a str,
    count: u64,
}

impl<'a> WithFlight<'a> {
    pub(super) fn new(session: SessionJson<'a>, f: &'a FlightStats) -> Self {
        WithFlight {
            session,
            flight: FlightJson::of(f),
        }
    }
}

impl<'a> FlightJson<'a> {
    fn of(f: &'a FlightStats) -> Self {
        FlightJson {
            written: &f.written,
            suppressed: f
                .suppressed
                .iter()
                .map(|((trigger, reason), &count)| SuppressedJson {
                    trigger,
                    reason,
                    count,
                })
                .collect(),
            failures: f.failures,
            deleted: f.deleted,
            last_path: f.last_path.as_ref(),
            ring_bytes: f.ring_bytes,
            ring_seconds: f.ring_seconds,
            ring_dropped_events: f.ring_dropped_events,
        }
    }
}
