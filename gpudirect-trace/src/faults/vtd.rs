//! Intel VT-d (DMAR) fault lines.
//!
//! Tables: drivers/iommu/intel/dmar.c, `dma_remap_fault_reasons[]`,
//! `dma_remap_sm_fault_reasons[]`, `irq_remap_fault_reasons[]` and
//! `dmar_get_fault_reason()` (torvalds/linux, stored revision c34e9ab9a612, a
//! 6.1x tree; the legacy and IRQ tables are unchanged since 2.6.x, the
//! scalable-mode table was added in 5.x).
//!
//! Print formats of `dmar_fault_do_one()` seen across versions:
//! - 6.x:   `[DMA Write NO_PASID] Request device [00:03.0] fault addr 0x123000 [fault reason 0x05] <text>`
//!   and `[DMA Read PASID 0x5] ...`; `[INTR-REMAP] ... fault index 0x17 [fault reason 0x25] ...`
//! - 5.x:   `[DMA Write] Request device [00:03.0] PASID ffffffff fault addr 123000 [fault reason 05] <text>`
//!   (reason printed with `%02d`: DECIMAL); some 5.1x builds print `[0x00:0x02.0]`
//! - 4.x:   `[DMA Write] Request device [00:12.0] fault addr 0 [fault reason 05] <text>` (no PASID)
//! - 3.x:   `DMAR:[DMA Read] Request device [00:02.0] fault addr ffe000 ` then a second line
//!   `DMAR:[fault reason 06] <text>` (one printk with an embedded newline)
//! - `DRHD: handling fault status reg %x` precedes each burst; when the shared
//!   ratelimit trips, records are cleared without being printed and later
//!   `dmar_fault: N callbacks suppressed` appears.

pub use super::vtd_tables::{
    fault_reason, FaultType, DMA_REMAP_FAULT_REASONS, DMA_REMAP_SM_FAULT_REASONS,
    IRQ_REMAP_FAULT_REASONS,
};
use super::{field, parse_hex, Access, Fault, Source};

/// Meaning and first checks per fault reason (grouped by what goes wrong).
pub fn explain(code: u32, access: Option<Access>) -> String {
    let what = match access {
        Some(Access::Write) => "wrote to",
        Some(Access::Read) => "read from",
        _ => "accessed",
    };
    match code {
        0x05 | 0x06 | 0x71 | 0x79 | 0x85 | 0x86 => format!(
            "The device {what} an IOVA whose IOMMU page-table entry does not allow it. Most often \
             the address is not mapped at all for this device: DMA after dma_unmap or after the \
             buffer was freed, a stale descriptor/doorbell, a peer BAR address (GPUDirect P2P/RDMA) \
             that was never mapped for this device, or a mapping made with the wrong direction. \
             First checks: was the address inside a live mapping of this device (mapping_state from \
             the live tracer), the driver's unmap-before-DMA-complete ordering, and for P2P whether \
             the peer BAR goes through dma_map_resource/p2pdma; iommu=pt hides such bugs."
        ),
        0x01 | 0x02 | 0x38 | 0x39 | 0x41 => "The device's requester ID has no root/context entry: \
             it is not attached to any IOMMU domain. Typical causes: DMA before the driver probed or \
             after it was unbound, firmware/BIOS DMA without an RMRR, a device behind a PCIe-to-PCI \
             bridge issuing DMA with the bridge's alias ID, or a function-level reset racing the \
             driver. First checks: `ls /sys/bus/pci/devices/<dev>/iommu_group`, driver binding, \
             and whether the fault happens only at boot (firmware) or on driver unload."
            .to_string(),
        0x04 | 0x74 | 0x83 | 0x84 => "The DMA address is wider than the IOMMU's address width \
             (MGAW). The device or driver used an address beyond what the IOMMU translates: check the \
             device's DMA mask and the IOMMU's width (cap/sagaw printed at boot)."
            .to_string(),
        0x03 | 0x07..=0x0c | 0x30 | 0x3a | 0x40 | 0x42 | 0x43 | 0x70 | 0x72 | 0x73 | 0x78
        | 0x7a | 0x7b => "The IOMMU found an invalid or corrupt table entry while walking its \
             structures. This points to a kernel/IOMMU-driver bug or memory corruption, not to the \
             device. Capture the full dmesg (newer kernels dump the walked entries after the fault) \
             and the kernel version."
            .to_string(),
        0x0d => "A translation request (ATS) was blocked by the context entry: the device uses \
             ATS but the domain does not allow it. Check ATS enablement for the device."
            .to_string(),
        0x31 | 0x32 | 0x44..=0x48 | 0x50..=0x52 | 0x58..=0x5d => "Scalable-mode setup problem: \
             the request carried (or lacked) a PASID the context/PASID tables are not set up for. \
             Check that the device's PASID/SVA use matches what the driver attached (iommu_sva_bind, \
             RID_PASID for plain DMA)."
            .to_string(),
        0x75..=0x77 | 0x80..=0x82 => "First-level (process page-table style) permission or \
             canonical-address error, usually with SVA/PASID: the device used an address the bound \
             address space does not allow."
            .to_string(),
        0x7c | 0x90 => "A/D bit update needed while the entry is set up for no-snoop: a driver \
             configuration issue in the IOMMU driver."
            .to_string(),
        0x87 => "Interrupt-address range accessed as DMA (the fault address lies in the MSI \
             window). Check the device's MSI setup."
            .to_string(),
        0x20..=0x26 => explain_irq(code),
        _ => "Fault reason code not in the kernel's tables (newer hardware or a different \
             kernel); see the Intel VT-d specification, chapter 'Fault Reasons'."
            .to_string(),
    }
}

fn explain_irq(code: u32) -> String {
    let s = match code {
        0x22 => {
            "An interrupt arrived for an IRTE that is not present: the device fired an MSI \
             before the driver set up its vector or after it was freed (stale MSI after \
             reset/unbind)."
        }
        0x25 => {
            "A compatibility-format (not remappable) interrupt was blocked: the device or \
             firmware programs old-style MSI/IOAPIC entries while interrupt remapping requires \
             remappable format. Often firmware (x2APIC opt-out) or an IOAPIC not covered by the \
             DMAR table."
        }
        0x26 => {
            "Source-id verification failed: the interrupt came with a requester ID that does \
             not match the IRTE (devices behind bridges/aliases, or DMA aliases quirks missing)."
        }
        0x21 => "Interrupt index beyond the remapping table: corrupt MSI data or a driver bug.",
        _ => "Interrupt-remapping table/entry error: an IOMMU driver or firmware problem.",
    };
    format!(
        "Interrupt-remapping fault. {s} First checks: the device's MSI setup (`lspci -vv`), \
             `dmesg | grep -i -e DMAR -e x2apic`, and whether it follows a device reset."
    )
}

/// Decode a fault-reason number as printed: `0x05` is hex (6.x), `05` is the
/// decimal `%02d` of older kernels.
fn parse_reason_code(s: &str) -> Option<u32> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x") {
        u32::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// Parse one VT-d message body.
pub fn parse(body: &str) -> Option<Fault> {
    if !body.contains("DMAR") {
        return None;
    }
    let unit = unit_hint(body).map(|u| format!("iommu unit {u} (segment assumed 0000)"));
    let mut fault = None;
    if let Some(pos) = body.find("[INTR-REMAP]") {
        fault = Some(parse_intr(&body[pos..], body));
    } else if let Some(pos) = body.find("[DMA Read").or_else(|| body.find("[DMA Write")) {
        fault = Some(parse_dma(&body[pos..], body));
    }
    if let Some(mut f) = fault {
        f.flags.extend(unit);
        return Some(f);
    }
    // Second line of the 3.x two-line format on its own.
    if let Some(pos) = body.find("[fault reason") {
        let mut f = Fault::new(Source::Vtd, "", body);
        apply_reason(&mut f, &body[pos..]);
        f.partial = true;
        return Some(f);
    }
    None
}

/// `DRHD: handling fault status reg 3` -> 3.
pub fn parse_status(body: &str) -> Option<u32> {
    let pos = body.find("handling fault status reg ")?;
    parse_hex(
        body[pos + "handling fault status reg ".len()..]
            .split_whitespace()
            .next()?,
    )
    .map(|v| v as u32)
}

/// Fault status register bits (DMA_FSTS_* in drivers/iommu/intel/iommu.h).
pub fn status_flags(reg: u32) -> Vec<String> {
    let names = [
        (
            0,
            "PFO: primary fault overflow (hardware dropped fault records)",
        ),
        (1, "PPF: primary fault pending"),
        (2, "AFO: advanced fault overflow"),
        (3, "APF: advanced pending fault"),
        (4, "IQE: invalidation queue error"),
        (5, "ICE: invalidation completion error"),
        (6, "ITE: invalidation time-out error"),
        (7, "PRO: page request overflow"),
    ];
    names
        .iter()
        .filter(|(bit, _)| reg & (1 << bit) != 0)
        .map(|(_, n)| n.to_string())
        .collect()
}

/// IOMMU unit named on the line (`dmar0`, `dmar1`, ...). VT-d lines print
/// bus:dev.fn without the PCI segment; on multi-segment hosts the unit tells
/// which segment (`/sys/class/iommu/<unit>/devices` lists its devices).
pub fn unit_hint(body: &str) -> Option<String> {
    let pos = body.find("dmar")?;
    let digits: String = body[pos + 4..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    (!digits.is_empty()).then(|| format!("dmar{digits}"))
}

fn request_device(f: &mut Fault, text: &str) {
    if let Some(pos) = text.find("Request device [") {
        let rest = &text[pos + "Request device [".len()..];
        if let Some(end) = rest.find(']') {
            f.set_device(&rest[..end]);
        }
    }
}

fn apply_reason(f: &mut Fault, text: &str) {
    let Some(pos) = text.find("[fault reason ") else {
        f.partial = true;
        return;
    };
    let rest = &text[pos + "[fault reason ".len()..];
    let Some(end) = rest.find(']') else {
        f.partial = true;
        return;
    };
    let printed_text = rest[end + 1..].trim();
    match parse_reason_code(&rest[..end]) {
        Some(code) => {
            f.reason_code = Some(code);
            match fault_reason(code) {
                Some((name, _)) => {
                    f.reason = if printed_text.is_empty() {
                        name.to_string()
                    } else {
                        printed_text.to_string()
                    };
                }
                None => {
                    f.partial = true;
                    f.reason = if printed_text.is_empty() || printed_text == "Unknown" {
                        format!("unknown fault reason {code:#x}")
                    } else {
                        printed_text.to_string()
                    };
                }
            }
            f.explanation = explain(code, f.access);
        }
        None => f.partial = true,
    }
}

fn parse_dma(from_bracket: &str, body: &str) -> Fault {
    let mut f = Fault::new(Source::Vtd, "", body);
    let tag_end = from_bracket.find(']').unwrap_or(from_bracket.len());
    let tag = &from_bracket[1..tag_end];
    f.access = Some(if tag.starts_with("DMA Read") {
        Access::Read
    } else {
        Access::Write
    });
    // 6.x: "DMA Read PASID 0x5"; 5.x: " PASID ffffffff " after the device.
    if let Some(p) = tag.find("PASID ") {
        f.pasid = parse_hex(&tag[p + 6..]).map(|v| v as u32);
    } else if let Some(p) = from_bracket.find("] PASID ") {
        let v = from_bracket[p + 8..]
            .split_whitespace()
            .next()
            .and_then(parse_hex);
        f.pasid = v.filter(|v| *v != 0xffff_ffff).map(|v| v as u32);
    }
    request_device(&mut f, from_bracket);
    if let Some(p) = from_bracket.find("fault addr ") {
        f.address = from_bracket[p + 11..]
            .split_whitespace()
            .next()
            .and_then(parse_hex);
    } else {
        f.partial = true;
    }
    apply_reason(&mut f, from_bracket);
    f
}

fn parse_intr(from_bracket: &str, body: &str) -> Fault {
    let mut f = Fault::new(Source::Vtd, "", body);
    f.access = Some(Access::Interrupt);
    request_device(&mut f, from_bracket);
    if let Some(idx) = field(from_bracket, "index ") {
        f.flags.push(format!("interrupt index {idx}"));
    }
    apply_reason(&mut f, from_bracket);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{parse_line, parsed};

    #[test]
    fn unit_hint_only_for_numbered_units() {
        assert_eq!(
            unit_hint("DMAR: Dump dmar1 table entries for IOVA 0x1000"),
            Some("dmar1".into())
        );
        assert_eq!(unit_hint("dmar_fault: 3 callbacks suppressed"), None);
        assert_eq!(unit_hint("DMAR: [DMA Read] x"), None);
    }

    #[test]
    fn reason_number_base_depends_on_prefix() {
        // 4.x/5.x print `%02d` (decimal), 6.x `0x%02x`.
        assert_eq!(parse_reason_code("12"), Some(12));
        assert_eq!(parse_reason_code("0x12"), Some(0x12));
        assert_eq!(parse_reason_code("113"), Some(0x71));
    }

    #[test]
    fn tables_match_kernel_indices() {
        assert_eq!(
            fault_reason(0x05).map(|r| r.0),
            Some("PTE Write access is not set")
        );
        assert_eq!(
            fault_reason(0x25),
            Some((
                "Blocked a compatibility format interrupt request",
                FaultType::IntrRemap
            ))
        );
        assert_eq!(
            fault_reason(0x71).map(|r| r.0),
            Some("SM: Present bit in first-level paging entry is clear")
        );
        assert_eq!(
            fault_reason(0x90).map(|r| r.0),
            Some("SM: A/D bit update needed in first-level entry when set up in no snoop")
        );
        assert_eq!(fault_reason(0x33), None, "hole in the SM table");
        assert_eq!(fault_reason(0x0e), None);
        assert_eq!(fault_reason(0x91), None);
    }

    // Real line, Linux 6.1 guest with qemu intel-iommu, edu device DMA to an
    // unmapped IOVA: /work/shared/notes/environment.md ("Kernels in a VM").
    #[test]
    fn linux_6_1_no_pasid() {
        let f = parsed("DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr 0x123000 [fault reason 0x05] PTE Write access is not set");
        assert_eq!(f.source, Source::Vtd);
        assert_eq!(f.device.as_deref(), Some("0000:00:03.0"));
        assert_eq!(f.device_raw.as_deref(), Some("00:03.0"));
        assert_eq!(f.address, Some(0x123000));
        assert_eq!(f.reason_code, Some(5));
        assert_eq!(f.access, Some(Access::Write));
        assert_eq!(f.pasid, None);
        assert_eq!(f.reason, "PTE Write access is not set");
        assert!(!f.partial);
        assert!(f.explanation.contains("not mapped"));
    }

    // Real line, Linux 5.10 guest, same setup: environment.md.
    #[test]
    fn linux_5_10_decimal_reason_and_pasid_ffffffff() {
        let f = parsed("DMAR: [DMA Write] Request device [00:03.0] PASID ffffffff fault addr 123000 [fault reason 05] PTE Write access is not set");
        assert_eq!(
            f.address,
            Some(0x123000),
            "5.10 prints the address without 0x"
        );
        assert_eq!(f.reason_code, Some(5));
        assert_eq!(f.pasid, None, "ffffffff means no PASID");
        assert!(!f.partial);
    }

    // https://github.com/patmagauran/i915ovmfPkg/issues/23
    #[test]
    fn dma_read_with_dmesg_timestamp() {
        let f = parsed("[  144.480641] DMAR: [DMA Read] Request device [00:02.0] PASID ffffffff fault addr 9c000000 [fault reason 06] PTE Read access is not set");
        assert_eq!(f.timestamp_ns, Some(144_480_641_000));
        assert_eq!(f.access, Some(Access::Read));
        assert_eq!(f.address, Some(0x9c00_0000));
        assert_eq!(f.reason_code, Some(6));
    }

    // https://github.com/opencomputeproject/OpenNetworkLinux/pull/897 (4.x, no PASID)
    #[test]
    fn linux_4_x_without_pasid() {
        let f = parsed("[10672.868940] DMAR: [DMA Write] Request device [00:12.0] fault addr 0 [fault reason 05] PTE Write access is not set");
        assert_eq!(f.device.as_deref(), Some("0000:00:12.0"));
        assert_eq!(f.address, Some(0));
        assert_eq!(f.reason_code, Some(5));
    }

    // https://github.com/thesofproject/sof-test/issues/744 ("0x"-prefixed bus/dev)
    #[test]
    fn hex_prefixed_device_and_kernel_tag() {
        let f = parsed("[    0.938401] kernel: DMAR: [DMA Read NO_PASID] Request device [0x00:0x02.0] fault addr 0x70ad5000 [fault reason 0x07] Next page table ptr is invalid");
        assert_eq!(f.device.as_deref(), Some("0000:00:02.0"));
        assert_eq!(f.reason_code, Some(7));
        assert!(f.explanation.contains("kernel/IOMMU-driver bug"));
    }

    // https://github.com/Dasharo/dasharo-issues/issues/641
    #[test]
    fn root_entry_not_present() {
        let f = parsed("[    0.361089] DMAR: [DMA Read NO_PASID] Request device [00:02.0] fault addr 0x7cd80000 [fault reason 0x01] Present bit in root entry is clear");
        assert_eq!(f.reason_code, Some(1));
        assert!(f.explanation.contains("not attached"));
    }

    // https://github.com/tenstorrent/tt-umd/issues/1814 (scalable mode)
    #[test]
    fn scalable_mode_reason() {
        let f = parsed("[ 6611.206544] DMAR: [DMA Read NO_PASID] Request device [03:00.0] fault addr 0x100000 [fault reason 0x71] SM: Present bit in first-level paging entry is clear");
        assert_eq!(f.reason_code, Some(0x71));
        assert_eq!(f.device.as_deref(), Some("0000:03:00.0"));
        assert!(!f.partial);
    }

    // 3.x two-line format, decimal reason 12 = 0x0c:
    // https://lkml.indiana.edu/hypermail/linux/kernel/1302.0/01541.html
    #[test]
    fn linux_3_x_two_line_format() {
        let lines = [
            "[ 1692.021403] dmar: DMAR:[DMA Read] Request device [00:02.0] fault addr 1a45aa9000",
            "[ 1692.021403] DMAR:[fault reason 12] non-zero reserved fields in PTE",
            "[ 1692.021416] dmar: DRHD: handling fault status reg 2",
        ];
        let out = crate::faults::Decoder::decode_all(lines);
        assert_eq!(out.len(), 2, "{out:#?}");
        let f = &out[0];
        assert_eq!(f.reason_code, Some(0x0c));
        assert_eq!(f.reason, "non-zero reserved fields in PTE");
        assert_eq!(f.address, Some(0x1a_45aa_9000));
        assert_eq!(f.device.as_deref(), Some("0000:00:02.0"));
        assert!(!f.partial);
        assert!(out[1].partial, "trailing status line without a record");
    }

    // ISO syslog prefix with the printk bracket lost in the post:
    // https://forums.opensuse.org/t/dmar-errors-with-vt-d-enabled/99909
    #[test]
    fn iso_syslog_prefix() {
        let f = parsed("2014-04-25T09:37:53.595431+01:00 kvmhost kernel:     8.490171] dmar: DMAR:[DMA Read] Request device [01:00.0] fault addr 41a6aa000");
        assert_eq!(f.device.as_deref(), Some("0000:01:00.0"));
        assert_eq!(
            f.wall_time.as_deref(),
            Some("2014-04-25T09:37:53.595431+01:00")
        );
        assert!(f.partial, "reason is on the next line");
    }

    // Rendered from the 6.x format string in dmar_fault_do_one() (no public
    // capture found): checks the INTR-REMAP branch and an out-of-table code.
    #[test]
    fn interrupt_remap_and_unknown_code_is_partial() {
        let f = parsed("DMAR: [INTR-REMAP] Request device [00:1f.0] fault index 0x17 [fault reason 0x25] Blocked a compatibility format interrupt request");
        assert_eq!(f.access, Some(Access::Interrupt));
        assert_eq!(f.reason_code, Some(0x25));
        assert!(!f.partial);
        let f = parsed("DMAR: [DMA Read NO_PASID] Request device [00:02.0] fault addr 0x1000 [fault reason 0x33] Unknown");
        assert!(f.partial, "0x33 is a hole in the SM table");
    }

    // https://github.com/patmagauran/i915ovmfPkg/issues/23
    #[test]
    fn status_and_suppressed_lines() {
        assert_eq!(
            parse_status("DMAR: DRHD: handling fault status reg 3"),
            Some(3)
        );
        assert_eq!(status_flags(3).len(), 2);
        assert!(status_flags(3)[0].starts_with("PFO"));
        let f = parsed("[  144.480629] dmar_fault: 893 callbacks suppressed");
        assert_eq!(f.count, 893);
        assert_eq!(f.flags, vec![crate::faults::SUPPRESSED_FLAG.to_string()]);
        assert!(f.partial);
        assert_eq!(
            parse_line("[  139.513963] DMAR: DRHD: handling fault status reg 3"),
            None
        );
    }
}
