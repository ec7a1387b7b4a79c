//! The flight recorder metrics, declared once (docs/metrics.md's table is made
//! from them).

use super::{
    Metric,
    Type::{Counter, Gauge},
};

pub const SNAPSHOTS_WRITTEN_TOTAL: Metric = Metric {
    name: "gpudirect_snapshots_written",
    kind: Counter,
    unit: None,
    labels: &["trigger"],
    help: "Flight-recorder snapshots written, by the trigger that started them.",
    doc: "snapshots written, by the trigger that started them (fault, xid, aer, map-error, \
         signal, exit)",
};

pub const SNAPSHOT_TRIGGERS_SUPPRESSED_TOTAL: Metric = Metric {
    name: "gpudirect_snapshot_triggers_suppressed",
    kind: Counter,
    unit: None,
    labels: &["trigger", "reason"],
    help: "Triggers that started no snapshot: open (recorded in, and extending, the open one), \
         spacing (within --min-spacing), max-snapshots.",
    doc: "triggers that started no snapshot: `open` (recorded in, and extending, the open \
         one), `spacing` (within --min-spacing), `max-snapshots`",
};

pub const SNAPSHOT_FAILURES_TOTAL: Metric = Metric {
    name: "gpudirect_snapshot_failures",
    kind: Counter,
    unit: None,
    labels: &[],
    help: "Snapshots that could not be written (disk full, ...); the ring went on.",
    doc: "snapshots that could not be written (disk full, ...); the ring went on",
};

pub const SNAPSHOTS_DELETED_TOTAL: Metric = Metric {
    name: "gpudirect_snapshots_deleted",
    kind: Counter,
    unit: None,
    labels: &[],
    help: "Old snapshots deleted to keep the directory within --snapshot-max-bytes, --snapshot-max-count and --snapshot-max-age.",
    doc: "old snapshots deleted to stay within --snapshot-max-bytes, --snapshot-max-count and --snapshot-max-age",
};

pub const FLIGHT_RING_BYTES: Metric = Metric {
    name: "gpudirect_flight_ring_bytes",
    kind: Gauge,
    unit: None,
    labels: &[],
    help: "Bytes of trace the flight recorder's ring holds.",
    doc: "bytes of trace the ring holds",
};

pub const FLIGHT_RING_HELD_SECONDS: Metric = Metric {
    name: "gpudirect_flight_ring_held_seconds",
    kind: Gauge,
    unit: None,
    labels: &[],
    help: "Time span the flight recorder's ring holds (whole seconds).",
    doc: "time span the ring holds",
};

pub const FLIGHT_RING_DROPPED_EVENTS_TOTAL: Metric = Metric {
    name: "gpudirect_flight_ring_dropped_events",
    kind: Counter,
    unit: None,
    labels: &[],
    help: "Events the ring dropped to stay within its bounds (history older than a snapshot \
         holds).",
    doc: "events the ring dropped to stay within its bounds",
};

pub const SNAPSHOT_LAST_TIMESTAMP_SECONDS: Metric = Metric {
    name: "gpudirect_snapshot_last_timestamp_seconds",
    kind: Gauge,
    unit: None,
    labels: &[],
    help: "Unix time the last snapshot was completed.",
    doc: "Unix time the last snapshot was completed",
};

/// In the order docs/metrics.md lists them.
pub const ALL: &[&Metric] = &[
    &SNAPSHOTS_WRITTEN_TOTAL,
    &SNAPSHOT_TRIGGERS_SUPPRESSED_TOTAL,
    &SNAPSHOT_FAILURES_TOTAL,
    &SNAPSHOTS_DELETED_TOTAL,
    &FLIGHT_RING_BYTES,
    &FLIGHT_RING_HELD_SECONDS,
    &FLIGHT_RING_DROPPED_EVENTS_TOTAL,
    &SNAPSHOT_LAST_TIMESTAMP_SECONDS,
];
