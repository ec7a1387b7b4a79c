//! The PCIe health family: what a device's link reports about itself.
//!
//! Today: AER errors per device, by severity and by status bit, from
//! ras:aer_event (the faults family attaches it and makes each report an
//! incident; this family counts them per device). The tracepoint fires once
//! per error the AER driver handles, before aer_print_error() and its
//! ratelimit, so these counts stay exact when the kernel log says "N
//! callbacks suppressed". A status register with several bits set counts
//! once per bit and once in its severity.
//!
//! Coming here next (issue 27): pci:pcie_link_event and pci:pci_hp_event
//! where the kernel has them, the sysfs link state where it has not, and
//! one timeline per device.

pub mod metrics;

use std::collections::BTreeMap;

use gpudirect_trace_common::kind;
use serde::Serialize;

use super::DeviceFamily;
use crate::{decode::Record, faults::aer, metrics::Sink};

pub const FAMILY: super::Family = super::Family {
    name: "pcie",
    tracepoints: &[],
    hooks: &[],
    metrics: metrics::METRICS,
};

/// One device's AER counts: its snapshot's, kept as they are shown.
/// Bounded: 3 severities times 32 bits (a report of an unknown severity
/// is counted, its bits are not named).
#[derive(Default)]
pub struct Device {
    aer: AerCounts,
}

/// Its part of the device's JSON: absent for a device with no AER error.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Snapshot {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcie_aer: Option<AerCounts>,
}

/// A device's AER errors.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AerCounts {
    pub corrected: u64,
    pub nonfatal: u64,
    pub fatal: u64,
    /// Reports whose severity the tool does not know (a newer kernel).
    #[serde(skip_serializing_if = "is_zero")]
    pub unknown: u64,
    /// `"<severity>:<bit>"` -> reports with that bit set, e.g.
    /// `"corrected:RxErr"`.
    pub errors: BTreeMap<String, u64>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl AerCounts {
    /// The count of reports of severity `label` (`aer::severity_label`;
    /// None: unknown).
    fn reports(&mut self, label: Option<&str>) -> &mut u64 {
        match label {
            Some("corrected") => &mut self.corrected,
            Some("nonfatal") => &mut self.nonfatal,
            Some("fatal") => &mut self.fatal,
            _ => &mut self.unknown,
        }
    }

    fn total(&self) -> u64 {
        self.corrected + self.nonfatal + self.fatal + self.unknown
    }

    /// `3 corrected (RxErr 2, BadTLP 1), 1 fatal (CmpltTO 1)`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for (sev, n) in [
            ("corrected", self.corrected),
            ("nonfatal", self.nonfatal),
            ("fatal", self.fatal),
            ("unknown", self.unknown),
        ] {
            if n == 0 {
                continue;
            }
            let prefix = format!("{sev}:");
            let bits: Vec<String> = self
                .errors
                .iter()
                .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|b| format!("{b} {v}")))
                .collect();
            if bits.is_empty() {
                parts.push(format!("{n} {sev}"));
            } else {
                parts.push(format!("{n} {sev} ({})", bits.join(", ")));
            }
        }
        parts.join(", ")
    }
}

impl DeviceFamily for Device {
    type Snapshot = Snapshot;

    fn ingest(&mut self, rec: &Record) -> bool {
        let ev = rec.event();
        if ev.kind != kind::AER {
            return false;
        }
        let sev = aer::severity_label(ev.aux);
        *self.aer.reports(sev) += 1;
        if let Some(sev) = sev {
            for bit in aer::decode_status(ev.addr as u32, ev.aux == aer::CORRECTED) {
                *self.aer.errors.entry(format!("{sev}:{bit}")).or_default() += 1;
            }
        }
        true
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot {
            pcie_aer: (self.aer.total() > 0).then(|| self.aer.clone()),
        }
    }

    fn metrics(&self, device: &str, sink: &mut dyn Sink) {
        for (key, v) in &self.aer.errors {
            let Some((sev, bit)) = key.split_once(':') else {
                continue;
            };
            let labels = vec![
                ("device", device.to_owned()),
                ("severity", sev.to_owned()),
                ("error", bit.to_owned()),
            ];
            sink.add(&metrics::AER_STATUS_BITS_TOTAL, labels, *v);
        }
    }

    fn notes(s: &Snapshot, device: &str, out: &mut Vec<String>) {
        if let Some(a) = &s.pcie_aer {
            out.push(format!("{device}: PCIe AER {}", a.summary()));
        }
    }

    fn facts(s: &Snapshot, out: &mut Vec<(&'static str, String)>) {
        if let Some(a) = &s.pcie_aer {
            out.push(("PCIe AER errors", a.summary()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpudirect_trace_common::Event;

    fn aer(status: u32, severity: u64) -> Record {
        Record::Event(Event {
            kind: kind::AER,
            addr: u64::from(status),
            aux: severity,
            ..Event::default()
        })
    }

    #[test]
    fn counts_by_severity_and_bit() {
        let mut d = Device::default();
        assert_eq!(d.snapshot(), Snapshot::default(), "no AER, no field");
        // RxErr | BadTLP corrected, RxErr again, a fatal completion timeout.
        assert!(d.ingest(&aer(0x41, 2)));
        assert!(d.ingest(&aer(0x1, 2)));
        assert!(d.ingest(&aer(1 << 14, 1)));
        assert!(d.ingest(&aer(0x1, 7)));
        let a = d.snapshot().pcie_aer.expect("counted");
        assert_eq!((a.corrected, a.nonfatal, a.fatal, a.unknown), (2, 0, 1, 1));
        assert_eq!(a.errors["corrected:RxErr"], 2);
        assert_eq!(a.errors["corrected:BadTLP"], 1);
        assert_eq!(a.errors["fatal:CmpltTO"], 1);
        assert_eq!(
            a.errors.len(),
            3,
            "an unknown severity's bits are not named"
        );
        assert_eq!(
            a.summary(),
            "2 corrected (BadTLP 1, RxErr 2), 1 fatal (CmpltTO 1), 1 unknown"
        );
        let mut notes = Vec::new();
        Device::notes(&d.snapshot(), "0000:01:00.0", &mut notes);
        assert_eq!(
            notes,
            ["0000:01:00.0: PCIe AER 2 corrected (BadTLP 1, RxErr 2), 1 fatal (CmpltTO 1), 1 unknown"]
        );
        let json = serde_json::to_value(d.snapshot()).expect("JSON");
        assert_eq!(json["pcie_aer"]["errors"]["fatal:CmpltTO"], 1);
    }

    #[test]
    fn other_kinds_are_left_to_their_families() {
        let mut d = Device::default();
        let ev = Event {
            kind: kind::SWIOTLB_BOUNCED,
            ..Event::default()
        };
        assert!(!d.ingest(&Record::Event(ev)));
    }
}
