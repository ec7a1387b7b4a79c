//! The PCIe health family's programs, run with BPF_PROG_TEST_RUN on the
//! host kernel (which has neither pci:pcie_link_event nor pci:pci_hp_event:
//! 7.x does; the VM scenarios pcie-* attach them there): their records
//! decode, reach the family's per-device state and the ledger.

use gpudirect_trace::model::{incident::Category, pci::LinkChange};
use gpudirect_trace_common::pcie;

use crate::inject::Injector;

#[test]
fn aer_tlp_header_link_and_slot_records_reach_the_family() {
    let mut inj = Injector::as_root();
    let name = inj.device.string_addr;
    // An uncorrected non-fatal completion timeout with a valid header log:
    // `tlp` is a readable kernel object (two pointers, the first = `name`).
    inj.run("ras_aer_event", &[name, 1 << 14, 0, 1, inj.device.addr]);
    // pci_hp_event(port_name, slot, event): the slot lost its link.
    inj.run("pci_hp_event", &[name, name, pcie::HP_LINK_DOWN]);
    // pcie_link_event(bus, reason, width, status) with no readable bus: the
    // record still carries width and reason, without a device.
    inj.run("pcie_link_event", &[0, pcie::REASON_RETRAIN, 8, 0x2000]);
    assert_eq!(inj.drain_all(), 3);
    let d = inj.snapshot();
    let dev = d
        .iter()
        .find(|d| d.device == inj.device.name)
        .expect("device row");
    let aer = dev.families.pcie.pcie_aer.as_ref().expect("AER counted");
    assert_eq!((aer.corrected, aer.nonfatal), (0, 1));
    assert_eq!(aer.errors.get("nonfatal:CmpltTO"), Some(&1), "{aer:?}");
    let want = format!("{:#010x}", name as u32);
    assert!(
        aer.last_tlp_header
            .as_deref()
            .is_some_and(|h| h.starts_with(&want)),
        "{aer:?} (want first dword {want})"
    );
    let link = dev.families.pcie.pcie_link.as_ref().expect("slot seen");
    assert_eq!(
        (link.state, link.link_down),
        ("down", 1),
        "the slot's LINK_DOWN: {link:?}"
    );
    let downs: Vec<_> = inj
        .analysis
        .ledger
        .incidents()
        .iter()
        .filter(|i| i.category == Category::Link)
        .collect();
    assert_eq!(downs.len(), 1, "{downs:#?}");
    assert!(matches!(downs[0].link, Some(LinkChange::Down { .. })));
    // The link record without a device went to the unattributed row.
    let other = d
        .iter()
        .find(|d| d.device != inj.device.name && d.families.pcie.pcie_link.is_some())
        .expect("the link record's row");
    assert_eq!(
        other.families.pcie.pcie_link.as_ref().map(|l| l.width),
        Some(8)
    );
}
