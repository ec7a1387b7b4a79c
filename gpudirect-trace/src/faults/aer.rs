//! PCIe Advanced Error Reporting lines (drivers/pci/pcie/aer.c).
//!
//! Bit names: `aer_correctable_error_string[]` and
//! `aer_uncorrectable_error_string[]` in drivers/pci/pcie/aer.c (short names
//! since 4.19, bits 27-31 added in 2025 by "PCI/AER: Support errors
//! introduced by PCIe r6.0"); kernels <= 4.18 print long names ("Receiver
//! Error", "Completion Timeout"), which are matched too.
//!
//! A report is several lines from the same device:
//! - announce (root port): `AER: Corrected error received: 0000:00:1c.1`
//!   (<= 4.16: `id=00e0`; 6.x: `AER: Correctable error message received from 0000:06:00.0`)
//! - `PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)`
//! - `  device [8086:a29a] error status/mask=00000001/00002000`
//! - `   [ 0] RxErr                  (First)` per set bit
//! - `  TLP Header: ...` for uncorrectable errors

use super::{normalize_bdf, parse_hex, Fault, Source};

/// aer.c `aer_correctable_error_string[]` (index = status bit).
pub const CORRECTABLE: [Option<&str>; 16] = [
    Some("RxErr"),
    None,
    None,
    None,
    None,
    None,
    Some("BadTLP"),
    Some("BadDLLP"),
    Some("Rollover"),
    None,
    None,
    None,
    Some("Timeout"),
    Some("NonFatalErr"),
    Some("CorrIntErr"),
    Some("HeaderOF"),
];

/// aer.c `aer_uncorrectable_error_string[]` (index = status bit).
pub const UNCORRECTABLE: [Option<&str>; 32] = [
    Some("Undefined"),
    None,
    None,
    None,
    Some("DLP"),
    Some("SDES"),
    None,
    None,
    None,
    None,
    None,
    None,
    Some("TLP"),
    Some("FCP"),
    Some("CmpltTO"),
    Some("CmpltAbrt"),
    Some("UnxCmplt"),
    Some("RxOF"),
    Some("MalfTLP"),
    Some("ECRC"),
    Some("UnsupReq"),
    Some("ACSViol"),
    Some("UncorrIntErr"),
    Some("BlockedTLP"),
    Some("AtomicOpBlocked"),
    Some("TLPBlockedErr"),
    Some("PoisonTLPBlocked"),
    Some("DMWrReqBlocked"),
    Some("IDECheck"),
    Some("MisIDETLP"),
    Some("PCRC_CHECK"),
    Some("TLPXlatBlocked"),
];

/// enum aer_severity's AER_CORRECTABLE (include/linux/aer.h): the one
/// severity whose status bits are the correctable register's.
pub const CORRECTED: u64 = 2;

/// ras:aer_event severity (enum aer_severity in include/linux/aer.h) as a
/// metric label and JSON key; None for one this tool does not know.
pub fn severity_label(v: u64) -> Option<&'static str> {
    match v {
        0 => Some("nonfatal"),
        1 => Some("fatal"),
        CORRECTED => Some("corrected"),
        _ => None,
    }
}

/// ras:aer_event severity (enum aer_severity in include/linux/aer.h).
pub fn severity_name(v: u64) -> &'static str {
    match v {
        0 => "uncorrected (non-fatal)",
        1 => "uncorrected (fatal)",
        2 => "corrected",
        _ => "unknown-severity",
    }
}

/// Names of the set bits of an AER status register.
pub fn decode_status(status: u32, correctable: bool) -> Vec<String> {
    let table: &[Option<&str>] = if correctable {
        &CORRECTABLE
    } else {
        &UNCORRECTABLE
    };
    (0..32)
        .filter(|b| status & (1 << b) != 0)
        .map(|b| match table.get(b).copied().flatten() {
            Some(n) => n.to_string(),
            None => format!("bit{b}"),
        })
        .collect()
}

/// `<driver> <bdf>: [AER: ]rest` -> (normalised bdf, rest).
pub fn dev_prefix(body: &str) -> Option<(String, &str)> {
    let idx = body.find(": ")?;
    let head = &body[..idx];
    let bdf = head.rsplit(' ').next()?;
    let dev = normalize_bdf(bdf)?;
    if !bdf.contains('.') || bdf.matches(':').count() != 2 {
        return None;
    }
    let rest = &body[idx + 2..];
    let rest = rest.strip_prefix("AER: ").unwrap_or(rest);
    Some((dev, rest))
}

/// A multi-line AER report being assembled.
#[derive(Debug, Clone)]
pub struct AerPending {
    pub fault: Fault,
    pub dev: String,
    severity: String,
    layer: String,
    names_from_lines: bool,
    pub is_announce: bool,
    /// Root port that announced the error, when it is not the device itself.
    pub via: Option<String>,
    /// Lines folded in so far (bounded: a log of endless continuation
    /// lines must not grow one fault without limit).
    lines: usize,
}

/// Continuation lines of one report at most (real ones have 3 to 8: status,
/// bit names, TLP header, "Error of this Agent").
pub const MAX_REPORT_LINES: usize = 64;

fn announce_severity(rest: &str) -> Option<&'static str> {
    let r = rest.trim_start_matches("Multiple ");
    [
        ("Corrected error", "Corrected"),
        ("Correctable error", "Corrected"),
        ("Uncorrected (Non-Fatal)", "Uncorrected (Non-Fatal)"),
        ("Uncorrectable (Non-Fatal)", "Uncorrected (Non-Fatal)"),
        ("Uncorrected (Fatal)", "Uncorrected (Fatal)"),
        ("Uncorrectable (Fatal)", "Uncorrected (Fatal)"),
    ]
    .iter()
    .find(|(p, _)| r.starts_with(p))
    .map(|(_, s)| *s)
    .filter(|_| rest.contains("received"))
}

/// Start a report from an announce or `PCIe Bus Error` line.
pub fn start(body: &str, raw: &str) -> Option<AerPending> {
    let (dev, rest) = dev_prefix(body)?;
    if let Some(p) = rest.find("PCIe Bus Error: severity=") {
        let attrs = &rest[p + "PCIe Bus Error: severity=".len()..];
        let severity = attrs
            .split(", type=")
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        let layer = attrs
            .split(", type=")
            .nth(1)
            .map(|t| t.split(',').next().unwrap_or("").trim().to_string())
            .unwrap_or_default();
        let severity = severity
            .replace("Correctable", "Corrected")
            .replace("Uncorrectable", "Uncorrected");
        let mut fault = Fault::new(Source::Aer, "", raw);
        fault.device = Some(dev.clone());
        fault.device_raw = body
            .split(": ")
            .next()
            .map(|h| h.rsplit(' ').next().unwrap_or(h).to_string());
        return Some(AerPending {
            fault,
            dev,
            severity,
            layer,
            names_from_lines: false,
            is_announce: false,
            via: None,
            lines: 1,
        });
    }
    let severity = announce_severity(rest)?;
    let mut fault = Fault::new(Source::Aer, "", raw);
    // Error source: ": 0000:00:1c.1", "from 0000:06:00.0", or "id=00e0".
    let tail = rest.rsplit([' ', ':']).next().unwrap_or("");
    let src = rest
        .rsplit_once("from ")
        .map(|(_, d)| d.trim().to_string())
        .or_else(|| {
            rest.rsplit_once("received: ")
                .map(|(_, d)| d.trim().to_string())
        })
        .unwrap_or_else(|| tail.to_string());
    if let Some(id) = src.strip_prefix("id=").and_then(parse_hex) {
        // Requester ID: bus << 8 | devfn, same segment as the reporting port.
        let seg = &dev[..4];
        let (bus, devfn) = ((id >> 8) & 0xff, id & 0xff);
        fault.device = Some(format!(
            "{seg}:{bus:02x}:{:02x}.{:x}",
            devfn >> 3,
            devfn & 7
        ));
        fault.device_raw = Some(src.clone());
    } else if normalize_bdf(&src).is_some() {
        fault.set_device(&src);
    } else {
        fault.device = Some(dev.clone());
    }
    if rest.starts_with("Multiple ") {
        fault.flags.push("multiple errors".to_string());
    }
    fault.partial = true;
    Some(AerPending {
        fault,
        dev,
        severity: severity.to_string(),
        layer: String::new(),
        names_from_lines: false,
        is_announce: true,
        via: None,
        lines: 1,
    })
}

impl AerPending {
    /// Fold a continuation line of the same device in; false if it is not one.
    pub fn continue_with(&mut self, body: &str, raw: &str) -> bool {
        if self.is_announce || self.lines >= MAX_REPORT_LINES {
            return false;
        }
        let Some((dev, rest)) = dev_prefix(body) else {
            return false;
        };
        if dev != self.dev {
            return false;
        }
        let t = rest.trim();
        if let Some(p) = t.find("error status/mask=") {
            let sm = &t[p + "error status/mask=".len()..];
            let mut it = sm.split('/');
            let status = it.next().and_then(parse_hex).unwrap_or(0) as u32;
            let mask = it.next().and_then(parse_hex).unwrap_or(0) as u32;
            self.fault.reason_code = Some(status);
            if !self.names_from_lines {
                self.fault.flags = decode_status(status & !mask, self.severity == "Corrected");
            }
        } else if t.starts_with('[')
            && t.find(']')
                .is_some_and(|e| t[1..e].trim().parse::<u32>().is_ok())
        {
            let e = t.find(']').unwrap_or(0);
            let name = t[e + 1..]
                .trim()
                .trim_end_matches("(First)")
                .trim()
                .to_string();
            if !self.names_from_lines {
                self.fault.flags.clear();
                self.names_from_lines = true;
            }
            self.fault.flags.push(name);
        } else if t.starts_with("TLP Header:") || t.starts_with("Error of this Agent") {
        } else {
            return false;
        }
        self.fault.raw.push('\n');
        self.fault.raw.push_str(raw.trim_end());
        self.lines += 1;
        true
    }

    pub fn finish(mut self) -> Fault {
        let names = self.fault.flags.join(", ");
        let kind = if self.layer.is_empty() {
            self.severity.clone()
        } else {
            format!("{} {}", self.severity, self.layer)
        };
        self.fault.reason = if names.is_empty() {
            format!("PCIe {kind} error")
        } else {
            format!("PCIe {kind} error: {names}")
        };
        if !self.is_announce && self.fault.flags.is_empty() {
            self.fault.partial = true;
        }
        self.fault.explanation = explain(&self.severity, &self.fault.flags);
        if let Some(via) = self.via {
            self.fault.flags.push(format!("reported via {via}"));
        }
        self.fault
    }
}

fn explain(severity: &str, names: &[String]) -> String {
    let base = match severity {
        "Corrected" => {
            "Corrected by the link hardware (retried), data intact. A steady stream \
             means a marginal link: riser/cable/retimer, signal integrity, ASPM. Watch the rate, \
             check link speed/width (`lspci -vv` LnkSta vs LnkCap) and whether it precedes device \
             drops (Xid 79)."
        }
        "Uncorrected (Non-Fatal)" => {
            "A transaction was lost but the link stays up: the device \
             or driver sees an error or a hang."
        }
        "Uncorrected (Fatal)" => {
            "The link is no longer reliable: the kernel resets it (AER \
             recovery) and the device may disappear (for an NVIDIA GPU: Xid 79)."
        }
        _ => "PCIe error reported through AER.",
    };
    let has = |a: &str, b: &str| names.iter().any(|n| n.contains(a) || n.contains(b));
    let mut s = base.to_string();
    if has("CmpltTO", "Completion Timeout") {
        s.push_str(
            " Completion Timeout: a read got no answer (device hung, fell off the bus, or \
             a P2P read routed where nothing answers).",
        );
    }
    if has("UnsupReq", "Unsupported Request") {
        s.push_str(
            " Unsupported Request: a request hit an address nothing claims, e.g. P2P to a \
             BAR through a root port that does not route peer traffic.",
        );
    }
    if has("ACSViol", "ACS Violation") {
        s.push_str(
            " ACS Violation: a peer-to-peer request was blocked by Access Control Services \
             (GPUDirect P2P/RDMA with ACS redirect/blocking on the path; `lspci -vvv | grep ACS`).",
        );
    }
    if has("SDES", "Surprise Down") {
        s.push_str(" Surprise Down: the link went down (power, seating, hot reset, device crash).");
    }
    if has("MalfTLP", "Malformed TLP") {
        s.push_str(" Malformed TLP: check Max Payload Size consistency along the path.");
    }
    s
}

/// Stateless parse for single lines (announce or header line alone).
pub fn parse(body: &str) -> Option<Fault> {
    start(body, body).map(AerPending::finish)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Decoder;

    fn decode(lines: &[&str]) -> Vec<Fault> {
        Decoder::decode_all(lines.iter().copied())
    }

    // https://github.com/archfan/coreboot/issues/2 (4.19+ format)
    #[test]
    fn corrected_data_link_timeout() {
        let out = decode(&[
            "[   51.871339] pcieport 0000:00:1c.1: AER: Corrected error received: 0000:00:1c.1",
            "[   51.871356] pcieport 0000:00:1c.1: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)",
            "[   51.871357] pcieport 0000:00:1c.1:   device [8086:8c12] error status/mask=00001000/00002000",
            "[   51.871359] pcieport 0000:00:1c.1:    [12] Timeout               ",
        ]);
        assert_eq!(out.len(), 1, "announce merged into the report: {out:#?}");
        let f = &out[0];
        assert_eq!(f.source, Source::Aer);
        assert_eq!(f.device.as_deref(), Some("0000:00:1c.1"));
        assert_eq!(f.reason_code, Some(0x1000));
        assert_eq!(f.flags, vec!["Timeout".to_string()]);
        assert_eq!(f.reason, "PCIe Corrected Data Link Layer error: Timeout");
        assert!(!f.partial);
        assert_eq!(f.timestamp_ns, Some(51_871_356_000));
    }

    // https://github.com/geerlingguy/raspberry-pi-pcie-devices/issues/64 (old long names, id=)
    #[test]
    fn old_format_long_names() {
        let out = decode(&[
            "[    3.499123] pcieport 0000:00:1d.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, id=00e8(Receiver ID)",
            "[    3.499124] pcieport 0000:00:1d.0:   device [8086:a29a] error status/mask=00000001/00002000",
            "[    3.499125] pcieport 0000:00:1d.0:    [ 0] Receiver Error        ",
            "[    3.499148] pcieport 0000:00:1d.0: AER: Multiple Corrected error received: id=00e8",
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].flags, vec!["Receiver Error".to_string()]);
        assert_eq!(
            out[1].device.as_deref(),
            Some("0000:00:1d.0"),
            "id=00e8 -> 00:1d.0"
        );
        assert!(out[1].partial, "announce without details");
    }

    // https://github.com/Dasharo/coreboot/pull/815 (dmesg -T, 6.x "message received from")
    #[test]
    fn dmesg_t_endpoint_multiple_bits() {
        let out = decode(&[
            "[Fri Aug 29 20:09:52 2025] ath10k_pci 0000:06:00.0: PCIe Bus Error: severity=Correctable, type=Physical Layer, (Receiver ID)",
            "[Fri Aug 29 20:09:52 2025] ath10k_pci 0000:06:00.0:   device [168c:003e] error status/mask=000000c1/00006000",
            "[Fri Aug 29 20:09:52 2025] ath10k_pci 0000:06:00.0:    [ 0] RxErr                  (First)",
            "[Fri Aug 29 20:09:52 2025] ath10k_pci 0000:06:00.0:    [ 6] BadTLP                ",
            "[Fri Aug 29 20:09:52 2025] ath10k_pci 0000:06:00.0:    [ 7] BadDLLP               ",
            "[Fri Aug 29 20:09:52 2025] pcieport 0000:00:1d.3: AER: Correctable error message received from 0000:06:00.0",
        ]);
        assert_eq!(out[0].flags, vec!["RxErr", "BadTLP", "BadDLLP"]);
        assert_eq!(
            out[0].wall_time.as_deref(),
            Some("Fri Aug 29 20:09:52 2025")
        );
        assert_eq!(out[1].device.as_deref(), Some("0000:06:00.0"));
    }

    // https://access.redhat.com/solutions/7128107 (uncorrectable fatal, journal prefix)
    #[test]
    fn uncorrectable_fatal_surprise_down() {
        let out = decode(&[
            "kernel: pcieport 0000:00:1b.2: AER: Uncorrectable (Fatal) error message received from 0000:03:04.0",
            "kernel: pcieport 0000:03:04.0: PCIe Bus Error: severity=Uncorrectable (Fatal), type=Transaction Layer, (Receiver ID)",
            "kernel: pcieport 0000:03:04.0:   device [111d:8063] error status/mask=00000020/00000000",
            "kernel: pcieport 0000:03:04.0:    [ 5] SDES                   (First)",
            "kernel: pci 0000:05:00.0: AER: can't recover (no error_detected callback)",
        ]);
        assert_eq!(out.len(), 1);
        let f = &out[0];
        assert_eq!(f.device.as_deref(), Some("0000:03:04.0"));
        assert!(f
            .reason
            .starts_with("PCIe Uncorrected (Fatal) Transaction Layer error: SDES"));
        assert!(f.explanation.contains("Surprise Down"));
    }

    // https://github.com/endlessm/linux/pull/548 (device line with "AER:" tag)
    #[test]
    fn status_decoded_when_no_bit_lines() {
        let out = decode(&[
            "alx 0000:07:00.0: AER: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Receiver ID)",
            "alx 0000:07:00.0: AER:   device [1969:e0b1] error status/mask=00000040/00002000",
        ]);
        assert_eq!(out[0].flags, vec!["BadTLP".to_string()]);
    }

    #[test]
    fn bit_tables() {
        assert_eq!(decode_status(0x1, true), vec!["RxErr"]);
        assert_eq!(decode_status(1 << 21, false), vec!["ACSViol"]);
        assert_eq!(decode_status(1 << 31, false), vec!["TLPXlatBlocked"]);
        assert_eq!(decode_status(1 << 1, true), vec!["bit1"]);
    }
}
