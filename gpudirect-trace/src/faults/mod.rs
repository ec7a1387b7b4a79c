//! Fault decoding: turns kernel log lines about DMA/IOMMU/GPU/PCIe faults into
//! one [`Fault`] object that the rest of the tool (explain, live, reports)
//! shares.
//!
//! Families (one submodule each, with the decoding tables taken from the
//! kernel and driver sources, cited where they are defined):
//! - [`vtd`]: Intel VT-d DMA and interrupt-remapping faults (`DMAR: ...`)
//! - [`amd`]: AMD-Vi event log entries (`AMD-Vi: Event logged [...]`)
//! - [`smmu`]: ARM SMMUv3 event queue records and SMMUv2 context faults
//! - [`xid`]: NVIDIA driver Xid reports (`NVRM: Xid (PCI:...): N, ...`)
//! - [`aer`]: PCIe Advanced Error Reporting (`AER: ...`, `PCIe Bus Error`)
//! - [`virtio`]: virtio-iommu faults (`page fault from EP N at ADDR`)
//!
//! [`parse_line`] decodes one line without context. Several families print a
//! fault over several lines (AER, SMMUv3 raw dwords, old AMD-Vi and VT-d
//! formats, VT-d rate limiting); [`Decoder`] keeps that context and is what
//! `explain` and the live follower use.

pub mod aer;
pub mod amd;
mod decoder;
pub mod explain;
mod journal_json;
pub mod kmsg;
pub mod lines;
pub mod smmu;
pub mod tracepoint;
pub mod virtio;
pub mod vtd;
mod vtd_tables;
pub mod xid;

pub use self::{
    decoder::Decoder,
    explain::{run_explain, ExplainOptions},
    kmsg::KmsgFollower,
};
pub use crate::model::{pci::normalize_bdf, Access, Fault, Source};

/// Decode one log line (any supported prefix shape) without context.
/// Returns `None` for lines that are not about faults.
pub fn parse_line(line: &str) -> Option<Fault> {
    let meta = kmsg::split_prefix(line);
    let mut fault = parse_body(meta.body)?;
    fault.timestamp_ns = meta.timestamp_ns;
    fault.wall_time = meta.wall_time;
    fault.raw = line.trim_end().to_string();
    Some(fault)
}

/// The fault of a line a test knows is one.
#[cfg(test)]
pub(crate) fn parsed(line: &str) -> Fault {
    parse_line(line).expect("parsed")
}

/// Flag carried by the faults that stand for messages the kernel suppressed.
pub const SUPPRESSED_FLAG: &str = "suppressed by printk rate limiting";

/// `<function>: N callbacks suppressed` from the fault handlers' printk
/// rate limits (`___ratelimit()` in lib/ratelimit.c names the function).
fn parse_suppressed(body: &str) -> Option<Fault> {
    let (func, rest) = body.trim().split_once(": ")?;
    let (n, tail) = rest.split_once(' ')?;
    if !tail.starts_with("callbacks suppressed") {
        return None;
    }
    let n: u64 = n.parse().ok()?;
    let (source, what) = match func {
        "dmar_fault" => (
            Source::Vtd,
            "The VT-d fault handler rate-limits its messages and clears fault records it does \
             not print: faults happened that no line describes. The count includes suppressed \
             'handling fault status reg' lines, so it is an upper bound on the faults lost.",
        ),
        f if f.starts_with("arm_smmu") => (
            Source::Smmu,
            "The SMMU fault handler rate-limited its messages: more faults happened than printed.",
        ),
        f if f.starts_with("amd_iommu") || f == "iommu_print_event" => (
            Source::AmdVi,
            "The AMD-Vi event reporting rate-limited its messages: more events than printed.",
        ),
        "viommu_fault_handler" => (
            Source::VirtioIommu,
            "The virtio-iommu fault handler rate-limited its messages: more faults than \
             printed (qemu reports one per 4-byte access of a DMA).",
        ),
        _ => return None,
    };
    let mut f = Fault::new(
        source,
        format!("{n} fault messages suppressed by printk rate limiting ({func})"),
        body,
    );
    f.count = n;
    f.partial = true;
    f.flags.push(SUPPRESSED_FLAG.to_string());
    f.explanation = format!(
        "{what} A fault storm usually means a device keeps DMA-ing to one bad address: look at \
         the faults printed just before."
    );
    Some(f)
}

/// Decode the message part of a line (after timestamps/host prefixes).
pub(crate) fn parse_body(body: &str) -> Option<Fault> {
    parse_suppressed(body)
        .or_else(|| vtd::parse(body))
        .or_else(|| amd::parse(body))
        .or_else(|| xid::parse(body))
        .or_else(|| smmu::parse(body))
        .or_else(|| aer::parse(body))
        .or_else(|| tracepoint::parse(body))
        .or_else(|| virtio::parse(body))
}

/// Parse `0x1f`, `1f` (hex) into u64; underscores (NVIDIA `0x17_00592000`)
/// are ignored.
pub(crate) fn parse_hex(s: &str) -> Option<u64> {
    let s = s.trim().trim_end_matches([',', ']', '.', ';']);
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    // Most numbers have no `_`: read them in place (the importer reads
    // two or three a line, millions of lines).
    if !s.contains('_') {
        return u64::from_str_radix(s, 16).ok();
    }
    let cleaned: String = s.chars().filter(|c| *c != '_').collect();
    if cleaned.is_empty() {
        return None;
    }
    u64::from_str_radix(&cleaned, 16).ok()
}

/// Value of `key=` in `text`, up to the next space, comma or `]`.
pub(crate) fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let mut from = 0;
    while let Some(pos) = text[from..].find(key) {
        let at = from + pos;
        // Only match at a word boundary: "pasid=" must not match "xpasid=".
        let ok = at == 0 || !text.as_bytes()[at - 1].is_ascii_alphanumeric();
        if ok {
            let rest = &text[at + key.len()..];
            let end = rest.find([' ', ',', ']']).unwrap_or(rest.len());
            return Some(&rest[..end]);
        }
        from = at + key.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_serializes_as_hex_string() {
        let mut f = Fault::new(Source::Vtd, "x", "raw");
        f.address = Some(0x123000);
        let v = serde_json::to_value(&f).expect("serialize");
        assert_eq!(v["address"], "0x123000");
        assert_eq!(v["source"], "vtd");
        for key in [
            "source",
            "device",
            "address",
            "reason_code",
            "reason",
            "access",
            "mapping",
            "process",
        ] {
            assert!(v.get(key).is_some(), "missing key {key}");
        }
    }

    // https://github.com/openwrt/mt76/issues/1007 (SMMUv2 storm)
    #[test]
    fn suppressed_lines_per_subsystem() {
        let f = parsed("arm_smmu_context_fault: 83 callbacks suppressed");
        assert_eq!(f.source, Source::Smmu);
        assert_eq!(f.count, 83);
        assert!(f.partial);
        assert_eq!(parse_line("ratelimit: 3 callbacks suppressed"), None);
        assert_eq!(parse_line("dmar_fault: x callbacks suppressed"), None);
    }

    #[test]
    fn hex_and_field_helpers() {
        assert_eq!(parse_hex("0x17_00592000"), Some(0x17_0059_2000));
        assert_eq!(parse_hex("123000"), Some(0x123000));
        assert_eq!(parse_hex(""), None);
        assert_eq!(field("a=1 pasid=0x5 b", "pasid="), Some("0x5"));
        assert_eq!(field("xpasid=1", "pasid="), None);
    }
}
