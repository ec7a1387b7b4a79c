//! One PCIe link's state over time: speed and width now against their
//! maximum, time spent below it, retrains, link down and up, and what a
//! hotplug slot said. Fed by `kind::PCIE_LINK` and `kind::PCI_HOTPLUG`
//! records, whichever source made them (the kernel's tracepoints on 7.x,
//! sysfs and uevents elsewhere): the same rules for both.

use gpudirect_trace_common::{flags, pcie, Event};
use serde::Serialize;

use crate::output::tail_if_any;

pub use crate::model::pci::LinkChange;

/// `enum pci_bus_speed` to GT/s (0.0: not a PCIe speed).
pub fn speed_gts(code: u8) -> f64 {
    match code {
        0x14 => 2.5,
        0x15 => 5.0,
        0x16 => 8.0,
        0x17 => 16.0,
        0x18 => 32.0,
        0x19 => 64.0,
        _ => 0.0,
    }
}

/// The PCIe generation of a speed code (Gen1 = 2.5 GT/s); 0 unknown.
pub fn generation(code: u8) -> u8 {
    if (pcie::SPEED_2_5GT..=pcie::SPEED_64GT).contains(&code) {
        code - pcie::SPEED_2_5GT + 1
    } else {
        0
    }
}

/// sysfs's `current_link_speed` / `max_link_speed` text ("16.0 GT/s PCIe",
/// "2.5 GT/s", "Unknown") to a speed code.
pub fn speed_code(text: &str) -> u8 {
    let gts = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<f64>().ok());
    match gts {
        Some(v) if (v - 2.5).abs() < 0.01 => 0x14,
        Some(v) if (v - 5.0).abs() < 0.01 => 0x15,
        Some(v) if (v - 8.0).abs() < 0.01 => 0x16,
        Some(v) if (v - 16.0).abs() < 0.01 => 0x17,
        Some(v) if (v - 32.0).abs() < 0.01 => 0x18,
        Some(v) if (v - 64.0).abs() < 0.01 => 0x19,
        _ => pcie::SPEED_UNKNOWN,
    }
}

/// `Gen5 x16` (or `2.5 GT/s x1` style where the generation is unknown).
pub fn label(speed: u8, width: u32) -> String {
    match generation(speed) {
        0 => format!("?GT/s x{width}"),
        g => format!("Gen{g} x{width}"),
    }
}

/// A link's state and history, for one device.
#[derive(Clone, Debug, Default)]
pub struct Link {
    /// Seen at all (a record of either kind arrived).
    known: bool,
    speed: u8,
    width: u32,
    max_speed: u8,
    max_width: u32,
    up: bool,
    /// Speed below its maximum is the device's own power management (GPUs
    /// lower the link speed when idle), not a downtrain, unless `busy`.
    power_managed: bool,
    /// The GPU was in its top performance state at the last NVML reading.
    busy: bool,
    downtrained_since: Option<u64>,
    downtrained_ns: u64,
    retrains: u64,
    downs: u64,
    ups: u64,
    removals: u64,
    additions: u64,
    slot_events: [u64; 4],
    /// Where the state came from last: the kernel's tracepoint or sysfs.
    source: &'static str,
    last_ts: u64,
}

/// Its part of the device's JSON (`pcie_link`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LinkSnapshot {
    /// `up`, `down`, or `removed`.
    pub state: &'static str,
    pub speed_gts: f64,
    pub width: u32,
    pub max_speed_gts: f64,
    pub max_width: u32,
    pub generation: u8,
    pub max_generation: u8,
    pub downtrained: bool,
    pub downtrained_s: f64,
    pub retrains: u64,
    pub link_down: u64,
    pub link_up: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub removals: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub additions: u64,
    /// Slot events from pci:pci_hp_event: link_up, link_down,
    /// card_present, card_not_present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot_events: Option<std::collections::BTreeMap<&'static str, u64>>,
    /// A speed below the maximum that is the device's power management.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub power_managed_speed: bool,
    /// `pcie_link_event` (the kernel) or `sysfs`.
    pub source: &'static str,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

const SLOT_NAMES: [&str; 4] = ["link_up", "link_down", "card_present", "card_not_present"];

impl Link {
    pub fn set_power_managed(&mut self, yes: bool) {
        self.power_managed = yes;
    }

    /// NVML's performance state of the GPU at `ts` (P0: busy).
    pub fn set_busy(&mut self, busy: bool, ts: u64) -> Option<LinkChange> {
        if self.busy == busy {
            return None;
        }
        self.busy = busy;
        self.reconsider(ts)
    }

    fn label(&self) -> String {
        label(self.speed, self.width)
    }

    fn max_label(&self) -> String {
        label(self.max_speed, self.max_width)
    }

    fn below_max(&self) -> bool {
        if !self.up {
            return false;
        }
        let narrow = self.max_width > 0 && self.width > 0 && self.width < self.max_width;
        let slow = self.max_speed != 0
            && generation(self.speed) != 0
            && generation(self.max_speed) != 0
            && self.speed < self.max_speed
            && (!self.power_managed || self.busy);
        narrow || slow
    }

    /// Starts or ends a downtrained interval as the state now says.
    fn reconsider(&mut self, ts: u64) -> Option<LinkChange> {
        match (self.below_max(), self.downtrained_since) {
            (true, None) => {
                self.downtrained_since = Some(ts);
                Some(LinkChange::Downtrained {
                    now: self.label(),
                    max: self.max_label(),
                })
            }
            (false, Some(since)) => {
                self.downtrained_ns += ts.saturating_sub(since);
                self.downtrained_since = None;
                self.up.then(|| LinkChange::Restored { now: self.label() })
            }
            _ => None,
        }
    }

    /// A `kind::PCIE_LINK` record; the change it made, if any.
    pub fn link_record(&mut self, ev: &Event) -> Option<LinkChange> {
        let ts = ev.ts_ns;
        self.last_ts = self.last_ts.max(ts);
        let speed = ev.addr as u8;
        let max_speed = (ev.addr >> 8) as u8;
        let width = ev.size as u32;
        let from_kernel = ev.flags & flags::FROM_USERSPACE == 0;
        self.source = if from_kernel {
            "pcie_link_event"
        } else {
            "sysfs"
        };
        // The maximum is the lower of both ends' capabilities: the kernel's
        // record has only the port's, the first sysfs reading both.
        if max_speed != 0 && generation(max_speed) != 0 {
            self.max_speed = match self.max_speed {
                0 => max_speed,
                m if generation(m) == 0 => max_speed,
                m => m.min(max_speed),
            };
        }
        if ev.phys != 0 {
            self.max_width = ev.phys as u32;
        }
        if ev.dir & pcie::LINK_POWER_MANAGED != 0 {
            self.power_managed = true;
        }
        let first = !self.known;
        self.known = true;
        let was_up = self.up;
        let before = self.label();
        let before_width = self.width;
        let up = width > 0;
        self.up = up;
        if up {
            self.speed = speed;
            self.width = width;
        }
        if first {
            // The state as the trace found it: no change, but a link found
            // below its maximum starts its downtrained time now.
            self.reconsider(ts);
            // A device found with no link (width 0) when the trace starts
            // is no news: integrated endpoints and virtual devices report
            // none (qemu's root-bus NVMe: "Unknown" x0). The kernel saying
            // so in a link event is.
            return if up {
                self.downtrained_since.map(|_| LinkChange::Downtrained {
                    now: self.label(),
                    max: self.max_label(),
                })
            } else if ev.aux == pcie::REASON_INITIAL {
                None
            } else {
                Some(LinkChange::Down {
                    reason: reason_text(ev.aux).into(),
                })
            };
        }
        match (was_up, up) {
            (true, false) => {
                self.downs += 1;
                if let Some(since) = self.downtrained_since.take() {
                    self.downtrained_ns += ts.saturating_sub(since);
                }
                Some(LinkChange::Down {
                    reason: reason_text(ev.aux).into(),
                })
            }
            (false, true) => {
                self.ups += 1;
                let change = LinkChange::Up {
                    now: self.label(),
                    max: self.max_label(),
                };
                // Came up narrow or slow: that is the news.
                Some(self.reconsider(ts).unwrap_or(change))
            }
            (false, false) => None,
            (true, true) => {
                // A GPU moving its speed with its load at full width is its
                // power management (the H200 idles at Gen1): no retrain, no
                // incident; below its maximum while busy is a downtrain.
                if self.power_managed && self.width == before_width {
                    return self.reconsider(ts);
                }
                let retrain = matches!(
                    ev.aux,
                    pcie::REASON_RETRAIN | pcie::REASON_BWCTRL_IRQ | pcie::REASON_POLLED
                );
                let changed = self.label() != before;
                if retrain && (changed || ev.aux == pcie::REASON_RETRAIN) {
                    self.retrains += 1;
                }
                if let Some(c) = self.reconsider(ts) {
                    return Some(c);
                }
                (retrain && changed).then(|| LinkChange::Retrained {
                    from: before,
                    now: self.label(),
                })
            }
        }
    }

    /// A `kind::PCI_HOTPLUG` record (a slot's event or a device's arrival
    /// or departure); the change it made, if any.
    pub fn hotplug_record(&mut self, ev: &Event) -> Option<LinkChange> {
        let ts = ev.ts_ns;
        self.last_ts = self.last_ts.max(ts);
        match ev.aux {
            pcie::HP_DEVICE_REMOVED => {
                self.removals += 1;
                if self.up {
                    self.up = false;
                    if let Some(since) = self.downtrained_since.take() {
                        self.downtrained_ns += ts.saturating_sub(since);
                    }
                }
                self.known = true;
                Some(LinkChange::Removed {
                    how: "the kernel removed it".into(),
                })
            }
            pcie::HP_DEVICE_ADDED => {
                self.additions += 1;
                Some(LinkChange::Added)
            }
            e @ (pcie::HP_LINK_UP..=pcie::HP_CARD_NOT_PRESENT) => {
                self.slot_events[e as usize] += 1;
                match e {
                    pcie::HP_LINK_DOWN if self.up || !self.known => {
                        self.known = true;
                        self.up = false;
                        self.downs += 1;
                        if let Some(since) = self.downtrained_since.take() {
                            self.downtrained_ns += ts.saturating_sub(since);
                        }
                        Some(LinkChange::Down {
                            reason: "hotplug slot: link down".into(),
                        })
                    }
                    pcie::HP_CARD_NOT_PRESENT => Some(LinkChange::Removed {
                        how: "hotplug slot: card not present".into(),
                    }),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    pub fn known(&self) -> bool {
        self.known
    }

    pub fn snapshot(&self, now: u64) -> Option<LinkSnapshot> {
        if !self.known {
            return None;
        }
        let open = self
            .downtrained_since
            .map_or(0, |s| now.max(self.last_ts).saturating_sub(s));
        let slot_events = (self.slot_events.iter().sum::<u64>() > 0).then(|| {
            SLOT_NAMES
                .iter()
                .zip(self.slot_events)
                .filter(|(_, n)| *n > 0)
                .map(|(k, n)| (*k, n))
                .collect()
        });
        Some(LinkSnapshot {
            state: if self.up {
                "up"
            } else if self.removals > self.additions {
                "removed"
            } else {
                "down"
            },
            speed_gts: speed_gts(self.speed),
            width: self.width,
            max_speed_gts: speed_gts(self.max_speed),
            max_width: self.max_width,
            generation: generation(self.speed),
            max_generation: generation(self.max_speed),
            downtrained: self.downtrained_since.is_some(),
            downtrained_s: (self.downtrained_ns + open) as f64 / 1e9,
            retrains: self.retrains,
            link_down: self.downs,
            link_up: self.ups,
            removals: self.removals,
            additions: self.additions,
            slot_events,
            power_managed_speed: self.up
                && self.power_managed
                && !self.busy
                && generation(self.speed) != 0
                && self.speed < self.max_speed,
            source: self.source,
        })
    }
}

/// The kernel's reason for a link update, in words.
pub fn reason_text(reason: u64) -> &'static str {
    match reason {
        pcie::REASON_RETRAIN => "retrain",
        pcie::REASON_ADD_BUS => "bus scan",
        pcie::REASON_BWCTRL_ENABLE => "bandwidth control enabled",
        pcie::REASON_BWCTRL_IRQ => "bandwidth notification",
        pcie::REASON_HOTPLUG => "hotplug",
        pcie::REASON_INITIAL => "state at start",
        pcie::REASON_POLLED => "sysfs reading",
        _ => "unknown reason",
    }
}

impl LinkSnapshot {
    /// `Gen5 x16 of Gen5 x16`, `down`, `Gen4 x8 of Gen5 x16 (downtrained 12.3 s)`.
    pub fn summary(&self) -> String {
        if self.state != "up" {
            return format!(
                "{} ({} down, {} up{})",
                self.state,
                self.link_down,
                self.link_up,
                tail_if_any(self.removals, |n| format!(", removed {n}x"))
            );
        }
        let g = |gen: u8, w: u32| match gen {
            0 => format!("?GT/s x{w}"),
            g => format!("Gen{g} x{w}"),
        };
        let mut s = format!(
            "{} of {}",
            g(self.generation, self.width),
            g(self.max_generation, self.max_width)
        );
        if self.downtrained {
            s.push_str(" DOWNTRAINED");
        } else if self.power_managed_speed {
            s.push_str(" (speed lowered by the device's power management)");
        }
        if self.downtrained_s > 0.0 {
            s.push_str(&format!(", below its maximum {:.1} s", self.downtrained_s));
        }
        if self.retrains > 0 || self.link_down > 0 {
            s.push_str(&format!(
                ", {} retrains, {} link down",
                self.retrains, self.link_down
            ));
        }
        s
    }
}

#[cfg(test)]
#[path = "link_tests.rs"]
mod tests;
