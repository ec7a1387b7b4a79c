//! PCI device ids as the kernel and drivers print them, drivers binding to
//! and letting go of devices, and what changed on a device's PCIe link.

use serde::{Deserialize, Serialize};

/// A driver bound to a PCI device (`driver` is its name) or let it go
/// (None), as its uevent said; recorded in trace files (DRIVERS blocks).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverChange {
    /// CLOCK_MONOTONIC when the uevent arrived.
    pub ts_ns: u64,
    pub device: String,
    pub driver: Option<String>,
}

/// What a link record changed, for the ledger: the transitions a reader
/// looks at one by one. Keeping a state is not a change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "kebab-case")]
pub enum LinkChange {
    /// The link went down (width 0, or the slot said so).
    Down { reason: String },
    /// It came back up, at this speed and width.
    Up { now: String, max: String },
    /// Trained below its maximum (width, or speed where speed counts).
    Downtrained { now: String, max: String },
    /// Back at its maximum.
    Restored { now: String },
    /// Retrained, or its speed or width changed, staying up.
    Retrained { from: String, now: String },
    /// The device left the bus (kernel uevent), or a slot lost its card.
    Removed { how: String },
    /// The device appeared (hot-add, rescan).
    Added,
}

impl LinkChange {
    /// The trigger and metric name of the change.
    pub fn name(&self) -> &'static str {
        match self {
            LinkChange::Down { .. } => "link-down",
            LinkChange::Up { .. } => "link-up",
            LinkChange::Downtrained { .. } => "downtrain",
            LinkChange::Restored { .. } => "restored",
            LinkChange::Retrained { .. } => "retrain",
            LinkChange::Removed { .. } => "removed",
            LinkChange::Added => "added",
        }
    }
}

impl std::fmt::Display for LinkChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkChange::Down { reason } => write!(f, "PCIe link down ({reason})"),
            LinkChange::Up { now, max } => write!(f, "PCIe link up at {now} (max {max})"),
            LinkChange::Downtrained { now, max } => {
                write!(f, "PCIe link downtrained: {now} of {max}")
            }
            LinkChange::Restored { now } => write!(f, "PCIe link back at its maximum, {now}"),
            LinkChange::Retrained { from, now } => {
                write!(f, "PCIe link retrained: {from} -> {now}")
            }
            LinkChange::Removed { how } => write!(f, "device removed ({how})"),
            LinkChange::Added => f.write_str("device added"),
        }
    }
}

/// A PCI device added to or removed from the bus, as its kernel uevent
/// said (hot-add, hot-unplug, surprise removal, `remove` in sysfs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Presence {
    /// CLOCK_MONOTONIC when the uevent arrived.
    pub ts_ns: u64,
    pub device: String,
    /// The port it hangs off (from its DEVPATH), if any.
    pub upstream: Option<String>,
    pub added: bool,
}

/// What a PCI uevent says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PciUevent {
    Driver(DriverChange),
    Presence(Presence),
}

/// Which PCIe port each device hangs off (its parent bridge in sysfs): the
/// kernel names a link by the port above it (pci:pcie_link_event's
/// `bus->self`, pci:pci_hp_event's port), a user by the device below it.
/// Built from the trace's device inventory and the devices added since;
/// bounded (`TOPOLOGY_CAP` devices, the rest counted in `dropped`).
#[derive(Clone, Debug, Default)]
pub struct Topology {
    upstream: std::collections::BTreeMap<String, String>,
    pub dropped: u64,
}

pub const TOPOLOGY_CAP: usize = 8192;

impl Topology {
    pub fn insert(&mut self, device: &str, port: &str) {
        if self.upstream.len() >= TOPOLOGY_CAP && !self.upstream.contains_key(device) {
            self.dropped += 1;
            return;
        }
        self.upstream.insert(device.to_owned(), port.to_owned());
    }

    /// The port above `device`, if it hangs off one.
    pub fn upstream(&self, device: &str) -> Option<&str> {
        self.upstream.get(device).map(String::as_str)
    }

    /// The devices directly below `port`.
    pub fn below(&self, port: &str) -> Vec<&str> {
        self.upstream
            .iter()
            .filter(|(_, p)| p.as_str() == port)
            .map(|(d, _)| d.as_str())
            .collect()
    }
}

/// The parent bridge of a device from its sysfs path
/// (`/sys/devices/pci0000:00/0000:00:02.0/0000:01:00.0`): `0000:00:02.0`;
/// None for a device on a root bus.
pub fn parent_from_devpath(devpath: &str) -> Option<String> {
    let mut parts = devpath.trim_end_matches('/').rsplit('/');
    parts.next()?;
    let parent = parts.next()?;
    normalize_bdf(parent).filter(|_| parent.contains('.') && parent.matches(':').count() == 2)
}

/// The PCI function a sysfs path lies below: the last component that is a
/// bus id as sysfs writes one (`.../0000:00:04.0/nvme/nvme0/nvme0n1`:
/// `0000:00:04.0`; behind a switch, the endpoint). A class device's link
/// target names the function whose DMA it does. None off PCI.
pub fn function_from_devpath(devpath: &str) -> Option<&str> {
    devpath
        .rsplit('/')
        .find(|c| normalize_bdf(c).as_deref() == Some(*c))
}

/// Normalise a printed PCI address to `ssss:bb:dd.f` (lower-case hex).
/// Accepts `bb:dd.f`, `0xbb:0xdd.f`, `ssss:bb:dd.f`, and NVRM's `ssss:bb:dd`
/// (function 0 assumed).
pub fn normalize_bdf(s: &str) -> Option<String> {
    let s = s.trim().trim_start_matches("PCI:");
    let strip = |p: &str| {
        let p = p.trim();
        let p = p
            .strip_prefix("0x")
            .or_else(|| p.strip_prefix("0X"))
            .unwrap_or(p);
        u32::from_str_radix(p, 16).ok()
    };
    let (left, func) = match s.rsplit_once('.') {
        Some((l, f)) => (l, strip(f)?),
        None => (s, 0),
    };
    let parts: Vec<&str> = left.split(':').collect();
    let (seg, bus, dev) = match (parts.len(), s.contains('.')) {
        (2, true) => (0, strip(parts[0])?, strip(parts[1])?),
        (3, _) => (strip(parts[0])?, strip(parts[1])?, strip(parts[2])?),
        _ => return None,
    };
    if seg > 0xffff || bus > 0xff || dev > 0x1f || func > 7 {
        return None;
    }
    Some(format!("{seg:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

/// `ssss:bb:dd.f` to `gpudirect_trace_common::pcie::pack_bdf`.
pub fn pack(bdf: &str) -> Option<u64> {
    let n = normalize_bdf(bdf)?;
    let (seg, rest) = n.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let h = |s: &str| u32::from_str_radix(s, 16).ok();
    Some(gpudirect_trace_common::pcie::pack_bdf(
        h(seg)?,
        h(bus)?,
        h(dev)?,
        h(func)?,
    ))
}

/// `gpudirect_trace_common::pcie::pack_bdf` to `ssss:bb:dd.f` (None for 0: unknown).
pub fn unpack(v: u64) -> Option<String> {
    if v == 0 {
        return None;
    }
    let (s, b, d, f) = gpudirect_trace_common::pcie::unpack_bdf(v);
    Some(format!("{s:04x}:{b:02x}:{d:02x}.{f:x}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_above_a_device() {
        assert_eq!(
            parent_from_devpath("/devices/pci0000:00/0000:00:02.0/0000:01:00.0").as_deref(),
            Some("0000:00:02.0")
        );
        assert_eq!(
            parent_from_devpath("/devices/pci0000:00/0000:00:04.0"),
            None
        );
        assert_eq!(parent_from_devpath("0000:01:00.0"), None);
        let nvme = "../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/nvme/nvme0/nvme0n1";
        assert_eq!(function_from_devpath(nvme), Some("0000:01:00.0"));
        assert_eq!(function_from_devpath("../../devices/virtual/net/lo"), None);
        assert_eq!(function_from_devpath("/sys/devices/pci0000:00"), None);
        let mut t = Topology::default();
        t.insert("0000:01:00.0", "0000:00:02.0");
        t.insert("0000:01:00.1", "0000:00:02.0");
        assert_eq!(t.below("0000:00:02.0"), ["0000:01:00.0", "0000:01:00.1"]);
        assert_eq!(t.upstream("0000:01:00.1"), Some("0000:00:02.0"));
        assert!(t.below("0000:01:00.0").is_empty());
    }

    #[test]
    fn bdf_normalisation_covers_every_printed_shape() {
        assert_eq!(normalize_bdf("00:03.0").as_deref(), Some("0000:00:03.0"));
        assert_eq!(
            normalize_bdf("0x00:0x02.0").as_deref(),
            Some("0000:00:02.0")
        );
        assert_eq!(
            normalize_bdf("0000:06:00.0").as_deref(),
            Some("0000:06:00.0")
        );
        assert_eq!(
            normalize_bdf("PCI:0008:01:00").as_deref(),
            Some("0008:01:00.0")
        );
        assert_eq!(normalize_bdf("3B:00.1").as_deref(), Some("0000:3b:00.1"));
        assert_eq!(normalize_bdf("garbage"), None);
        assert_eq!(normalize_bdf("00:40.0"), None, "device number > 0x1f");
    }
}
