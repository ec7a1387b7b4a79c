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
}

pub fn exec(args: &SelftestArgs) -> anyhow::Result<ExitCode> {
    let SelftestCheck::ModuleHook {
        module,
        function,
        duration,
    } = &args.check;
    let (doc, ok) = selftest::module_hook(module, function, *duration)?;
    output::line(&doc.to_string())?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
