//! The swiotlb family: bounce buffering (swiotlb:swiotlb_bounced, and the
//! time in swiotlb_tbl_map_single), "bounce buffering halves my
//! bandwidth": per device, the transfers and bytes the CPU copied.

pub mod metrics;

use gpudirect_trace_common::{kind, Counter, CounterKey};
use serde::Serialize;

use super::DeviceFamily;
use crate::{
    catalog::{tp, ProbeSpec, TimingSpec},
    decode::Record,
    metrics::Sink,
};

pub const TRACEPOINTS: &[ProbeSpec] = &[tp(
    "swiotlb:swiotlb_bounced",
    "swiotlb_bounced",
    3,
    "3.x+ (4 args before 5.18, 3 after)",
    "",
    true,
)];

pub const TIMING: &[TimingSpec] = &[TimingSpec {
    name: "time:swiotlb_map",
    slot: "swiotlb",
    candidates: &["swiotlb_tbl_map_single"],
    available: "all",
    ..TimingSpec::BASE
}];

pub const FAMILY: super::Family = super::Family {
    name: "swiotlb",
    tracepoints: TRACEPOINTS,
    hooks: &[TIMING],
    metrics: metrics::METRICS,
};

/// One device's bounces.
#[derive(Default)]
pub struct Device {
    bounces: u64,
    bytes: u64,
}

/// Its part of the device's JSON (the names are the JSON's since 0.1).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Snapshot {
    pub swiotlb_bounces: u64,
    pub swiotlb_bounced_bytes: u64,
}

impl DeviceFamily for Device {
    type Snapshot = Snapshot;

    fn ingest(&mut self, rec: &Record) -> bool {
        let ev = rec.event();
        if ev.kind != kind::SWIOTLB_BOUNCED {
            return false;
        }
        self.bounces += 1;
        self.bytes = self.bytes.saturating_add(ev.size);
        true
    }

    fn counter(&mut self, key: &CounterKey, c: &Counter) {
        if key.event_kind() == kind::SWIOTLB_BOUNCED {
            self.bounces = c.count;
            self.bytes = c.bytes;
        }
    }

    fn snapshot(&self, _now_ns: u64) -> Snapshot {
        Snapshot {
            swiotlb_bounces: self.bounces,
            swiotlb_bounced_bytes: self.bytes,
        }
    }

    fn metrics(&self, device: &str, _now_ns: u64, sink: &mut dyn Sink) {
        if self.bounces > 0 {
            let l = || vec![("device", device.to_owned())];
            sink.add(&metrics::SWIOTLB_BOUNCES_TOTAL, l(), self.bounces);
            sink.add(&metrics::SWIOTLB_BOUNCED_BYTES_TOTAL, l(), self.bytes);
        }
    }
}
