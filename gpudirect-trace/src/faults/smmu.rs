//! ARM SMMU faults.
//!
//! SMMUv3 (drivers/iommu/arm/arm-smmu-v3/arm-smmu-v3.{c,h}): event ids
//! `EVT_ID_*` and `event_str[]`; the names of the ids the kernel does not
//! name come from the SMMUv3 architecture specification (IHI 0070) event
//! record list. Print formats:
//! - all versions: `arm-smmu-v3 <dev>: event 0x10 received:` then the four
//!   raw 64-bit dwords, one per line (`\t0x%016llx`);
//! - newer kernels (`arm_smmu_dump_event()`, 2025): then
//!   `event: F_TRANSLATION client: 0000:01:00.0 sid: 0x100 ssid: 0x0 iova: 0x... ipa: 0x0`
//!   and `unpriv data read s1 "Input address caused fault" stag: 0x0`.
//!
//! Raw dword layout (arm-smmu-v3.h): dword0 bits 7:0 = event id, bits 63:32 =
//! StreamID, bit 11 SSV, bits 31:12 SubstreamID; dword1 bit 35 RnW (1 = read);
//! dword2 = input address.
//!
//! SMMUv2 (drivers/iommu/arm/arm-smmu/arm-smmu.c): one line
//! `Unhandled context fault: fsr=0x402, iova=0x..., fsynr=0x..., cbfrsynra=0x..., cb=7`
//! with `ARM_SMMU_CB_FSR_*` bits from arm-smmu.h and FSYNR0.WNR = bit 4.

use super::{field, parse_hex, Access, Fault, Source};

/// SMMUv3 event ids: (id, name, meaning).
pub const EVENTS: [(u32, &str, &str); 20] = [
    (0x01, "F_UUT", "unsupported upstream transaction"),
    (
        0x02,
        "C_BAD_STREAMID",
        "StreamID out of range of the stream table: device not known to the SMMU",
    ),
    (
        0x03,
        "F_STE_FETCH",
        "external abort fetching the stream table entry",
    ),
    (
        0x04,
        "C_BAD_STE",
        "invalid stream table entry: device not (or badly) attached",
    ),
    (
        0x05,
        "F_BAD_ATS_TREQ",
        "ATS translation request not allowed",
    ),
    (
        0x06,
        "F_STREAM_DISABLED",
        "the device's stream is disabled (no domain attached)",
    ),
    (
        0x07,
        "F_TRANSL_FORBIDDEN",
        "translated (ATS) transaction forbidden for this stream",
    ),
    (
        0x08,
        "C_BAD_SUBSTREAMID",
        "SubstreamID (PASID) out of range or not valid",
    ),
    (
        0x09,
        "F_CD_FETCH",
        "external abort fetching the context descriptor",
    ),
    (0x0a, "C_BAD_CD", "invalid context descriptor"),
    (
        0x0b,
        "F_WALK_EABT",
        "external abort during the page-table walk",
    ),
    (
        0x10,
        "F_TRANSLATION",
        "translation fault: the address is not mapped",
    ),
    (
        0x11,
        "F_ADDR_SIZE",
        "address size fault: address beyond the configured range",
    ),
    (0x12, "F_ACCESS", "access flag fault"),
    (
        0x13,
        "F_PERMISSION",
        "permission fault: mapped, but this access is not allowed",
    ),
    (0x20, "F_TLB_CONFLICT", "TLB conflict"),
    (0x21, "F_CFG_CONFLICT", "configuration cache conflict"),
    (0x24, "E_PAGE_REQUEST", "page request (PRI) hint"),
    (0x25, "F_VMS_FETCH", "external abort fetching the VMS"),
    (0x00, "UNKNOWN", "event id not named by the kernel"),
];

/// ARM_SMMU_CB_FSR_* (arm-smmu.h) for SMMUv2 context faults.
pub const FSR_BITS: [(u32, &str); 10] = [
    (1 << 1, "TF: translation fault"),
    (1 << 2, "AFF: access flag fault"),
    (1 << 3, "PF: permission fault"),
    (1 << 4, "EF: external fault"),
    (1 << 5, "TLBMCF: TLB multi-hit"),
    (1 << 6, "TLBLKF: TLB lock fault"),
    (1 << 7, "ASF: address size fault"),
    (1 << 8, "UUT: unsupported upstream transaction"),
    (1 << 30, "SS: stalled"),
    (1 << 31, "MULTI: multiple faults"),
];

pub fn event(id: u32) -> Option<(&'static str, &'static str)> {
    EVENTS
        .iter()
        .find(|e| e.0 == id && e.0 != 0)
        .map(|e| (e.1, e.2))
}

fn event_by_name(name: &str) -> Option<u32> {
    EVENTS.iter().find(|e| e.1 == name && e.0 != 0).map(|e| e.0)
}

fn explain(id: u32) -> String {
    match id {
        0x10..=0x13 => "The device accessed an IOVA that its SMMU context does not \
             map (or maps without this permission): DMA after unmap/free, a stale descriptor, or a \
             peer address not mapped for this device. First checks: mapping_state of the address, \
             the client device and StreamID in the event, the driver's map/unmap order."
            .to_string(),
        0x02 | 0x04 | 0x06 => "The SMMU has no valid configuration for this StreamID: the device \
             did DMA while not attached to a domain (before probe, after unbind, firmware DMA) or the \
             IORT/device-tree StreamID mapping is wrong."
            .to_string(),
        0x03 | 0x09 | 0x0b | 0x25 => "The SMMU got an external abort reading its own tables: \
             platform/memory problem or tables in inaccessible memory."
            .to_string(),
        _ => "SMMU event; see the event name and the SMMUv3 specification's event record list."
            .to_string(),
    }
}

/// Split `arm-smmu-v3 <dev>: rest` into (prefix incl. colon, rest).
pub fn smmu_prefix(body: &str) -> Option<(&str, &str)> {
    if !body.starts_with("arm-smmu") {
        return None;
    }
    let idx = body.find(": ")?;
    Some((&body[..idx + 1], body[idx + 2..].trim()))
}

pub fn parse(body: &str) -> Option<Fault> {
    let (_, rest) = smmu_prefix(body)?;
    if let Some(id_txt) = rest
        .strip_prefix("event ")
        .and_then(|r| r.strip_suffix(" received:"))
    {
        let id = parse_hex(id_txt)? as u32;
        let mut f = Fault::new(Source::Smmu, "", body);
        f.reason_code = Some(id);
        match event(id) {
            Some((name, what)) => f.reason = format!("{name}: {what}"),
            None => {
                f.reason = format!("SMMU event {id:#04x}");
                f.partial = true;
            }
        }
        f.explanation = explain(id);
        return Some(f);
    }
    if let Some(ev) = rest.strip_prefix("event: ") {
        // Decoded line (newer kernels) on its own.
        let mut f = Fault::new(Source::Smmu, "", body);
        apply_decoded(&mut f, ev);
        return Some(f);
    }
    if let Some(ctx) = rest.strip_prefix("Unhandled context fault: ") {
        return Some(context_fault(ctx, body));
    }
    None
}

fn apply_decoded(f: &mut Fault, ev: &str) {
    let name = ev.split_whitespace().next().unwrap_or("");
    if let Some(id) = event_by_name(name) {
        f.reason_code = Some(id);
        if let Some((n, what)) = event(id) {
            f.reason = format!("{n}: {what}");
        }
        f.explanation = explain(id);
    } else if f.reason.is_empty() {
        f.reason = name.to_string();
        f.partial = true;
    }
    if let Some(client) = field(ev, "client: ").or_else(|| {
        let p = ev.find("client: ")?;
        ev[p + 8..].split_whitespace().next()
    }) {
        if super::normalize_bdf(client).is_some() {
            f.set_device(client);
        }
    }
    let word = |key: &str| {
        let p = ev.find(key)?;
        ev[p + key.len()..]
            .split_whitespace()
            .next()
            .and_then(parse_hex)
    };
    if let Some(iova) = word("iova: ") {
        f.address = Some(iova);
    }
    if let Some(ssid) = word("ssid: ") {
        // IOMMU_NO_PASID is 0: only report real PASIDs.
        if ssid != 0 {
            f.pasid = Some(ssid as u32);
        }
    }
    if let Some(sid) = word(" sid: ").or_else(|| word("sid: ")) {
        push_unique(f, format!("sid={sid:#x}"));
    }
}

fn push_unique(f: &mut Fault, s: String) {
    if !f.flags.contains(&s) {
        f.flags.push(s);
    }
}

/// Apply a continuation line (raw dword, decoded event line, access line) to a
/// pending SMMUv3 event. `dword` counts raw dwords seen. Returns false when
/// the line is not a continuation.
pub fn apply_continuation(f: &mut Fault, rest: &str, dword: &mut usize) -> bool {
    let rest = rest.trim();
    if let Some(ev) = rest.strip_prefix("event: ") {
        apply_decoded(f, ev);
        return true;
    }
    if rest.starts_with("priv ") || rest.starts_with("unpriv ") {
        let mut words = rest.split_whitespace().skip(2);
        match words.next() {
            Some("read") => f.access = Some(Access::Read),
            Some("write") => f.access = Some(Access::Write),
            _ => {}
        }
        return true;
    }
    if rest.starts_with("0x") && rest.len() == 18 && *dword < 4 {
        let Some(v) = parse_hex(rest) else {
            return false;
        };
        match *dword {
            0 => push_unique(f, format!("sid={:#x}", v >> 32)),
            1 => {
                if matches!(f.reason_code, Some(0x10..=0x13)) {
                    f.access = Some(if v & (1 << 35) != 0 {
                        Access::Read
                    } else {
                        Access::Write
                    });
                }
            }
            2 if f.address.is_none() && matches!(f.reason_code, Some(0x10..=0x13)) => {
                f.address = Some(v);
            }
            _ => {}
        }
        *dword += 1;
        return true;
    }
    false
}

fn context_fault(ctx: &str, raw: &str) -> Fault {
    let mut f = Fault::new(Source::Smmu, "SMMUv2 context fault", raw);
    let fsr = field(ctx, "fsr=").and_then(parse_hex).unwrap_or(0) as u32;
    f.address = field(ctx, "iova=").and_then(parse_hex);
    f.reason_code = Some(fsr);
    for (bit, name) in FSR_BITS.iter() {
        if fsr & bit != 0 {
            f.flags.push(name.to_string());
        }
    }
    if let Some(s) = field(ctx, "cbfrsynra=") {
        f.flags.push(format!("sid={s}"));
    }
    if let Some(fsynr) = field(ctx, "fsynr=").and_then(parse_hex) {
        f.access = Some(if fsynr & (1 << 4) != 0 {
            Access::Write
        } else {
            Access::Read
        });
    }
    let id = if fsr & (1 << 3) != 0 { 0x13 } else { 0x10 };
    f.reason = if fsr & (1 << 3) != 0 {
        "SMMUv2 context fault: permission fault".to_string()
    } else if fsr & (1 << 1) != 0 {
        "SMMUv2 context fault: translation fault".to_string()
    } else {
        format!("SMMUv2 context fault: fsr={fsr:#x}")
    };
    f.explanation = explain(id);
    if f.address.is_none() {
        f.partial = true;
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{parsed, Decoder};

    // https://github.com/radxa-pkg/edk2-cix/issues/24 (vendor tag, raw dwords)
    #[test]
    fn v3_event_with_raw_dwords() {
        let lines = [
            "[    7.471032] [pid:134,cpu0,irq/13-arm-smmu]arm-smmu-v3 arm-smmu-v3.0.auto: event 0x07 received:",
            "[    7.471040] [pid:134,cpu0,irq/13-arm-smmu]arm-smmu-v3 arm-smmu-v3.0.auto:    0x0000010000000007",
            "[    7.471043] [pid:134,cpu0,irq/13-arm-smmu]arm-smmu-v3 arm-smmu-v3.0.auto:    0x0000000000000000",
            "[    7.471045] [pid:134,cpu0,irq/13-arm-smmu]arm-smmu-v3 arm-smmu-v3.0.auto:    0x0000000000000000",
            "[    7.471047] [pid:134,cpu0,irq/13-arm-smmu]arm-smmu-v3 arm-smmu-v3.0.auto:    0x0000000000000000",
            "[    7.480087] [pid:134,cpu0,irq/13-arm-smmu]arm-smmu-v3 arm-smmu-v3.0.auto: event 0x07 received:",
        ];
        let single = parsed(lines[0]);
        assert_eq!(single.reason_code, Some(7));
        assert!(single.reason.starts_with("F_TRANSL_FORBIDDEN"));
        let out = Decoder::decode_all(lines);
        assert_eq!(out.len(), 2, "two events, raw dword lines folded in");
        assert!(out[0].flags.contains(&"sid=0x100".to_string()));
        assert_eq!(out[0].timestamp_ns, Some(7_471_032_000));
        assert!(out[0].raw.contains("0x0000010000000007"));
    }

    // https://github.com/sm7150-mainline/linux/issues/61 (SMMUv2)
    #[test]
    fn v2_context_fault() {
        let f = parsed("[    0.561287] arm-smmu 15000000.iommu: Unhandled context fault: fsr=0x402, iova=0x9c4b9000, fsynr=0x7c0020, cbfrsynra=0x800, cb=7");
        assert_eq!(f.source, Source::Smmu);
        assert_eq!(f.address, Some(0x9c4b_9000));
        assert_eq!(f.access, Some(Access::Read));
        assert!(f.flags.iter().any(|x| x.starts_with("TF")));
        assert!(f.flags.contains(&"sid=0x800".to_string()));
        assert_eq!(f.reason, "SMMUv2 context fault: translation fault");
    }

    #[test]
    fn table_covers_kernel_event_str() {
        for (id, name) in [
            (0x02, "C_BAD_STREAMID"),
            (0x03, "F_STE_FETCH"),
            (0x04, "C_BAD_STE"),
            (0x06, "F_STREAM_DISABLED"),
            (0x08, "C_BAD_SUBSTREAMID"),
            (0x09, "F_CD_FETCH"),
            (0x0a, "C_BAD_CD"),
            (0x10, "F_TRANSLATION"),
            (0x11, "F_ADDR_SIZE"),
            (0x12, "F_ACCESS"),
            (0x13, "F_PERMISSION"),
            (0x25, "F_VMS_FETCH"),
        ] {
            assert_eq!(event(id).map(|e| e.0), Some(name));
        }
        assert_eq!(event(0x0c), None);
    }

    #[test]
    fn decoded_line_fills_pending_event() {
        // The decoded lines of newer kernels, shaped by arm_smmu_dump_event()'s format
        // strings (no public capture found), fed after an event header.
        let mut f = Fault::new(Source::Smmu, "", "x");
        f.reason_code = Some(0x10);
        let mut n = 0;
        assert!(apply_continuation(
            &mut f,
            "event: F_TRANSLATION client: 0000:01:00.0 sid: 0x100 ssid: 0x0 iova: 0x8000 ipa: 0x0",
            &mut n
        ));
        assert!(apply_continuation(
            &mut f,
            "unpriv data write s1 \"Input address caused fault\" stag: 0x0",
            &mut n
        ));
        assert_eq!(f.device.as_deref(), Some("0000:01:00.0"));
        assert_eq!(f.address, Some(0x8000));
        assert_eq!(f.access, Some(Access::Write));
        assert_eq!(f.pasid, None);
        assert!(!apply_continuation(&mut f, "something else", &mut n));
    }
}
