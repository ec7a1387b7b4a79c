//! The PCIe health family's metrics, declared once (docs/metrics.md's table
//! is made from them).

use super::link::LinkSnapshot;
use crate::metrics::{Metric, Sink, Unit::Seconds};

pub const AER_STATUS_BITS_TOTAL: Metric = Metric::counter(
    "gpudirect_pcie_aer_status_bits",
    &["device", "severity", "error"],
    "PCIe AER status bits set in the errors the kernel handled (ras:aer_event), \
     by severity and bit.",
    "set bits of the AER status register of each error `ras:aer_event` reported, by \
     severity (`corrected`, `nonfatal`, `fatal`) and status bit (aer.c's names: \
     `RxErr`, `BadTLP`, `CmpltTO`, ...): exact when the kernel log rate-limits its \
     lines (`gpudirect_pcie_aer_errors_total` counts the reports)",
);

pub const AER_REPORTS_TOTAL: Metric = Metric::counter(
    "gpudirect_pcie_aer_reports",
    &["device", "severity"],
    "PCIe AER errors the kernel handled (ras:aer_event), by severity.",
    "AER errors `ras:aer_event` reported, by severity (`corrected`, `nonfatal`, \
     `fatal`, `unknown` for a severity this version does not know): one per error the \
     AER driver handled, counted before the kernel log's ratelimit",
);

const LINK_DOC: &str = "the device's PCIe link: speed in GT/s and width in lanes now, and \
                        their maximum (the lower of both ends' capabilities), from \
                        `pci:pcie_link_event` (7.x) or sysfs read every second";

/// One of the link's speed and width gauges, which docs/metrics.md describes
/// together (`LINK_DOC`).
const fn link_gauge(name: &'static str, help: &'static str) -> Metric {
    Metric::gauge(name, &["device"], help, LINK_DOC)
}

pub const LINK_SPEED: Metric = link_gauge(
    "gpudirect_pcie_link_speed_gts",
    "PCIe link speed now, in GT/s (0 while the link is down).",
);

pub const LINK_MAX_SPEED: Metric = link_gauge(
    "gpudirect_pcie_link_max_speed_gts",
    "The most the PCIe link can run at, in GT/s.",
);

pub const LINK_WIDTH: Metric = link_gauge(
    "gpudirect_pcie_link_width",
    "PCIe link width now, in lanes (0 while the link is down).",
);

pub const LINK_MAX_WIDTH: Metric = link_gauge(
    "gpudirect_pcie_link_max_width",
    "The most lanes the PCIe link can use.",
);

pub const LINK_UP: Metric = Metric::gauge(
    "gpudirect_pcie_link_up",
    &["device"],
    "1 while the PCIe link is up, 0 while it is down or the device is gone.",
    "1 while the link is up; 0 once it went down or the device was removed (the series \
     stays, so an alert can see it)",
);

pub const LINK_DOWNTRAINED: Metric = Metric::gauge(
    "gpudirect_pcie_link_downtrained",
    &["device"],
    "1 while the PCIe link runs below its maximum width, or speed (a GPU's idle \
     speed is its power management, not a downtrain).",
    "1 while the link is below its maximum width, or below its maximum speed; a GPU \
     lowers its speed when idle, so its speed counts only while NVML shows it in P0",
);

pub const LINK_DOWNTRAINED_SECONDS: Metric = Metric::counter(
    "gpudirect_pcie_link_downtrained",
    &["device"],
    "Time the PCIe link spent below its maximum since the trace started.",
    "seconds the link spent downtrained (as `gpudirect_pcie_link_downtrained`)",
)
.in_unit(Seconds);

pub const LINK_RETRAINS_TOTAL: Metric = Metric::counter(
    "gpudirect_pcie_link_retrains",
    &["device"],
    "PCIe link retrains and speed/width changes while up.",
    "retrains (the kernel's `PCIE_LINK_RETRAIN` and bandwidth notifications), and \
     speed or width changes sysfs showed while the link stayed up (not a GPU's \
     power-managed speed changes)",
);

pub const LINK_DOWN_TOTAL: Metric = Metric::counter(
    "gpudirect_pcie_link_down",
    &["device"],
    "Times the PCIe link went down.",
    "times the link went down (width 0, or the hotplug slot's `LINK_DOWN`)",
);

pub const DEVICE_REMOVED_TOTAL: Metric = Metric::counter(
    "gpudirect_pcie_device_removed",
    &["device"],
    "Times the PCI device left the bus (hot-unplug, surprise removal, driver-less \
     removal).",
    "times the device was removed from the bus, from the kernel's uevent (every \
     kernel)",
);

/// In the order docs/metrics.md lists them.
pub const METRICS: &[&Metric] = &[
    &AER_REPORTS_TOTAL,
    &AER_STATUS_BITS_TOTAL,
    &LINK_SPEED,
    &LINK_MAX_SPEED,
    &LINK_WIDTH,
    &LINK_MAX_WIDTH,
    &LINK_UP,
    &LINK_DOWNTRAINED,
    &LINK_DOWNTRAINED_SECONDS,
    &LINK_RETRAINS_TOTAL,
    &LINK_DOWN_TOTAL,
    &DEVICE_REMOVED_TOTAL,
];

/// A link's series.
pub fn link(l: &LinkSnapshot, device: &str, sink: &mut dyn Sink) {
    let d = || vec![("device", device.to_owned())];
    let up = l.state == "up";
    sink.add_f64(&LINK_SPEED, d(), if up { l.speed_gts } else { 0.0 });
    sink.add(&LINK_WIDTH, d(), if up { u64::from(l.width) } else { 0 });
    if l.max_speed_gts > 0.0 {
        sink.add_f64(&LINK_MAX_SPEED, d(), l.max_speed_gts);
    }
    if l.max_width > 0 {
        sink.add(&LINK_MAX_WIDTH, d(), u64::from(l.max_width));
    }
    sink.add(&LINK_UP, d(), u64::from(up));
    sink.add(&LINK_DOWNTRAINED, d(), u64::from(l.downtrained));
    sink.add_f64(&LINK_DOWNTRAINED_SECONDS, d(), l.downtrained_s);
    sink.add(&LINK_RETRAINS_TOTAL, d(), l.retrains);
    sink.add(&LINK_DOWN_TOTAL, d(), l.link_down);
    if l.removals > 0 {
        sink.add(&DEVICE_REMOVED_TOTAL, d(), l.removals);
    }
}
