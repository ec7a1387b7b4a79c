//! `cargo xtask test` and `build`.

use std::process::{Command, ExitCode};

use anyhow::Context as _;
use clap::Args;

use crate::{bootstrap::status, vm};

#[derive(Args, Debug)]
pub struct TestArgs {
    /// Skip the VM scenarios (`cargo xtask vm-test` on 6.1 and 6.12).
    #[arg(long)]
    pub no_vm: bool,
}

pub fn build_release() -> anyhow::Result<()> {
    status(Command::new("cargo").args(["build", "--release", "-p", "gpudirect-trace"]))
}

pub fn run(args: TestArgs) -> anyhow::Result<ExitCode> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    anyhow::ensure!(
        root,
        "the host integration tests load BPF programs: run `cargo xtask test` as root"
    );
    status(Command::new("cargo").args(["test", "--workspace"]))
        .context("unit and host integration tests")?;
    if args.no_vm {
        return Ok(ExitCode::SUCCESS);
    }
    vm::scenario::main(vm::scenario::VmTestArgs::defaults())
}
