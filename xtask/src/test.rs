//! `cargo xtask test` and `build`.

use std::process::Command;

use anyhow::Context as _;

use crate::bootstrap::status;

pub fn build_release() -> anyhow::Result<()> {
    status(Command::new("cargo").args(["build", "--release", "-p", "gpudirect-trace"]))
}

pub fn run() -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    anyhow::ensure!(
        root,
        "the host integration tests load BPF programs: run `cargo xtask test` as root"
    );
    status(Command::new("cargo").args(["test", "--workspace"]))
        .context("unit and host integration tests")
}
