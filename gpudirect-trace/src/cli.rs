//! Command-line interface: one subcommand per job.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "gpudirect-trace", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Explain DMA/IOMMU/GPU/PCIe faults found in a kernel log.
    ///
    /// Decodes Intel VT-d (DMAR), AMD-Vi and ARM SMMU fault lines, NVIDIA Xid
    /// reports and PCIe AER errors from `dmesg`, `dmesg -T`, `journalctl -k`
    /// or raw /dev/kmsg text into one fault object each: device, address,
    /// access, reason from the kernel's own tables, and what to check first.
    /// Rate-limited VT-d faults are reported as counts. Without a file it
    /// reads what is in /dev/kmsg now and returns.
    Explain(crate::faults::ExplainArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Explain(args) => crate::faults::run_explain(&args),
    }
}
