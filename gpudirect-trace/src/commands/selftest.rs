//! `gpudirect-trace selftest` (hidden).

use std::{process::ExitCode, time::Duration};

use clap::{Args, Subcommand};

use super::trace::parse_duration;
use crate::{output, selftest};

#[derive(Args, Debug)]
pub struct SelftestArgs {
    #[command(subcommand)]
    pub check: SelftestCheck,
}

#[derive(Subcommand, Debug)]
pub enum SelftestCheck {
    /// Time a module function with the NVIDIA hooks' programs and loader
    ModuleHook {
        /// Module whose BTF holds the function (/sys/kernel/btf/MODULE).
        #[arg(long)]
        module: String,
        /// The module function to hook.
        #[arg(long)]
        function: String,
        /// How long to count calls.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        duration: Duration,
    },
    /// Fill a flight-recorder ring with synthetic events and write a snapshot
    /// of it through the real snapshot path (the host test kills it midway)
    SnapshotWrite {
        /// Directory the snapshot goes to.
        #[arg(long)]
        dir: std::path::PathBuf,
        /// Synthetic map/unmap events in the ring.
        #[arg(long, default_value_t = 2_000_000)]
        events: u64,
    },
}

pub fn exec(args: &SelftestArgs) -> anyhow::Result<ExitCode> {
    let (doc, ok) = match &args.check {
        SelftestCheck::ModuleHook {
            module,
            function,
            duration,
        } => selftest::module_hook(module, function, *duration)?,
        SelftestCheck::SnapshotWrite { dir, events } => selftest::snapshot_write(dir, *events)?,
    };
    output::line(&doc.to_string())?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
