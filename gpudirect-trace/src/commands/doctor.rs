//! `gpudirect-trace doctor`.

use std::{path::PathBuf, process::ExitCode};

use clap::Args;

use crate::doctor::{self, DoctorOptions};

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Read a capture instead of `/`: the .tar.gz that --capture wrote
    /// (unpacked privately while it is read, then removed) or its unpacked
    /// directory.
    #[arg(long, value_name = "CAPTURE")]
    pub root: Option<PathBuf>,
    /// Print `{"findings":[...],"topology":...}` instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// Also print evidence and advice for `ok` findings.
    #[arg(long, short)]
    pub verbose: bool,
    /// Write a snapshot of everything the doctor reads to OUT.tar.gz (mode 0600;
    /// `-`: standard output, never a terminal) for a bug report, instead of
    /// checking.
    #[arg(long, value_name = "OUT.tar.gz")]
    pub capture: Option<PathBuf>,
    /// An earlier capture (OUT.tar.gz, its unpacked directory, or its
    /// nvml.json) to compare NVML counters against: PCIe replays since then.
    #[arg(long, value_name = "CAPTURE")]
    pub baseline: Option<PathBuf>,
    #[command(flatten)]
    pub out: super::trace::OutputFlags,
}

pub fn exec(args: &DoctorArgs) -> anyhow::Result<ExitCode> {
    doctor::run(&DoctorOptions {
        root: args.root.clone(),
        json: args.json,
        verbose: args.verbose,
        capture: args.capture.clone(),
        baseline: args.baseline.clone(),
        out: crate::outfile::Options::from(args.out).binary(),
    })
}
