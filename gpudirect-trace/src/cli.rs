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
    /// Check the host's DMA/IOMMU/PCIe setup for GPUDirect RDMA and GPU P2P.
    ///
    /// Reads /sys and /proc only (or a captured tree with --root): IOMMU mode and
    /// groups, kernel parameters, PCIe links, MaxPayload/MaxReadReq, ACS on the
    /// bridges between GPUs and NICs, BAR sizes, NUMA and IRQ affinity, NVIDIA
    /// driver parameters. Each finding shows the file and value it came from.
    /// `--capture OUT.tar.gz` saves that data for a bug report. Exit status: 0 no
    /// problem found, 2 some finding is a `problem`, 1 error.
    Doctor(crate::doctor::DoctorArgs),
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Doctor(args) => crate::doctor::run(&args),
    }
}
