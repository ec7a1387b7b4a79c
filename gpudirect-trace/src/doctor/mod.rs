//! `gpudirect-trace doctor`: static checks of a host's DMA/IOMMU/PCIe setup for
//! GPUDirect (RDMA, P2P), from `/sys` and `/proc` only (no eBPF, no tools
//! needed). It automates the field guide's checklist (shared/seed) and says
//! where that guide is wrong.
//!
//! Modules: [`tree`] reads the live host or a captured tree; [`pci`] decodes
//! config space; [`devices`] builds the PCI inventory; [`platform`] (IOMMU,
//! kernel parameters, NVIDIA driver), [`checks`] (per GPU/NIC) and [`topology`]
//! (P2P path matrix, ACS), [`klog`] (kernel log) and [`gpu_facts`] (NVML, when
//! present) produce [`findings`]; [`report`] renders them; [`capture`] writes a
//! snapshot for bug reports.

pub mod baseline;
pub mod capture;
pub mod checks;
pub mod devices;
pub mod findings;
pub mod gpu_facts;
pub mod klog;
pub mod pci;
pub mod platform;
pub mod report;
pub mod topology;
mod unpack;
/// The host's /sys and /proc, live or captured (shared with `gpu`).
pub use crate::hosttree as tree;

#[cfg(test)]
mod tests_fixture;
#[cfg(test)]
mod tests_nvml;
#[cfg(test)]
mod tests_synthetic;
#[cfg(test)]
pub(crate) mod testutil;

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context as _;

use self::{
    findings::{Findings, Severity},
    report::Report,
    tree::Tree,
};
use crate::gpu::NvmlRecord;

/// What `doctor` reads and writes.
#[derive(Clone, Debug, Default)]
pub struct DoctorOptions {
    /// A captured tree instead of `/`.
    pub root: Option<PathBuf>,
    pub json: bool,
    /// Also evidence and advice for `ok` findings.
    pub verbose: bool,
    /// Write a capture instead of checking.
    pub capture: Option<PathBuf>,
    /// An earlier capture to compare NVML counters against.
    pub baseline: Option<PathBuf>,
    /// How the capture file is created.
    pub out: crate::outfile::Options,
}

/// Examine a tree and produce the report, with NVML read now (live host) or
/// from the capture's nvml.json.
pub fn diagnose(tree: &Tree) -> anyhow::Result<Report> {
    diagnose_with(tree, &gpu_facts::gather(tree), None)
}

/// [`diagnose`] with the NVML answers given, and an earlier capture's to
/// compare counters against.
pub fn diagnose_with(
    tree: &Tree,
    nvml: &NvmlRecord,
    baseline: Option<&NvmlRecord>,
) -> anyhow::Result<Report> {
    let mut f = Findings {
        capture: !tree.is_live(),
        ..Findings::default()
    };
    let devs = match devices::read_all(tree) {
        Ok(d) => d,
        Err(e) => {
            f.unreadable("pci.devices", "host", "/sys/bus/pci/devices", &e);
            Vec::new()
        }
    };
    let iommu = platform::check_iommu(tree, &devs, &mut f);
    for d in devs.iter().filter(|d| d.is_endpoint_of_interest()) {
        checks::check_device(tree, d, &mut f);
    }
    let topology = topology::build(tree, &devs, &mut f);
    platform::check_nvidia(tree, &devs, iommu, &mut f);
    klog::check(tree, iommu, &mut f);
    let gpus = gpu_facts::check(tree, nvml, baseline, &mut f);
    if !devs.iter().any(|d| d.is_endpoint_of_interest()) && !devs.is_empty() {
        f.add(
            "pci.no_gpu_nic",
            Severity::Info,
            "host",
            format!(
                "no GPU (class 0x03xx) or NIC (class 0x02xx) among {} PCI devices",
                devs.len()
            ),
            vec![format!("/sys/bus/pci/devices: {} entries", devs.len())],
            "",
        );
    }
    refused(tree, &mut f);
    f.list.sort_by_key(|f| std::cmp::Reverse(f.severity));
    Ok(Report {
        root: tree.root().display().to_string(),
        gpus,
        findings: f.list,
        topology,
        nvml: nvml.clone(),
    })
}

/// The paths the tree would not read, as one finding: a captured tree is
/// untrusted input, and a link out of it or a FIFO in it is skipped, never
/// silently.
fn refused(tree: &Tree, f: &mut Findings) {
    let (mut evidence, more) = tree.refused();
    if evidence.is_empty() {
        return;
    }
    let n = evidence.len() as u64 + more;
    if more > 0 {
        evidence.push(format!("... and {more} more"));
    }
    f.add(
        "tree.refused",
        Severity::Warn,
        "host",
        format!(
            "{n} path(s) not read: links leading out of {}, special files or files over the \
             read limits (the checks that needed them say unknown)",
            if tree.is_live() {
                "the host tree"
            } else {
                "the capture"
            }
        ),
        evidence,
        "a capture written by `gpudirect-trace doctor --capture` holds only regular files: \
         this one was changed after it was taken; nothing outside it was read",
    );
}

/// The exit status when some finding is a `problem`. Not 2: clap's usage
/// errors exit 2, and a script that took 2 for "problems found" would read a
/// mistyped option as a checked host (the doctor-vtd VM scenario did).
pub const PROBLEM_EXIT: u8 = 4;

/// Check this host (or a captured one) for DMA/IOMMU/PCIe settings that break
/// or slow GPUDirect RDMA and GPU peer-to-peer.
///
/// Exit status: 0 when nothing is a `problem`, [`PROBLEM_EXIT`] when some
/// finding is, 1 on error.
pub fn run(args: &DoctorOptions) -> anyhow::Result<ExitCode> {
    // A capture's .tar.gz is unpacked for as long as it is read (`unpack`).
    let unpacked = match &args.root {
        Some(r) if std::fs::metadata(r).is_ok_and(|m| !m.is_dir()) => {
            Some(unpack::capture_archive(r).with_context(|| format!("--root {}", r.display()))?)
        }
        _ => None,
    };
    let tree = match (&args.root, &unpacked) {
        (Some(r), Some(dir)) => Tree::captured(dir.path())?.shown_as(r),
        (Some(r), None) => Tree::captured(r)?,
        (None, _) => Tree::live(),
    };
    if let Some(out) = &args.capture {
        if let Some(root) = &args.root {
            capture::refuse_inside(root, out)?;
        }
        let n = capture::write(&tree, out, args.out)?;
        crate::output::eprintln(&format!(
            "gpudirect-trace doctor: wrote {n} files to {}",
            crate::outfile::display(out)
        ));
        let (refused, more) = tree.refused();
        if let Some(first) = refused.first() {
            crate::output::warn(&format!(
                "{} path(s) were not read (capture-errors.txt in the archive lists them), first: \
                 {first}",
                refused.len() as u64 + more
            ));
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Read before gathering NVML, so a bad path fails at once.
    let baseline = match &args.baseline {
        Some(p) => Some(baseline::read(p).with_context(|| format!("--baseline {}", p.display()))?),
        None => None,
    };
    let report = diagnose_with(&tree, &gpu_facts::gather(&tree), baseline.as_ref())?;
    let printed = if args.json {
        crate::output::line(&report.to_json()?)
    } else {
        // Values read from /sys, /proc and a captured tree (which anyone
        // may have crafted): no control character reaches the terminal.
        crate::output::write(&crate::sanitize::multiline(&report.to_text(args.verbose)))
    };
    match printed {
        Err(e) if e.is::<crate::output::StdoutClosed>() => return Ok(ExitCode::SUCCESS),
        other => other?,
    }
    let problem = report
        .findings
        .iter()
        .any(|f| f.severity == Severity::Problem);
    Ok(if problem {
        ExitCode::from(PROBLEM_EXIT)
    } else {
        ExitCode::SUCCESS
    })
}
