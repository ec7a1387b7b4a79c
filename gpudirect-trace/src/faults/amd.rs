//! AMD-Vi event log entries.
//!
//! Event types: drivers/iommu/amd/amd_iommu_types.h `EVENT_TYPE_*`; flag
//! bits: `EVENT_FLAG_RW` (0x020) and `EVENT_FLAG_I` (0x008) there, the other
//! bits named after the AMD I/O Virtualization Technology (IOMMU)
//! Specification (#48882) IO_PAGE_FAULT event layout, which the kernel prints
//! unshifted as `flags=` (`(event[1] >> EVENT_FLAGS_SHIFT) & EVENT_FLAGS_MASK`).
//!
//! Print formats (`iommu_print_event()`, `amd_iommu_report_page_fault()`,
//! `amd_iommu_report_rmp_fault()` in drivers/iommu/amd/iommu.c):
//! - <= 4.19: `AMD-Vi: Event logged [` and, as a second printk line,
//!   `IO_PAGE_FAULT device=05:00.0 domain=0x0012 address=0x... flags=0x0070]`
//! - 5.x: one line; page faults of a known device through `pci_err()`:
//!   `ath10k_pci 0000:01:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000d address=0x... flags=0x0070]`,
//!   otherwise `AMD-Vi: Event logged [IO_PAGE_FAULT device=05:00.0 domain=... address=... flags=...]`
//! - 5.19+: `device=` carries the PCI segment (`0000:06:00.0`); other events
//!   come from the IOMMU device (`iommu ivhd0: AMD-Vi: Event logged [...]`)
//! - SNP kernels add `RMP_PAGE_FAULT` / `RMP_HW_ERROR` with comma-separated fields.

use super::{field, parse_hex, Access, Fault, Source};

/// `EVENT_TYPE_*` from drivers/iommu/amd/amd_iommu_types.h with the names
/// `iommu_print_event()` logs.
pub const EVENT_TYPES: [(u32, &str, &str); 11] = [
    (0x1, "ILLEGAL_DEV_TABLE_ENTRY", "EVENT_TYPE_ILL_DEV"),
    (0x2, "IO_PAGE_FAULT", "EVENT_TYPE_IO_FAULT"),
    (0x3, "DEV_TAB_HARDWARE_ERROR", "EVENT_TYPE_DEV_TAB_ERR"),
    (0x4, "PAGE_TAB_HARDWARE_ERROR", "EVENT_TYPE_PAGE_TAB_ERR"),
    (0x5, "ILLEGAL_COMMAND_ERROR", "EVENT_TYPE_ILL_CMD"),
    (0x6, "COMMAND_HARDWARE_ERROR", "EVENT_TYPE_CMD_HARD_ERR"),
    (0x7, "IOTLB_INV_TIMEOUT", "EVENT_TYPE_IOTLB_INV_TO"),
    (0x8, "INVALID_DEVICE_REQUEST", "EVENT_TYPE_INV_DEV_REQ"),
    (0x9, "INVALID_PPR_REQUEST", "EVENT_TYPE_INV_PPR_REQ"),
    (0xd, "RMP_PAGE_FAULT", "EVENT_TYPE_RMP_FAULT"),
    (0xe, "RMP_HW_ERROR", "EVENT_TYPE_RMP_HW_ERR"),
];

/// Flag bits as printed in `flags=` (bit, short name, meaning).
pub const EVENT_FLAGS: [(u32, &str, &str); 9] = [
    (0x001, "GN", "guest/PASID request"),
    (0x002, "NX", "no-execute request"),
    (0x004, "US", "user-mode request"),
    (0x008, "I", "interrupt request (EVENT_FLAG_I)"),
    (0x010, "PR", "page-table entry was present"),
    (0x020, "RW", "write (EVENT_FLAG_RW)"),
    (0x040, "PE", "permission error"),
    (
        0x080,
        "RZ",
        "reserved bit set / illegal level in a page-table entry",
    ),
    (0x100, "TR", "ATS translation request"),
];

pub fn decode_flags(flags: u32) -> Vec<String> {
    let mut out: Vec<String> = EVENT_FLAGS
        .iter()
        .filter(|(bit, _, _)| flags & bit != 0)
        .map(|(_, name, what)| format!("{name}: {what}"))
        .collect();
    let ty = (flags >> 9) & 0x7;
    if ty != 0 {
        out.push(format!("TYPE={ty}"));
    }
    out
}

fn event_code(name: &str) -> Option<u32> {
    EVENT_TYPES.iter().find(|e| e.1 == name).map(|e| e.0)
}

fn explain(name: &str, flags: u32) -> String {
    match name {
        "IO_PAGE_FAULT" => {
            let what = if flags & 0x080 != 0 {
                "The page-table walk met a reserved bit or illegal level: IOMMU page tables are \
                 corrupt or were changed under the hardware (kernel bug)."
            } else if flags & 0x010 == 0 {
                "The address is not mapped in the device's IOMMU domain: DMA after unmap/free, \
                 a stale descriptor, or a peer (P2P/GPUDirect) address never mapped for this \
                 device. With P2P under an IOMMU the transfer is dropped and the reader sees \
                 zeros or stale data."
            } else if flags & 0x040 != 0 {
                "The address is mapped but the access is not allowed (e.g. a write to a \
                 read-only/DMA_TO_DEVICE mapping)."
            } else {
                "The IOMMU rejected the translation."
            };
            format!(
                "{what} First checks: mapping_state of the address (live tracer), the driver's \
                 map/unmap order, `iommu=pt` or `amd_iommu=off` only to confirm (they remove the \
                 protection), ACS/P2P routing (`lspci -vvv | grep ACS`)."
            )
        }
        "ILLEGAL_DEV_TABLE_ENTRY" => "The device's Device Table Entry is invalid: the device did \
             DMA while not (or no longer) attached to a domain, e.g. around suspend/resume, reset \
             or driver unbind. Check driver binding and whether it follows resume."
            .to_string(),
        "DEV_TAB_HARDWARE_ERROR" | "PAGE_TAB_HARDWARE_ERROR" | "COMMAND_HARDWARE_ERROR" => {
            "The IOMMU got a hardware error (master abort / target abort / data error) reading \
             its own tables or command buffer in memory: a platform/memory problem or tables \
             placed in bad memory. Check MCE/EDAC logs and firmware."
                .to_string()
        }
        "ILLEGAL_COMMAND_ERROR" => {
            "The IOMMU driver queued a malformed command: a kernel bug.".to_string()
        }
        "IOTLB_INV_TIMEOUT" => "The device did not answer an ATS invalidation in time: a hung \
             device or a broken ATS implementation; unmapping memory for it is stalled."
            .to_string(),
        "INVALID_DEVICE_REQUEST" => "The device issued a request type it is not allowed to \
             (e.g. ATS translation request with ATS disabled, or a special address range access)."
            .to_string(),
        "INVALID_PPR_REQUEST" => "Invalid peripheral page request (PRI/SVA): the device asked \
             for a page fault service it is not set up for."
            .to_string(),
        "RMP_PAGE_FAULT" | "RMP_HW_ERROR" => "SEV-SNP reverse map table check failed for a DMA: \
             the device touched memory owned by a confidential guest (or the RMP check hit a \
             hardware error)."
            .to_string(),
        _ => "AMD-Vi event not in the kernel's table.".to_string(),
    }
}

/// Parse an AMD-Vi line body (one-line formats, and the second line of the old
/// split format when `bracket_body` is passed by the decoder).
pub fn parse(body: &str) -> Option<Fault> {
    let pos = body.find("Event logged [")?;
    if !body.contains("AMD-Vi") {
        return None;
    }
    let inner = body[pos + "Event logged [".len()..].trim();
    if inner.is_empty() {
        // Old split format: details follow on the next line.
        return None;
    }
    let mut f = parse_event(inner, body)?;
    if f.device.is_none() {
        // pci_err(pdev, ...) prefix: "<driver> 0000:01:00.0: AMD-Vi: ..."
        let head = &body[..body.find("AMD-Vi").unwrap_or(0)];
        let dev = head
            .trim()
            .trim_end_matches(':')
            .rsplit(' ')
            .next()
            .unwrap_or("");
        if super::normalize_bdf(dev).is_some() {
            f.set_device(dev);
        }
    }
    Some(f)
}

/// Decode `NAME key=value ...]` (the part inside `Event logged [`).
pub fn parse_event(inner: &str, raw: &str) -> Option<Fault> {
    let name_end = inner.find([' ', ']']).unwrap_or(inner.len());
    let name = &inner[..name_end];
    let mut f = Fault::new(Source::AmdVi, name, raw);
    if name == "Device" {
        // "[Device not attached to domain properly]" (+ a "device=" line)
        f.reason = "Device not attached to domain properly".to_string();
        f.explanation = "A device did DMA while its IOMMU domain is not set up (DMA before \
             attach / after detach). Check driver binding and reset/resume timing."
            .to_string();
        f.partial = true;
        return Some(f);
    }
    if !name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') || name.is_empty() {
        return None;
    }
    if let Some(dev) = field(inner, "device=") {
        f.set_device(dev);
    }
    f.address = field(inner, "address=")
        .or_else(|| field(inner, "gpa="))
        .or_else(|| field(inner, "spa="))
        .and_then(parse_hex);
    let flags = field(inner, "flags=").and_then(parse_hex).map(|v| v as u32);
    if let Some(p) = field(inner, "pasid=").and_then(parse_hex) {
        f.pasid = Some(p as u32);
    }
    if let Some(d) = field(inner, "domain=") {
        f.flags.push(format!("domain={d}"));
    }
    match event_code(name) {
        Some(code) => {
            f.reason_code = Some(code);
            let flags = flags.unwrap_or(0);
            if code == 0x2 || code == 0x1 || code == 0x8 || code == 0x9 {
                f.flags.extend(decode_flags(flags));
                f.access = Some(if flags & 0x008 != 0 {
                    Access::Interrupt
                } else if flags & 0x020 != 0 {
                    Access::Write
                } else {
                    Access::Read
                });
            }
            f.explanation = explain(name, flags);
            if code == 0x2 {
                f.reason = if flags & 0x010 == 0 {
                    "IO_PAGE_FAULT: address not mapped".to_string()
                } else {
                    "IO_PAGE_FAULT: access not permitted".to_string()
                };
            }
            if !inner.contains(']') || (code != 0x5 && code != 0x6 && f.address.is_none()) {
                f.partial = true;
            }
        }
        None => {
            f.partial = true;
            f.explanation = explain(name, 0);
        }
    }
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{parse_line, parsed};

    // https://github.com/Dasharo/dasharo-issues/issues/1134 (pci_err prefix)
    #[test]
    fn page_fault_with_device_prefix() {
        let f = parsed("[   40.182570] ath10k_pci 0000:01:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000d address=0xcff49550 flags=0x0070]");
        assert_eq!(f.source, Source::AmdVi);
        assert_eq!(f.device.as_deref(), Some("0000:01:00.0"));
        assert_eq!(f.address, Some(0xcff4_9550));
        assert_eq!(f.reason_code, Some(2));
        assert_eq!(f.access, Some(Access::Write));
        assert!(f.flags.iter().any(|x| x.starts_with("PE")));
        assert!(f.flags.iter().any(|x| x == "domain=0x000d"));
        assert_eq!(f.reason, "IO_PAGE_FAULT: access not permitted");
        assert!(!f.partial);
    }

    // Quoted in the upstream stable patch "iommu/amd: ... AMDGPU failed to
    // resume" (commit ef75966abf950c0539534effa4960caa29fb7167), journalctl form.
    #[test]
    fn illegal_dev_table_entry_with_segment() {
        let f = parsed("Nov 14 11:52:19 Thinkbook kernel: iommu ivhd0: AMD-Vi: Event logged [ILLEGAL_DEV_TABLE_ENTRY device=0000:06:00.0 pasid=0x00000 address=0x135300000 flags=0x0080]");
        assert_eq!(f.device.as_deref(), Some("0000:06:00.0"));
        assert_eq!(f.reason_code, Some(1));
        assert_eq!(f.address, Some(0x1_3530_0000));
        assert_eq!(f.pasid, Some(0));
        assert_eq!(f.wall_time.as_deref(), Some("Nov 14 11:52:19"));
    }

    #[test]
    fn flags_decode() {
        let d = decode_flags(0x0a00);
        assert_eq!(d, vec!["TYPE=5".to_string()]);
        let d = decode_flags(0x0020);
        assert_eq!(d.len(), 1);
        assert!(d[0].starts_with("RW"));
    }

    #[test]
    fn open_bracket_alone_is_not_a_fault() {
        // https://github.com/pcengines/apu2-documentation/issues/240 (4.9 split format)
        assert_eq!(
            parse_line("kernel: [   13.134460] AMD-Vi: Event logged ["),
            None
        );
    }

    // https://github.com/pcengines/apu2-documentation/issues/240 (4.9 split format)
    #[test]
    fn old_split_format_is_joined() {
        let lines = [
            "kernel: [   13.134460] AMD-Vi: Event logged [",
            "kernel: [   13.137925] INVALID_DEVICE_REQUEST device=00:00.1 address=0x000000fdf8000020 flags=0x0a00]",
            "kernel: [  221.562629] AMD-Vi: Event logged [",
            "kernel: [  221.565929] IO_PAGE_FAULT device=05:00.0 domain=0x0012 address=0x00000000ff6101b0 flags=0x0070]",
        ];
        let out = crate::faults::Decoder::decode_all(lines);
        assert_eq!(out.len(), 2, "{out:#?}");
        assert_eq!(out[0].reason_code, Some(8));
        assert_eq!(out[0].device.as_deref(), Some("0000:00:00.1"));
        assert_eq!(out[0].timestamp_ns, Some(13_134_460_000));
        assert_eq!(out[1].reason_code, Some(2));
        assert_eq!(out[1].address, Some(0xff61_01b0));
        assert!(out[1].flags.contains(&"domain=0x0012".to_string()));
    }

    // Two lines shaped by amd_iommu_report_page_fault()'s format strings
    // (no public capture found): the device comes on the second line.
    #[test]
    fn not_attached_takes_device_from_next_line() {
        let lines = [
            "AMD-Vi: Event logged [Device not attached to domain properly]",
            "AMD-Vi:   device=0000:03:00.0 domain=0x0004",
        ];
        let out = crate::faults::Decoder::decode_all(lines);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].device.as_deref(), Some("0000:03:00.0"));
    }

    #[test]
    fn unknown_event_name_is_partial() {
        let f = parse_event("GUEST_EVENT_FAULT device=0000:01:00.0 address=0x1000]", "x")
            .expect("recognised");
        assert!(f.partial);
        assert_eq!(f.reason_code, None);
    }
}
