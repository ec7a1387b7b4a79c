//! `gpudirect-trace explain`.

use std::{path::PathBuf, process::ExitCode};

use clap::Args;

use crate::faults::{run_explain, ExplainOptions};

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// Kernel log to decode: output of `dmesg`, `dmesg -T`, `journalctl -k`,
    /// or raw /dev/kmsg records; `-` reads stdin. Without it, the records
    /// currently in /dev/kmsg are read (needs CAP_SYSLOG or
    /// kernel.dmesg_restrict=0) and the command returns at once.
    pub input: Option<PathBuf>,
    /// Print JSON `{"faults":[...],"summary":{...}}` instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn exec(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    run_explain(&ExplainOptions {
        input: args.input.clone(),
        json: args.json,
    })
}
