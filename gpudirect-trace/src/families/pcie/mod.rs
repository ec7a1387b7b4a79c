//! The PCIe health family: what a device's link and slot report about
//! themselves, per device, over time.
//!
//! - AER errors (ras:aer_event): counts by severity and status bit, exact
//!   when the kernel log rate-limits its lines (`aer.rs`);
//! - the link (`link.rs`): speed and width now against their maximum, the
//!   time spent below it, retrains, link down and up, from
//!   pci:pcie_link_event where the kernel has it (7.x) and from sysfs
//!   (`sysfs.rs`: each link's state at the start, then read every
//!   `sysfs::POLL_INTERVAL`) where it has not;
//! - the slot and the device's presence: pci:pci_hp_event (7.x) and the
//!   kernel's add/remove uevents (every kernel);
//! - a port's link events go to the devices below it (`model::pci::Topology`,
//!   in the analysis).

pub mod aer;
pub mod link;
pub mod metrics;
pub mod sysfs;
pub mod timeline;

use gpudirect_trace_common::kind;
use serde::Serialize;

pub use self::aer::AerCounts;
use self::link::{Link, LinkChange, LinkSnapshot};
use super::DeviceFamily;
use crate::{
    catalog::{tp, ProbeSpec},
    decode::Record,
    metrics::Sink,
};

pub const TRACEPOINTS: &[ProbeSpec] = &[
    tp(
        "ras:aer_event",
        "ras_aer_event",
        5,
        "4.6+ with CONFIG_PCIEAER (5 arguments: the TLP header log since 4.6)",
        "`AER:` lines in the kernel log",
        false,
    ),
    tp(
        "pci:pcie_link_event",
        "pcie_link_event",
        4,
        "7.0+ (drivers/pci/trace.c): link speed/width updates",
        "sysfs current_link_speed/width read every 1 s (`link source: sysfs`)",
        false,
    ),
    tp(
        "pci:pci_hp_event",
        "pci_hp_event",
        3,
        "7.0+ with a PCIe hotplug slot (pciehp)",
        "kernel uevents: device added and removed",
        false,
    ),
];

pub const FAMILY: super::Family = super::Family {
    name: "pcie",
    tracepoints: TRACEPOINTS,
    hooks: &[],
    metrics: metrics::METRICS,
};

/// One device's PCIe health. Bounded: 4 severities times 32 bits of AER
/// counts, one link state.
#[derive(Default)]
pub struct Device {
    aer: AerCounts,
    link: Link,
    /// The change the last record made, for the ledger (`take_change`).
    change: Option<LinkChange>,
}

/// Its part of the device's JSON: each absent where nothing was seen, so
/// earlier documents are unchanged.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Snapshot {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcie_aer: Option<AerCounts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcie_link: Option<LinkSnapshot>,
}

impl DeviceFamily for Device {
    type Snapshot = Snapshot;

    fn ingest(&mut self, rec: &Record) -> bool {
        let ev = rec.event();
        match ev.kind {
            kind::AER => self.aer.record(ev),
            kind::PCIE_LINK => self.change = self.link.link_record(ev),
            kind::PCI_HOTPLUG => self.change = self.link.hotplug_record(ev),
            _ => return false,
        }
        true
    }

    fn take_change(&mut self) -> Option<LinkChange> {
        self.change.take()
    }

    fn log_fault(&mut self, f: &crate::model::Fault) {
        if f.source == crate::model::Source::Aer {
            self.aer.logged += f.count.max(1);
        }
    }

    fn gpu_busy(&mut self, busy: bool, ts: u64) -> Option<LinkChange> {
        self.link.set_busy(busy, ts)
    }

    fn snapshot(&self, now_ns: u64) -> Snapshot {
        Snapshot {
            pcie_aer: (self.aer.total() > 0).then(|| self.aer.clone()),
            pcie_link: self.link.snapshot(now_ns),
        }
    }

    fn metrics(&self, device: &str, now_ns: u64, sink: &mut dyn Sink) {
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
        for (sev, n) in self.aer.by_severity() {
            if n > 0 {
                let labels = vec![("device", device.to_owned()), ("severity", sev.to_owned())];
                sink.add(&metrics::AER_REPORTS_TOTAL, labels, n);
            }
        }
        if let Some(l) = self.link.snapshot(now_ns) {
            metrics::link(&l, device, sink);
        }
    }

    fn notes(s: &Snapshot, device: &str, out: &mut Vec<String>) {
        if let Some(l) = &s.pcie_link {
            if l.downtrained || l.state != "up" || l.retrains > 0 || l.link_down > 0 {
                out.push(format!("{device}: PCIe link {}", l.summary()));
            }
        }
        if let Some(a) = &s.pcie_aer {
            out.push(format!("{device}: PCIe AER {}", a.summary()));
        }
    }

    fn facts(s: &Snapshot, out: &mut Vec<(&'static str, String)>) {
        if let Some(l) = &s.pcie_link {
            out.push(("PCIe link", format!("{} (from {})", l.summary(), l.source)));
        }
        if let Some(a) = &s.pcie_aer {
            out.push(("PCIe AER errors", a.summary()));
            if let Some(h) = &a.last_tlp_header {
                out.push(("last AER TLP header", h.clone()));
            }
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
        assert_eq!(d.snapshot(0), Snapshot::default(), "no AER, no field");
        // RxErr | BadTLP corrected, RxErr again, a fatal completion timeout.
        assert!(d.ingest(&aer(0x41, 2)));
        assert!(d.ingest(&aer(0x1, 2)));
        assert!(d.ingest(&aer(1 << 14, 1)));
        assert!(d.ingest(&aer(0x1, 7)));
        let a = d.snapshot(0).pcie_aer.expect("counted");
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
        Device::notes(&d.snapshot(0), "0000:01:00.0", &mut notes);
        assert_eq!(
            notes,
            ["0000:01:00.0: PCIe AER 2 corrected (BadTLP 1, RxErr 2), 1 fatal (CmpltTO 1), 1 unknown"]
        );
        let json = serde_json::to_value(d.snapshot(0)).expect("JSON");
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
