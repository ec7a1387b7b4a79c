//! The PCIe links as sysfs shows them, made into `kind::PCIE_LINK` records
//! (`flags::FROM_USERSPACE`): every link's state when the session starts
//! (the kernel's link event fires only on a change), then, on kernels
//! without pci:pcie_link_event, each link read again every
//! `POLL_INTERVAL`; and the kernel's add/remove uevents made into
//! `kind::PCI_HOTPLUG` records.
//!
//! A link is read at the device below it (its `current_link_speed` /
//! `current_link_width`, the same LNKSTA both ends share); its maximum is
//! the lower of the device's and its port's `max_link_*` (a Gen4 card in a
//! Gen5 slot is not downtrained at Gen4). Bridges are not read: their
//! links are their devices'. A GPU lowers its link speed itself when idle,
//! so its speed alone never makes it downtrained (`pcie::LINK_POWER_MANAGED`).

use std::{path::PathBuf, sync::Arc};

use gpudirect_trace_common::{flags, kind, pcie, Event};

use super::link::speed_code;
use crate::{
    decode::Record,
    families::{Source, Synth},
    model::pci::{normalize_bdf, pack, parent_from_devpath, Presence},
};

/// How often links are read where the kernel has no link event: a
/// downtrain or a link down is seen within this. Each reading is two small
/// sysfs reads per device (config space reads in the kernel).
pub const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Devices read at most (a host with more links reads the first ones, in
/// bus order, and says so once).
pub const MAX_LINKS: usize = 1024;

#[derive(Clone, Debug, PartialEq)]
struct State {
    speed: u8,
    width: u32,
}

struct Watched {
    name: Arc<str>,
    dir: PathBuf,
    max_speed: u8,
    max_width: u32,
    power_managed: bool,
    last: Option<State>,
}

pub struct Links {
    root: PathBuf,
    watched: Vec<Watched>,
    /// Read again every `POLL_INTERVAL` (no kernel link event here).
    poll: bool,
    /// Devices past `MAX_LINKS`, not read.
    pub skipped: usize,
}

fn read(path: &std::path::Path) -> Option<String> {
    // sysfs attributes are one short line: bounded.
    use std::io::Read as _;
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(256)
        .read_to_string(&mut s)
        .ok()?;
    Some(s.trim().to_owned())
}

impl Links {
    /// The links under `sysfs` (`/sys`); `poll`: read them again every
    /// `POLL_INTERVAL` (the kernel has no pci:pcie_link_event attached).
    pub fn new(sysfs: &std::path::Path, poll: bool) -> Self {
        let root = sysfs.join("bus/pci/devices");
        let names = crate::kernel::dir_names(&root);
        let mut out = Self {
            root,
            watched: Vec::new(),
            poll,
            skipped: 0,
        };
        for n in names {
            out.watch(&n);
        }
        out
    }

    /// Starts reading `device`'s link, if it has one (not a bridge, has
    /// link attributes). False where it was not taken.
    fn watch(&mut self, device: &str) -> bool {
        let Some(name) = normalize_bdf(device) else {
            return false;
        };
        if self.watched.iter().any(|w| *w.name == *name) {
            return true;
        }
        let dir = self.root.join(device);
        let class = read(&dir.join("class")).unwrap_or_default();
        // 0x0604xx: a PCI bridge (ports); its link is its device's.
        if class.starts_with("0x0604") || !dir.join("current_link_speed").exists() {
            return false;
        }
        if self.watched.len() >= MAX_LINKS {
            self.skipped += 1;
            return false;
        }
        let own_speed = read(&dir.join("max_link_speed")).map_or(0, |s| speed_code(&s));
        let own_width = read(&dir.join("max_link_width"))
            .and_then(|w| w.parse::<u32>().ok())
            .unwrap_or(0);
        // The port's capabilities bound the link too.
        let port = std::fs::read_link(&dir)
            .ok()
            .and_then(|l| parent_from_devpath(&l.to_string_lossy()))
            .map(|p| self.root.join(p));
        let port_speed = port
            .as_ref()
            .and_then(|p| read(&p.join("max_link_speed")))
            .map_or(pcie::SPEED_UNKNOWN, |s| speed_code(&s));
        let port_width = port
            .as_ref()
            .and_then(|p| read(&p.join("max_link_width")))
            .and_then(|w| w.parse::<u32>().ok())
            .unwrap_or(0);
        let known = |c: u8| c != pcie::SPEED_UNKNOWN && c != 0;
        let max_speed = match (known(own_speed), known(port_speed)) {
            (true, true) => own_speed.min(port_speed),
            (true, false) => own_speed,
            (false, true) => port_speed,
            _ => 0,
        };
        let max_width = match (own_width, port_width) {
            (0, w) | (w, 0) => w,
            (a, b) => a.min(b),
        };
        let w = Watched {
            name: Arc::from(name),
            dir,
            max_speed,
            max_width,
            power_managed: class.starts_with("0x03"),
            last: None,
        };
        // A device that answers config reads has its link up: one that
        // reads no speed or no lanes has no link to watch (an integrated
        // endpoint, a virtual device: qemu's root-bus NVMe reads
        // "Unknown" x0, max "Unknown" x255).
        match Self::state(&w) {
            Some(s) if s.width > 0 && s.speed != pcie::SPEED_UNKNOWN => {}
            _ => return false,
        }
        self.watched.push(w);
        true
    }

    fn state(w: &Watched) -> Option<State> {
        let speed = speed_code(&read(&w.dir.join("current_link_speed"))?);
        let width = read(&w.dir.join("current_link_width"))?.parse().ok()?;
        Some(State { speed, width })
    }

    fn record(w: &Watched, s: &State, ts: u64, reason: u64) -> Synth {
        let ev = Event {
            kind: kind::PCIE_LINK,
            flags: flags::FROM_USERSPACE,
            dir: if w.power_managed {
                pcie::LINK_POWER_MANAGED
            } else {
                0
            },
            ts_ns: ts,
            addr: u64::from(s.speed) | u64::from(w.max_speed) << 8,
            size: u64::from(s.width),
            phys: u64::from(w.max_width),
            aux: reason,
            ..Event::default()
        };
        Synth {
            record: Record::Event(ev),
            device: w.name.clone(),
        }
    }

    /// Each watched link read now; a record where it changed (or for every
    /// link, with `reason` REASON_INITIAL).
    fn read_all(&mut self, ts: u64, reason: u64, out: &mut Vec<Synth>) {
        for w in &mut self.watched {
            let Some(s) = Self::state(w) else { continue };
            if reason != pcie::REASON_INITIAL && w.last.as_ref() == Some(&s) {
                continue;
            }
            out.push(Self::record(w, &s, ts, reason));
            w.last = Some(s);
        }
    }
}

impl Source for Links {
    fn start(&mut self, now_ns: u64, out: &mut Vec<Synth>) {
        self.read_all(now_ns, pcie::REASON_INITIAL, out);
    }

    fn poll(&mut self, now_ns: u64, out: &mut Vec<Synth>) {
        if self.poll {
            self.read_all(now_ns, pcie::REASON_POLLED, out);
        }
    }

    fn presence(&mut self, p: &Presence, out: &mut Vec<Synth>) {
        let addr = p.upstream.as_deref().and_then(pack).unwrap_or(0);
        let ev = Event {
            kind: kind::PCI_HOTPLUG,
            flags: flags::FROM_USERSPACE,
            ts_ns: p.ts_ns,
            addr,
            aux: if p.added {
                pcie::HP_DEVICE_ADDED
            } else {
                pcie::HP_DEVICE_REMOVED
            },
            ..Event::default()
        };
        out.push(Synth {
            record: Record::Event(ev),
            device: Arc::from(p.device.as_str()),
        });
        if p.added {
            // A hot-added device: its link from now on, and its state now.
            if self.watch(&p.device) {
                if let Some(w) = self.watched.iter_mut().find(|w| *w.name == *p.device) {
                    if let Some(s) = Self::state(w) {
                        out.push(Self::record(w, &s, p.ts_ns, pcie::REASON_INITIAL));
                        w.last = Some(s);
                    }
                }
            }
        } else {
            self.watched.retain(|w| *w.name != *p.device);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::pci::unpack;

    /// A sysfs tree made by the test (not the host's): a Gen5 x16 GPU below
    /// a Gen5 port, a Gen4 NIC in a Gen5 slot trained at x8 of x16, and
    /// the port itself (a bridge: not read).
    fn tree() -> tempfile::TempDir {
        let t = tempfile::tempdir().expect("tempdir");
        let devs = t.path().join("devices/pci0000:00");
        let bus = t.path().join("bus/pci/devices");
        std::fs::create_dir_all(&bus).expect("bus");
        let mk = |path: &str, attrs: &[(&str, &str)]| {
            let d = devs.join(path);
            std::fs::create_dir_all(&d).expect("dir");
            for (k, v) in attrs {
                std::fs::write(d.join(k), format!("{v}\n")).expect("attr");
            }
            let name = path.rsplit('/').next().expect("name");
            std::os::unix::fs::symlink(&d, bus.join(name)).expect("link");
        };
        let port = [
            ("class", "0x060400"),
            ("current_link_speed", "32.0 GT/s PCIe"),
            ("current_link_width", "16"),
            ("max_link_speed", "32.0 GT/s PCIe"),
            ("max_link_width", "16"),
        ];
        mk("0000:00:02.0", &port);
        mk("0000:00:03.0", &port);
        mk(
            "0000:00:02.0/0000:01:00.0",
            &[
                ("class", "0x030200"),
                ("current_link_speed", "2.5 GT/s PCIe"),
                ("current_link_width", "16"),
                ("max_link_speed", "32.0 GT/s PCIe"),
                ("max_link_width", "16"),
            ],
        );
        // qemu's root-bus NVMe: link attributes without a link.
        mk(
            "0000:00:04.0",
            &[
                ("class", "0x010802"),
                ("current_link_speed", "Unknown"),
                ("current_link_width", "0"),
                ("max_link_speed", "Unknown"),
                ("max_link_width", "255"),
            ],
        );
        mk(
            "0000:00:03.0/0000:02:00.0",
            &[
                ("class", "0x020000"),
                ("current_link_speed", "16.0 GT/s PCIe"),
                ("current_link_width", "8"),
                ("max_link_speed", "16.0 GT/s PCIe"),
                ("max_link_width", "16"),
            ],
        );
        t
    }

    #[test]
    fn the_links_of_a_synthetic_sysfs_tree_at_start_and_on_change() {
        let t = tree();
        let mut l = Links::new(t.path(), true);
        let mut out = Vec::new();
        l.start(5, &mut out);
        let names: Vec<&str> = out.iter().map(|s| &*s.device).collect();
        assert_eq!(
            names,
            ["0000:01:00.0", "0000:02:00.0"],
            "bridges are not read"
        );
        let ev = *out[1].record.event();
        assert_eq!(
            (ev.addr as u8, (ev.addr >> 8) as u8, ev.size, ev.phys),
            (0x17, 0x17, 8, 16),
            "the NIC: Gen4 x8 of Gen4 x16 (its own Gen4 bounds the Gen5 slot)"
        );
        assert_eq!(
            out[0].record.event().dir,
            pcie::LINK_POWER_MANAGED,
            "the GPU"
        );
        // Nothing changed: nothing polled. The NIC loses more lanes: one record.
        out.clear();
        l.poll(6, &mut out);
        assert!(out.is_empty());
        let nic = t
            .path()
            .join("devices/pci0000:00/0000:00:03.0/0000:02:00.0");
        std::fs::write(nic.join("current_link_width"), "4\n").expect("write");
        l.poll(7, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].record.event().size, 4);
        assert_eq!(out[0].record.event().aux, pcie::REASON_POLLED);
        // Without polling (the kernel's link event is attached): none.
        let mut quiet = Links::new(t.path(), false);
        out.clear();
        quiet.start(1, &mut out);
        std::fs::write(nic.join("current_link_width"), "2\n").expect("write");
        out.clear();
        quiet.poll(2, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn presence_records_and_packed_addresses() {
        let t = tree();
        let mut l = Links::new(t.path(), true);
        let mut out = Vec::new();
        l.presence(
            &Presence {
                ts_ns: 3,
                device: "0000:02:00.0".into(),
                upstream: Some("0000:00:03.0".into()),
                added: false,
            },
            &mut out,
        );
        let ev = out[0].record.event();
        assert_eq!(
            (ev.kind, ev.aux),
            (kind::PCI_HOTPLUG, pcie::HP_DEVICE_REMOVED)
        );
        assert_eq!(unpack(ev.addr).as_deref(), Some("0000:00:03.0"));
        assert_eq!(pack("0000:00:00.0"), Some(0));
        assert_eq!(
            unpack(pack("abcd:ff:1f.7").expect("packs")).as_deref(),
            Some("abcd:ff:1f.7")
        );
        // Removed: no longer read.
        out.clear();
        l.poll(4, &mut out);
        assert!(out.iter().all(|s| &*s.device != "0000:02:00.0"));
    }
}
