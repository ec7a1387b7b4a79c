//! The flight recorder's families (`serve --snapshot-dir`): snapshots
//! written and triggers suppressed, by trigger; the ring's size and span.
//! Labels are fixed sets: `trigger` (the trigger names) and `reason`.

use super::Model;
use crate::flight::FlightStats;
use crate::metrics;

impl Model {
    pub fn add_flight(&mut self, f: &FlightStats) {
        for (trigger, &n) in &f.written {
            let l = vec![("trigger", trigger.clone())];
            self.add(&metrics::flight::SNAPSHOTS_WRITTEN_TOTAL, l, n);
        }
        for ((trigger, reason), &n) in &f.suppressed {
            let l = vec![("trigger", trigger.clone()), ("reason", reason.clone())];
            self.add(&metrics::flight::SNAPSHOT_TRIGGERS_SUPPRESSED_TOTAL, l, n);
        }
        self.add(
            &metrics::flight::SNAPSHOT_FAILURES_TOTAL,
            vec![],
            f.failures,
        );
        self.add(&metrics::flight::SNAPSHOTS_DELETED_TOTAL, vec![], f.deleted);
        self.add(&metrics::flight::FLIGHT_RING_BYTES, vec![], f.ring_bytes);
        // Whole seconds: the model's samples are integers.
        let held = f.ring_seconds as u64;
        self.add(&metrics::flight::FLIGHT_RING_HELD_SECONDS, vec![], held);
        self.add(
            &metrics::flight::FLIGHT_RING_DROPPED_EVENTS_TOTAL,
            vec![],
            f.ring_dropped_events,
        );
        if let Some(t) = f.last_snapshot_unix_ns {
            let s = t / 1_000_000_000;
            self.add(&metrics::flight::SNAPSHOT_LAST_TIMESTAMP_SECONDS, vec![], s);
        }
    }
}
