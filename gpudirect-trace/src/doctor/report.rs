//! Rendering: a short text report grouped by severity, or JSON.

use std::fmt::Write as _;

use serde::Serialize;

use super::{
    findings::{Finding, Severity},
    topology::Topology,
};
use crate::gpu::{GpuIdentity, NvmlRecord};

#[derive(Debug, Serialize)]
pub struct Report {
    /// `/` or the captured tree analysed.
    pub root: String,
    /// NVIDIA GPUs: index, UUID, bus id, name (NVML's where it answered).
    pub gpus: Vec<GpuIdentity>,
    pub findings: Vec<Finding>,
    pub topology: Topology,
    /// The NVML answers the findings were drawn from (the form of nvml.json).
    pub nvml: NvmlRecord,
}

impl Report {
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }

    /// Worst first; `ok` findings are only counted unless `verbose`.
    pub fn to_text(&self, verbose: bool) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "gpudirect-trace doctor: {}", self.root);
        for g in &self.gpus {
            let _ = writeln!(s, "  {g}");
        }
        for sev in [
            Severity::Problem,
            Severity::Warn,
            Severity::Unknown,
            Severity::Info,
            Severity::Ok,
        ] {
            let group: Vec<&Finding> = self.findings.iter().filter(|f| f.severity == sev).collect();
            if group.is_empty() {
                continue;
            }
            let _ = writeln!(s, "\n{} ({}):", sev.name().to_uppercase(), group.len());
            if sev == Severity::Ok && !verbose {
                for f in group {
                    let _ = writeln!(s, "  - {}", f.summary);
                }
                continue;
            }
            for f in group {
                let _ = writeln!(s, "  - [{}] {}", f.id, f.summary);
                for e in &f.evidence {
                    let _ = writeln!(s, "      evidence: {e}");
                }
                if !f.advice.is_empty() {
                    let _ = writeln!(s, "      advice: {}", f.advice);
                }
            }
        }
        s.push_str(&self.topology_text());
        s
    }

    fn topology_text(&self) -> String {
        let t = &self.topology;
        let mut s = String::new();
        if t.devices.is_empty() {
            s.push_str("\nTopology: no GPUs or NICs found\n");
            return s;
        }
        let _ = writeln!(
            s,
            "\nTopology (nvidia-smi topo -m legend; derived from sysfs paths):"
        );
        let _ = write!(s, "{:<8}", "");
        for d in &t.devices {
            let _ = write!(s, "{:<8}", d.name);
        }
        let _ = writeln!(s, "{:<14}NUMA  CPUs", "BDF");
        for (d, row) in t.devices.iter().zip(&t.matrix) {
            let _ = write!(s, "{:<8}", d.name);
            for c in row {
                let _ = write!(s, "{c:<8}");
            }
            let _ = writeln!(
                s,
                "{:<14}{:<6}{}",
                d.bdf,
                d.numa_node
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "?".into()),
                d.local_cpus.as_deref().unwrap_or("?")
            );
        }
        if let Some(src) = &t.nvlink_source {
            let _ = writeln!(s, "NV# entries from {src}");
        }
        s.push_str(
            "X self; PIX one PCIe switch; PXB several bridges; PHB through the host bridge; \
             NODE across host bridges in a NUMA node; SYS across NUMA nodes; NV# NVLinks\n",
        );
        s
    }
}
