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
//!
//! [`parse_line`] decodes one line without context. Several families print a
//! fault over several lines (AER, SMMUv3 raw dwords, old AMD-Vi and VT-d
//! formats, VT-d rate limiting); [`Decoder`] keeps that context and is what
//! `explain` and the live follower use.

pub mod aer;
pub mod amd;
mod decoder;
pub mod explain;
pub mod kmsg;
pub mod lines;
pub mod smmu;
pub mod tracepoint;
pub mod vtd;
mod vtd_tables;
pub mod xid;

use serde::{Serialize, Serializer};

pub use self::{
    decoder::Decoder,
    explain::{run_explain, ExplainArgs},
    kmsg::KmsgFollower,
};

/// Which subsystem reported the fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Source {
    #[serde(rename = "vtd")]
    Vtd,
    #[serde(rename = "amd-vi")]
    AmdVi,
    #[serde(rename = "smmu")]
    Smmu,
    #[serde(rename = "iommu-tracepoint")]
    IommuTracepoint,
    #[serde(rename = "nvidia-xid")]
    NvidiaXid,
    #[serde(rename = "aer")]
    Aer,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Vtd => "vtd",
            Source::AmdVi => "amd-vi",
            Source::Smmu => "smmu",
            Source::IommuTracepoint => "iommu-tracepoint",
            Source::NvidiaXid => "nvidia-xid",
            Source::Aer => "aer",
        }
    }
}

/// The kind of access that faulted, where the log says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
    Atomic,
    Prefetch,
    Interrupt,
    Exec,
}

/// One decoded fault. Serialized as JSON with stable keys; `address` is a
/// `"0x…"` string so that 64-bit values survive JSON readers that use doubles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub source: Source,
    /// Full PCI id `SSSS:BB:DD.F`. VT-d and old AMD-Vi lines print no PCI
    /// segment: `0000` is assumed there (see `device_raw`).
    pub device: Option<String>,
    /// The device as the line printed it.
    pub device_raw: Option<String>,
    #[serde(serialize_with = "ser_hex_opt")]
    pub address: Option<u64>,
    /// Numeric cause: VT-d fault reason, AMD-Vi event type, SMMU event id,
    /// Xid number, AER status register.
    pub reason_code: Option<u32>,
    /// Short cause text, from the kernel/driver tables.
    pub reason: String,
    pub access: Option<Access>,
    pub pasid: Option<u32>,
    /// Whether the faulting address was mapped at the time; filled by the
    /// live tracer from its map/unmap history, "unknown" offline.
    pub mapping_state: Option<String>,
    /// Kernel monotonic time from the printk timestamp or /dev/kmsg record.
    pub timestamp_ns: Option<u64>,
    /// Wall-clock time text when the input had one (`dmesg -T`, journalctl).
    pub wall_time: Option<String>,
    /// NVIDIA Xid number (source nvidia-xid).
    pub xid: Option<u32>,
    pub pid: Option<u32>,
    pub process: Option<String>,
    /// Decoded flag bits / error bit names (AMD-Vi flags, AER bits, SMMU FSR).
    pub flags: Vec<String>,
    /// How many faults this object stands for (more than 1 for rate-limited
    /// reports that only give a count).
    pub count: u64,
    /// What it means and what to check first.
    pub explanation: String,
    /// The input line(s) this was decoded from.
    pub raw: String,
    /// The line was recognised but not fully decoded (unknown code, missing
    /// field, details suppressed by rate limiting).
    pub partial: bool,
}

impl Fault {
    pub fn new(source: Source, reason: impl Into<String>, raw: &str) -> Self {
        Fault {
            source,
            device: None,
            device_raw: None,
            address: None,
            reason_code: None,
            reason: reason.into(),
            access: None,
            pasid: None,
            mapping_state: None,
            timestamp_ns: None,
            wall_time: None,
            xid: None,
            pid: None,
            process: None,
            flags: Vec::new(),
            count: 1,
            explanation: String::new(),
            raw: raw.to_string(),
            partial: false,
        }
    }

    /// Set `device_raw` and the normalised `device` from text as printed.
    pub fn set_device(&mut self, printed: &str) {
        let printed = printed.trim();
        self.device = normalize_bdf(printed);
        self.device_raw = Some(printed.to_string());
    }
}

fn ser_hex_opt<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(x) => s.serialize_str(&format!("{x:#x}")),
        None => s.serialize_none(),
    }
}

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
}

/// Normalise a printed PCI address to `ssss:bb:dd.f` (lower-case hex).
/// Accepts `bb:dd.f`, `0xbb:0xdd.f`, `ssss:bb:dd.f`, and NVRM's `ssss:bb:dd`
/// (function 0 assumed).
pub fn normalize_bdf(s: &str) -> Option<String> {
    let s = s.trim().trim_start_matches("PCI:");
    let strip = |p: &str| {
        let p = p.trim();
        let p = p
            .strip_prefix("0x")
            .or_else(|| p.strip_prefix("0X"))
            .unwrap_or(p);
        u32::from_str_radix(p, 16).ok()
    };
    let (left, func) = match s.rsplit_once('.') {
        Some((l, f)) => (l, strip(f)?),
        None => (s, 0),
    };
    let parts: Vec<&str> = left.split(':').collect();
    let (seg, bus, dev) = match (parts.len(), s.contains('.')) {
        (2, true) => (0, strip(parts[0])?, strip(parts[1])?),
        (3, _) => (strip(parts[0])?, strip(parts[1])?, strip(parts[2])?),
        _ => return None,
    };
    if seg > 0xffff || bus > 0xff || dev > 0x1f || func > 7 {
        return None;
    }
    Some(format!("{seg:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

/// Parse `0x1f`, `1f` (hex) into u64; underscores (NVIDIA `0x17_00592000`)
/// are ignored.
pub(crate) fn parse_hex(s: &str) -> Option<u64> {
    let s = s.trim().trim_end_matches([',', ']', '.', ';']);
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
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
    fn bdf_normalisation_covers_every_printed_shape() {
        assert_eq!(normalize_bdf("00:03.0").as_deref(), Some("0000:00:03.0"));
        assert_eq!(
            normalize_bdf("0x00:0x02.0").as_deref(),
            Some("0000:00:02.0")
        );
        assert_eq!(
            normalize_bdf("0000:06:00.0").as_deref(),
            Some("0000:06:00.0")
        );
        assert_eq!(
            normalize_bdf("PCI:0008:01:00").as_deref(),
            Some("0008:01:00.0")
        );
        assert_eq!(normalize_bdf("3B:00.1").as_deref(), Some("0000:3b:00.1"));
        assert_eq!(normalize_bdf("garbage"), None);
        assert_eq!(normalize_bdf("00:40.0"), None, "device number > 0x1f");
    }

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
            "mapping_state",
        ] {
            assert!(v.get(key).is_some(), "missing key {key}");
        }
    }

    // https://github.com/openwrt/mt76/issues/1007 (SMMUv2 storm)
    #[test]
    fn suppressed_lines_per_subsystem() {
        let f = parse_line("arm_smmu_context_fault: 83 callbacks suppressed").expect("parsed");
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
