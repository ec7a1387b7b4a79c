//! Kernel log scan: IOMMU faults, AER errors, NVIDIA Xids, SWIOTLB exhaustion,
//! and the boot-time IOMMU default domain. Reads `dmesg.txt` of a capture, or
//! runs `dmesg` on the live host.

use std::collections::BTreeMap;

use super::{
    capture::run_tool,
    findings::{Findings, Severity},
    tree::Tree,
};

/// Xids that point at the PCIe/platform or at data loss rather than an
/// application bug (NVIDIA Xid catalog): 48 DBE, 74 NVLink, 79 fallen off the
/// bus, 92 high SBE rate, 94/95 contained/uncontained ECC, 119/120 GSP.
const SERIOUS_XIDS: &[u32] = &[48, 74, 79, 92, 94, 95, 119, 120];

#[derive(Debug, Default, PartialEq, Eq)]
pub struct LogScan {
    pub default_domain: Option<String>,
    pub iommu_faults: Vec<String>,
    pub aer_uncorrected: Vec<String>,
    pub aer_corrected: usize,
    /// Xid number -> (count, first line).
    pub xids: BTreeMap<u32, (usize, String)>,
    pub swiotlb_full: Vec<String>,
}

/// Reads the kernel log through faults/'s decoder, the one `live` and
/// `record` use (issue 31): syslog and journald prefixes, reports split
/// over lines (VT-d's older two-line form, AER's detail lines) and every
/// IOMMU's format are read one way everywhere. What is not a fault (the
/// default domain, SWIOTLB exhaustion) is matched here.
pub fn scan(text: &str) -> LogScan {
    let mut s = LogScan::default();
    let mut decoder = crate::faults::Decoder::new();
    for line in text.lines() {
        let l = line.trim();
        if let Some(i) = l.find("iommu: Default domain type: ") {
            s.default_domain = Some(l[i + 28..].trim().to_string());
        } else if l.contains("swiotlb buffer is full") {
            s.swiotlb_full.push(l.to_string());
        }
        for f in decoder.feed(line) {
            s.take(f);
        }
    }
    for f in decoder.finish() {
        s.take(f);
    }
    s
}

impl LogScan {
    fn take(&mut self, f: crate::model::Fault) {
        use crate::model::Source;
        let raw = f.raw.trim().to_string();
        match f.source {
            Source::NvidiaXid => {
                if let Some(n) = f.xid {
                    let e = self.xids.entry(n).or_insert((0, raw));
                    e.0 += f.count.max(1) as usize;
                }
            }
            Source::Aer if f.reason.contains("Corrected") => self.aer_corrected += 1,
            Source::Aer => self.aer_uncorrected.push(raw),
            Source::IommuTracepoint => {}
            Source::Vtd | Source::AmdVi | Source::Smmu | Source::VirtioIommu => {
                self.iommu_faults.push(raw)
            }
        }
    }
}

pub fn check(tree: &Tree, iommu: Option<bool>, f: &mut Findings) {
    let (text, src) = match tree.read_capture_file("dmesg.txt") {
        Ok(t) => (Ok(t), "dmesg.txt"),
        Err(_) if tree.is_live() => (run_tool("dmesg", &[]), "dmesg"),
        Err(_) => (Err("dmesg.txt: not in the capture".to_owned()), "dmesg.txt"),
    };
    let text = match text {
        Ok(t) => t,
        Err(why) => {
            let (summary, advice) = if tree.is_live() {
                (
                    "unknown: the kernel log could not be read",
                    "IOMMU faults, AER errors and Xids are only visible in the kernel log: run \
                     as root (kernel.dmesg_restrict keeps it from other users)",
                )
            } else {
                (
                    "unknown: the capture holds no kernel log",
                    "IOMMU faults, AER errors and Xids are only visible in the kernel log: \
                     capture again as root on the host with `gpudirect-trace doctor --capture`",
                )
            };
            f.add(
                "klog.unreadable",
                Severity::Unknown,
                "host",
                summary,
                vec![why],
                advice,
            );
            return;
        }
    };
    let s = scan(&text);
    if let Some(d) = &s.default_domain {
        let none = iommu == Some(false);
        f.add(
            "klog.iommu_default_domain",
            Severity::Info,
            "host",
            format!(
                "kernel's default IOMMU domain type: {d}{}",
                if none {
                    " (no IOMMU present, so it applies to no device)"
                } else {
                    ""
                }
            ),
            vec![format!("{src}: iommu: Default domain type: {d}")],
            "",
        );
    }
    let mut add = |id: &str, sev: Severity, summary: String, lines: &[String], advice: &str| {
        let ev = lines
            .iter()
            .take(3)
            .map(|l| format!("{src}: {l}"))
            .collect();
        f.add(id, sev, "host", summary, ev, advice);
    };
    if !s.iommu_faults.is_empty() {
        add(
            "klog.iommu_fault",
            Severity::Problem,
            format!(
                "{} IOMMU fault line(s) in the kernel log",
                s.iommu_faults.len()
            ),
            &s.iommu_faults,
            "a device DMA'd to an IOVA with no (or a read-only) mapping: with GPUDirect this \
             is usually a peer BAR not mapped in the IOMMU (P2P under DMA/DMA-FQ domains); \
             use iommu=pt or an identity group, or DmaRemapPeerMmio=1. \
             `gpudirect-trace` tracing shows which mapping was missing",
        );
    }
    if !s.aer_uncorrected.is_empty() {
        add(
            "klog.aer_uncorrected",
            Severity::Problem,
            format!("{} uncorrected AER error line(s)", s.aer_uncorrected.len()),
            &s.aer_uncorrected,
            "uncorrected PCIe errors are a platform/link problem (slot, riser, retimer), not \
             a driver one",
        );
    }
    if s.aer_corrected > 0 {
        add(
            "klog.aer_corrected",
            Severity::Info,
            format!("{} corrected AER error line(s)", s.aer_corrected),
            &["lines with 'AER:' and 'Corrected'".to_string()],
            "a steady stream of corrected errors on one link predicts retraining/downtraining",
        );
    }
    for (n, (count, first)) in &s.xids {
        let serious = SERIOUS_XIDS.contains(n);
        add(
            &format!("klog.xid.{n}"),
            if serious {
                Severity::Problem
            } else {
                Severity::Warn
            },
            format!("NVIDIA Xid {n} logged {count} time(s)"),
            std::slice::from_ref(first),
            if *n == 79 {
                "Xid 79 (fallen off the bus): check AER lines and pcie.link findings for the \
                 same GPU first (platform), then power/thermals"
            } else {
                "look the Xid up in NVIDIA's Xid catalog"
            },
        );
    }
    if !s.swiotlb_full.is_empty() {
        add(
            "klog.swiotlb_full",
            Severity::Warn,
            format!(
                "SWIOTLB bounce buffer exhausted {} time(s)",
                s.swiotlb_full.len()
            ),
            &s.swiotlb_full,
            "a device with a narrow DMA mask (or swiotlb=force) bounces through SWIOTLB: \
             raise swiotlb= size, or fix the DMA mask / remove swiotlb=force",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_faults_aer_xids() {
        let log = "\
[    0.15] iommu: Default domain type: Translated
[ 12.0] DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr 0x123000 [fault reason 0x05] PTE Write access is not set
[ 13.0] pcieport 0000:00:01.0: AER: Uncorrected (Non-Fatal) error received: 0000:01:00.0
[ 14.0] pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0
[ 15.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.
[ 16.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.
[ 17.0] NVRM: Xid (PCI:0000:5e:00): 13, pid=99, Graphics Exception
[ 18.0] nvme 0000:02:00.0: swiotlb buffer is full (sz: 4096 bytes), total 32768 (slots), used 32768 (slots)
";
        let s = scan(log);
        assert_eq!(s.default_domain.as_deref(), Some("Translated"));
        assert_eq!(s.iommu_faults.len(), 1);
        assert_eq!((s.aer_uncorrected.len(), s.aer_corrected), (1, 1));
        assert_eq!(s.xids.get(&79).map(|x| x.0), Some(2));
        assert_eq!(s.xids.get(&13).map(|x| x.0), Some(1));
        assert_eq!(s.swiotlb_full.len(), 1);
    }

    /// The same decoder as `live`: journald's prefix, and VT-d's older form
    /// split over two lines, count once each.
    #[test]
    fn prefixed_and_split_lines_are_read_as_live_reads_them() {
        let log = "\
Dec 03 10:00:01 node-a kernel: DMAR: DRHD: handling fault status reg 2
Dec 03 10:00:01 node-a kernel: DMAR: [DMA Read] Request device [41:00.0] PASID ffffffff fault addr 7fe00000 [fault reason 06] PTE Read access is not set
Dec 03 10:00:02 node-a kernel: NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
";
        let s = scan(log);
        assert_eq!(s.iommu_faults.len(), 1, "{s:?}");
        assert_eq!(s.xids.get(&79).map(|x| x.0), Some(1), "{s:?}");
    }
}
