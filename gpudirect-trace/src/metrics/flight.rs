//! The flight recorder metrics, declared once (docs/metrics.md's table is made
//! from them).

use super::Metric;

pub const SNAPSHOTS_WRITTEN_TOTAL: Metric = Metric::counter(
    "gpudirect_snapshots_written",
    &["trigger"],
    "Flight-recorder snapshots written, by the trigger that started them.",
    "snapshots written, by the trigger that started them (fault, xid, aer, map-error, \
     signal, exit)",
);

pub const SNAPSHOT_TRIGGERS_SUPPRESSED_TOTAL: Metric = Metric::counter(
    "gpudirect_snapshot_triggers_suppressed",
    &["trigger", "reason"],
    "Triggers that started no snapshot: open (recorded in, and extending, the open one), \
     spacing (within --min-spacing), max-snapshots.",
    "triggers that started no snapshot: `open` (recorded in, and extending, the open \
     one), `spacing` (within --min-spacing), `max-snapshots`",
);

pub const SNAPSHOT_FAILURES_TOTAL: Metric = Metric::counter(
    "gpudirect_snapshot_failures",
    &[],
    "Snapshots that could not be written (disk full, ...); the ring went on.",
    "snapshots that could not be written (disk full, ...); the ring went on",
);

pub const SNAPSHOTS_DELETED_TOTAL: Metric = Metric::counter(
    "gpudirect_snapshots_deleted",
    &[],
    "Old snapshots deleted to keep the directory within --snapshot-max-bytes, --snapshot-max-count and --snapshot-max-age.",
    "old snapshots deleted to stay within --snapshot-max-bytes, --snapshot-max-count and --snapshot-max-age",
);

pub const FLIGHT_RING_BYTES: Metric = Metric::gauge(
    "gpudirect_flight_ring_bytes",
    &[],
    "Bytes of trace the flight recorder's ring holds.",
    "bytes of trace the ring holds",
);

pub const FLIGHT_RING_HELD_SECONDS: Metric = Metric::gauge(
    "gpudirect_flight_ring_held_seconds",
    &[],
    "Time span the flight recorder's ring holds (whole seconds).",
    "time span the ring holds",
);

pub const FLIGHT_RING_DROPPED_EVENTS_TOTAL: Metric = Metric::counter(
    "gpudirect_flight_ring_dropped_events",
    &[],
    "Events the ring dropped to stay within its bounds (history older than a snapshot \
     holds).",
    "events the ring dropped to stay within its bounds",
);

pub const SNAPSHOT_LAST_TIMESTAMP_SECONDS: Metric = Metric::gauge(
    "gpudirect_snapshot_last_timestamp_seconds",
    &[],
    "Unix time the last snapshot was completed.",
    "Unix time the last snapshot was completed",
);

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
