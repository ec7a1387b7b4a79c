//! The PCIe health family's values, as its records carry them
//! (`kind::PCIE_LINK`, `kind::PCI_HOTPLUG`, `kind::AER`).

/// `enum pcie_link_change_reason` (drivers/pci/pci.h, 7.x), the
/// pci:pcie_link_event's `reason`.
pub const REASON_RETRAIN: u64 = 0;
pub const REASON_ADD_BUS: u64 = 1;
pub const REASON_BWCTRL_ENABLE: u64 = 2;
pub const REASON_BWCTRL_IRQ: u64 = 3;
pub const REASON_HOTPLUG: u64 = 4;
/// The loader's own reasons (`flags::FROM_USERSPACE`): the state when the
/// trace started, and a change a later sysfs reading showed.
pub const REASON_INITIAL: u64 = 0x100;
pub const REASON_POLLED: u64 = 0x101;

/// In a `kind::PCIE_LINK` record's `dir`, above LNKSTA's 16 bits: the
/// device lowers its link speed itself when idle (a display controller:
/// GPUs), so a lower speed alone is no downtrain.
pub const LINK_POWER_MANAGED: u32 = 1 << 16;

/// `enum pci_hotplug_event` (include/uapi/linux/pci.h, 7.x), the
/// pci:pci_hp_event's `event`.
pub const HP_LINK_UP: u64 = 0;
pub const HP_LINK_DOWN: u64 = 1;
pub const HP_CARD_PRESENT: u64 = 2;
pub const HP_CARD_NOT_PRESENT: u64 = 3;
/// The loader's own, from kernel uevents (`flags::FROM_USERSPACE`).
pub const HP_DEVICE_ADDED: u64 = 0x100;
pub const HP_DEVICE_REMOVED: u64 = 0x101;

/// `enum pci_bus_speed` (include/linux/pci.h): the PCIe speeds.
pub const SPEED_2_5GT: u8 = 0x14;
pub const SPEED_64GT: u8 = 0x19;
pub const SPEED_UNKNOWN: u8 = 0xff;

/// ras:aer_event's TLP header: the record's `dir` is this when the kernel
/// said the header log is valid (`tlp_header_valid`); its first four
/// dwords then ride in `phys` (dw0 | dw1 << 32) and `size` (dw2 | dw3 <<
/// 32).
pub const AER_TLP_VALID: u32 = 1;

/// A PCI address (`ssss:bb:dd.f`) in 32 bits: segment << 16 | bus << 8 |
/// device << 3 | function; 0 is "unknown" (0000:00:00.0 is a host bridge,
/// never a port).
pub const fn pack_bdf(segment: u32, bus: u32, device: u32, function: u32) -> u64 {
    ((segment & 0xffff) << 16 | (bus & 0xff) << 8 | (device & 0x1f) << 3 | (function & 7)) as u64
}

/// `pack_bdf`'s parts.
pub const fn unpack_bdf(v: u64) -> (u32, u32, u32, u32) {
    let v = v as u32;
    (v >> 16, (v >> 8) & 0xff, (v >> 3) & 0x1f, v & 7)
}
