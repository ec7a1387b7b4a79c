//! A device's AER errors from ras:aer_event: counts by severity and by
//! status bit, and the last TLP header the kernel logged. The tracepoint
//! fires once per error the AER driver handles, before aer_print_error()
//! and its ratelimit, so these counts stay exact when the kernel log says
//! "N callbacks suppressed". A status register with several bits set counts
//! once per bit and once in its severity.

use std::collections::BTreeMap;

use gpudirect_trace_common::{pcie, Event};
use serde::Serialize;

use crate::faults::aer;

/// A device's AER errors.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AerCounts {
    pub corrected: u64,
    pub nonfatal: u64,
    pub fatal: u64,
    /// Reports whose severity the tool does not know (a newer kernel).
    #[serde(skip_serializing_if = "is_zero")]
    pub unknown: u64,
    /// `"<severity>:<bit>"` -> reports with that bit set, e.g.
    /// `"corrected:RxErr"`.
    pub errors: BTreeMap<String, u64>,
    /// The last error's TLP header log (4 dwords, hex), where the kernel
    /// said it was valid (uncorrected errors of a request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_tlp_header: Option<String>,
    /// Of these errors, how many the kernel log showed (`AER:` lines
    /// decoded): fewer where it rate-limits them (7.x: a few per device
    /// every 5 s) or lost them; 0 where the log is not followed.
    pub logged: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl AerCounts {
    /// The count of reports of severity `label` (`aer::severity_label`;
    /// None: unknown).
    fn reports(&mut self, label: Option<&str>) -> &mut u64 {
        match label {
            Some("corrected") => &mut self.corrected,
            Some("nonfatal") => &mut self.nonfatal,
            Some("fatal") => &mut self.fatal,
            _ => &mut self.unknown,
        }
    }

    pub fn total(&self) -> u64 {
        self.corrected + self.nonfatal + self.fatal + self.unknown
    }

    /// `3 corrected (RxErr 2, BadTLP 1), 1 fatal (CmpltTO 1)`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for (sev, n) in [
            ("corrected", self.corrected),
            ("nonfatal", self.nonfatal),
            ("fatal", self.fatal),
            ("unknown", self.unknown),
        ] {
            if n == 0 {
                continue;
            }
            let prefix = format!("{sev}:");
            let bits: Vec<String> = self
                .errors
                .iter()
                .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|b| format!("{b} {v}")))
                .collect();
            if bits.is_empty() {
                parts.push(format!("{n} {sev}"));
            } else {
                parts.push(format!("{n} {sev} ({})", bits.join(", ")));
            }
        }
        let mut s = parts.join(", ");
        let total = self.total();
        if self.logged > 0 && self.logged < total {
            s.push_str(&format!(
                "; the kernel log showed {} of them ({} not logged: rate-limited or lost)",
                self.logged,
                total - self.logged
            ));
        }
        s
    }
}

impl AerCounts {
    /// Reports by severity label (`gpudirect_pcie_aer_reports_total`).
    pub fn by_severity(&self) -> [(&'static str, u64); 4] {
        [
            ("corrected", self.corrected),
            ("nonfatal", self.nonfatal),
            ("fatal", self.fatal),
            ("unknown", self.unknown),
        ]
    }

    /// A `kind::AER` record.
    pub fn record(&mut self, ev: &Event) {
        let sev = aer::severity_label(ev.aux);
        *self.reports(sev) += 1;
        if let Some(sev) = sev {
            for bit in aer::decode_status(ev.addr as u32, ev.aux == aer::CORRECTED) {
                *self.errors.entry(format!("{sev}:{bit}")).or_default() += 1;
            }
        }
        if ev.dir == pcie::AER_TLP_VALID {
            self.last_tlp_header = Some(tlp_header(ev.phys, ev.size));
        }
    }
}

/// The header log's four dwords as the kernel prints them
/// (`TLP Header: 0x40000001 0x0000000f 0x...`).
pub fn tlp_header(lo: u64, hi: u64) -> String {
    let dw = [lo as u32, (lo >> 32) as u32, hi as u32, (hi >> 32) as u32];
    dw.iter()
        .map(|d| format!("{d:#010x}"))
        .collect::<Vec<_>>()
        .join(" ")
}
