//! The link state machine: downtrains, retrains, link down/up, and what is no news.

use gpudirect_trace_common::kind;

use super::*;

fn link(ts: u64, speed: u8, max: u8, width: u64, max_width: u64, reason: u64, user: bool) -> Event {
    Event {
        kind: kind::PCIE_LINK,
        flags: if user { flags::FROM_USERSPACE } else { 0 },
        ts_ns: ts,
        addr: u64::from(speed) | u64::from(max) << 8,
        size: width,
        phys: max_width,
        aux: reason,
        ..Event::default()
    }
}

const S: u64 = 1_000_000_000;

#[test]
fn a_link_at_its_maximum_then_downtrained_then_down_then_back() {
    let mut l = Link::default();
    // Gen5 x16 of Gen5 x16 at the start: no change to report.
    assert_eq!(
        l.link_record(&link(S, 0x18, 0x18, 16, 16, pcie::REASON_INITIAL, true)),
        None
    );
    let s = l.snapshot(S).expect("known");
    assert_eq!(
        (s.generation, s.width, s.max_generation, s.max_width),
        (5, 16, 5, 16)
    );
    assert_eq!(s.summary(), "Gen5 x16 of Gen5 x16");
    // The kernel retrains it to x8.
    let c = l.link_record(&link(2 * S, 0x18, 0x18, 8, 0, pcie::REASON_RETRAIN, false));
    assert_eq!(
        c,
        Some(LinkChange::Downtrained {
            now: "Gen5 x8".into(),
            max: "Gen5 x16".into()
        })
    );
    assert_eq!(l.snapshot(5 * S).expect("known").downtrained_s, 3.0);
    // Down at 6 s: 4 s below its maximum, closed.
    let c = l.link_record(&link(6 * S, 0xff, 0x18, 0, 0, pcie::REASON_HOTPLUG, false));
    assert_eq!(
        c,
        Some(LinkChange::Down {
            reason: "hotplug".into()
        })
    );
    let s = l.snapshot(9 * S).expect("known");
    assert_eq!(
        (s.state, s.downtrained_s, s.link_down, s.retrains),
        ("down", 4.0, 1, 1)
    );
    // Up again at full width.
    let c = l.link_record(&link(
        10 * S,
        0x18,
        0x18,
        16,
        0,
        pcie::REASON_HOTPLUG,
        false,
    ));
    assert!(matches!(c, Some(LinkChange::Up { .. })), "{c:?}");
    let s = l.snapshot(11 * S).expect("known");
    assert_eq!((s.state, s.downtrained, s.link_up), ("up", false, 1));
}

#[test]
fn a_gpu_that_lowers_its_speed_when_idle_is_not_downtrained() {
    let mut l = Link::default();
    l.set_power_managed(true);
    l.link_record(&link(S, 0x18, 0x18, 16, 16, pcie::REASON_INITIAL, true));
    // Idle: Gen1 x16 by sysfs. Not a retrain, not news.
    let c = l.link_record(&link(2 * S, 0x14, 0x18, 16, 16, pcie::REASON_POLLED, true));
    assert_eq!(c, None);
    let s = l.snapshot(3 * S).expect("known");
    assert!(
        !s.downtrained && s.power_managed_speed && s.retrains == 0,
        "{s:?}"
    );
    assert!(s.summary().contains("power management"), "{}", s.summary());
    // Busy (P0) at Gen1: that is a downtrain.
    assert!(matches!(
        l.set_busy(true, 4 * S),
        Some(LinkChange::Downtrained { .. })
    ));
    // A narrower link counts whatever the power state.
    let mut w = Link::default();
    w.set_power_managed(true);
    w.link_record(&link(S, 0x18, 0x18, 8, 16, pcie::REASON_INITIAL, true));
    assert!(w.snapshot(S).expect("known").downtrained);
}

#[test]
fn the_maximum_is_the_lower_end_and_removal_ends_the_link() {
    let mut l = Link::default();
    // A Gen4 card in a Gen5 slot: sysfs gave min(port, card) = Gen4.
    l.link_record(&link(S, 0x17, 0x17, 16, 16, pcie::REASON_INITIAL, true));
    // The kernel's record has the port's maximum (Gen5): still Gen4.
    assert_eq!(
        l.link_record(&link(
            2 * S,
            0x17,
            0x18,
            16,
            0,
            pcie::REASON_BWCTRL_IRQ,
            false
        )),
        None
    );
    assert!(!l.snapshot(2 * S).expect("known").downtrained);
    let removed = Event {
        kind: kind::PCI_HOTPLUG,
        flags: flags::FROM_USERSPACE,
        ts_ns: 3 * S,
        aux: pcie::HP_DEVICE_REMOVED,
        ..Event::default()
    };
    assert!(matches!(
        l.hotplug_record(&removed),
        Some(LinkChange::Removed { .. })
    ));
    assert_eq!(l.snapshot(4 * S).expect("known").state, "removed");
}

#[test]
fn no_link_at_the_start_is_no_news_a_kernel_link_down_is() {
    let mut quiet = Link::default();
    assert_eq!(
        quiet.link_record(&link(S, 0xff, 0, 0, 0, pcie::REASON_INITIAL, true)),
        None
    );
    let mut told = Link::default();
    assert!(matches!(
        told.link_record(&link(S, 0xff, 0x18, 0, 0, pcie::REASON_HOTPLUG, false)),
        Some(LinkChange::Down { .. })
    ));
}

#[test]
fn sysfs_speed_text() {
    assert_eq!(speed_code("32.0 GT/s PCIe"), 0x18);
    assert_eq!(speed_code("2.5 GT/s"), 0x14);
    assert_eq!(speed_code("Unknown"), 0xff);
    assert_eq!(speed_code(""), 0xff);
    assert_eq!(generation(0x18), 5);
    assert_eq!(speed_gts(0x16), 8.0);
}
