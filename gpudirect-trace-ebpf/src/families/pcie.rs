//! The PCIe health family's programs: AER errors (ras:aer_event), link
//! state changes (pci:pcie_link_event, 7.x) and hotplug slot events
//! (pci:pci_hp_event, 7.x). Each fires a few times per change, never on a
//! hot path: every record is emitted whole (`emit_rare`).

use aya_ebpf::{
    helpers::bpf_probe_read_kernel, macros::raw_tracepoint, programs::RawTracePointContext,
};
use gpudirect_trace_common::{flags, kind, pcie, Event};

use crate::{
    arg, device,
    emit::{base_event, config, emit_rare},
};

/// A kernel value at `base + off` (`off` from BTF; `u32::MAX` unknown).
#[inline(always)]
fn read<T: Copy>(base: u64, off: u32) -> Option<T> {
    if base == 0 || off == u32::MAX {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel tolerates any address.
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T) }.ok()
}

/// The record of a device that its tracepoint names by the string at
/// `name`, keyed as `device::remember_name` says.
#[inline(always)]
fn named_event(k: u16, name: u64) -> Event {
    let key = name | 1;
    let mut ev = base_event(k, 0, 0);
    if device::remember_name(key, name) {
        ev.dev = key;
        ev.flags &= !flags::NO_DEVICE;
    }
    ev
}

/// ras:aer_event(const char *dev_name, const u32 status, const u8 severity,
/// const u8 tlp_header_valid, struct pcie_tlp_log *tlp) (5 arguments since
/// 4.6; `tlp` was struct aer_header_log_regs before 6.x, the same first
/// four dwords): the device is named by string (a tagged key of the
/// `DEVICES` name map), the header log is carried when valid.
#[raw_tracepoint]
pub fn ras_aer_event(ctx: RawTracePointContext) -> i32 {
    let mut ev = named_event(kind::AER, arg(&ctx, 0));
    ev.addr = arg(&ctx, 1) as u32 as u64;
    ev.aux = arg(&ctx, 2) as u8 as u64;
    if arg(&ctx, 3) as u8 != 0 {
        let tlp = arg(&ctx, 4);
        if let (Some(lo), Some(hi)) = (read::<u64>(tlp, 0), read::<u64>(tlp, 8)) {
            ev.dir = pcie::AER_TLP_VALID;
            ev.phys = lo;
            ev.size = hi;
        }
    }
    emit_rare(&mut ev);
    0
}

/// pci:pcie_link_event(struct pci_bus *bus, unsigned int reason, unsigned
/// int width, unsigned int status): the kernel updated a link's speed
/// (retrain, bandwidth notification, hotplug, bus scan). The port above
/// the link is `bus->self`; the speeds are the bus's, just updated from
/// LNKSTA (the tracepoint's `status` has only LNKSTA's LT/DLLLA/LBMS/LABS).
#[raw_tracepoint]
pub fn pcie_link_event(ctx: RawTracePointContext) -> i32 {
    let off = &config().offsets;
    let bus = arg(&ctx, 0);
    let port = read::<u64>(bus, off.pci_bus_self).unwrap_or(0);
    let dev = if port == 0 {
        0
    } else {
        port + off.pci_dev_device as u64
    };
    let mut ev = base_event(kind::PCIE_LINK, dev, 0);
    let cur = read::<u8>(bus, off.pci_bus_cur_speed).unwrap_or(pcie::SPEED_UNKNOWN);
    let max = read::<u8>(bus, off.pci_bus_max_speed).unwrap_or(0);
    ev.addr = cur as u64 | (max as u64) << 8;
    ev.aux = arg(&ctx, 1) as u32 as u64;
    ev.size = arg(&ctx, 2) as u32 as u64;
    ev.dir = arg(&ctx, 3) as u32;
    emit_rare(&mut ev);
    0
}

/// pci:pci_hp_event(const char *port_name, const char *slot, const int
/// event): a hotplug slot saw its link go up or down, or a card arrive or
/// leave. Named by the port's string (tagged key, as ras:aer_event).
#[raw_tracepoint]
pub fn pci_hp_event(ctx: RawTracePointContext) -> i32 {
    let mut ev = named_event(kind::PCI_HOTPLUG, arg(&ctx, 0));
    ev.aux = arg(&ctx, 2) as u32 as u64;
    emit_rare(&mut ev);
    0
}
