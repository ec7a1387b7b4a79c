//! `gpudirect-trace doctor`: static checks of a host's DMA/IOMMU/PCIe setup for
//! GPUDirect (RDMA, P2P), from `/sys` and `/proc` only (no eBPF, no tools
//! needed). It automates the field guide's checklist (shared/seed) and says
//! where that guide is wrong.
//!
//! Modules: [`tree`] reads the live host or a captured tree; [`pci`] decodes
//! config space; [`devices`] builds the PCI inventory; [`platform`] (IOMMU,
//! kernel parameters, NVIDIA driver), [`checks`] (per GPU/NIC) and [`topology`]
//! (P2P path matrix, ACS) and [`klog`] (kernel log) produce [`findings`]; [`report`] renders them;
//! [`capture`] writes a snapshot for bug reports.

pub mod capture;
pub mod checks;
pub mod devices;
pub mod findings;
pub mod klog;
pub mod pci;
pub mod platform;
pub mod report;
pub mod topology;
pub mod tree;

#[cfg(test)]
mod tests_fixture;
#[cfg(test)]
mod tests_synthetic;
#[cfg(test)]
mod testutil;

use std::{path::PathBuf, process::ExitCode};

use self::{
    findings::{Findings, Severity},
    report::Report,
    tree::Tree,
};

/// Check this host (or a captured one) for DMA/IOMMU/PCIe settings that break
/// or slow GPUDirect RDMA and GPU peer-to-peer.
///
/// Exit status: 0 when nothing is a `problem`, 2 when some finding is, 1 on error.
#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Read a captured tree (as written by --capture, unpacked) instead of `/`.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Print `{"findings":[...],"topology":...}` instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// Also print evidence and advice for `ok` findings.
    #[arg(long, short)]
    pub verbose: bool,
    /// Write a snapshot of everything the doctor reads to OUT.tar.gz (mode 0600)
    /// for a bug report, instead of checking.
    #[arg(long, value_name = "OUT.tar.gz")]
    pub capture: Option<PathBuf>,
    #[command(flatten)]
    pub out: crate::outfile::OutputFlags,
}

/// Examine a tree and produce the report.
pub fn diagnose(tree: &Tree) -> anyhow::Result<Report> {
    let mut f = Findings::default();
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
    f.list.sort_by_key(|f| std::cmp::Reverse(f.severity));
    Ok(Report {
        root: tree.root().display().to_string(),
        findings: f.list,
        topology,
    })
}

pub fn run(args: &DoctorArgs) -> anyhow::Result<ExitCode> {
    let tree = match &args.root {
        Some(r) => Tree::captured(r)?,
        None => Tree::live(),
    };
    if let Some(out) = &args.capture {
        let n = capture::write(&tree, out, args.out.into())?;
        crate::output::eprintln(&format!(
            "gpudirect-trace doctor: wrote {n} files to {}",
            out.display()
        ));
        return Ok(ExitCode::SUCCESS);
    }
    let report = diagnose(&tree)?;
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
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    })
}
