//! The flight recorder's families (`serve --snapshot-dir`): snapshots
//! written and triggers suppressed, by trigger; the ring's size and span.
//! Labels are fixed sets: `trigger` (the trigger names) and `reason`.

use super::{Model, Type};
use crate::flight::FlightStats;

impl Model {
    pub fn add_flight(&mut self, f: &FlightStats) {
        use Type::{Counter, Gauge};
        for (trigger, &n) in &f.written {
            let l = vec![("trigger", trigger.clone())];
            self.add("gpudirect_snapshots_written", Counter, None, l, n);
        }
        for ((trigger, reason), &n) in &f.suppressed {
            let l = vec![("trigger", trigger.clone()), ("reason", reason.clone())];
            self.add(
                "gpudirect_snapshot_triggers_suppressed",
                Counter,
                None,
                l,
                n,
            );
        }
        self.add(
            "gpudirect_snapshot_failures",
            Counter,
            None,
            vec![],
            f.failures,
        );
        self.add(
            "gpudirect_snapshots_deleted",
            Counter,
            None,
            vec![],
            f.deleted,
        );
        self.add(
            "gpudirect_flight_ring_bytes",
            Gauge,
            None,
            vec![],
            f.ring_bytes,
        );
        // Whole seconds: the model's samples are integers.
        let held = f.ring_seconds as u64;
        self.add(
            "gpudirect_flight_ring_held_seconds",
            Gauge,
            None,
            vec![],
            held,
        );
        self.add(
            "gpudirect_flight_ring_dropped_events",
            Counter,
            None,
            vec![],
            f.ring_dropped_events,
        );
        if let Some(t) = f.last_snapshot_unix_ns {
            let s = t / 1_000_000_000;
            self.add(
                "gpudirect_snapshot_last_timestamp_seconds",
                Gauge,
                None,
                vec![],
                s,
            );
        }
    }
}
