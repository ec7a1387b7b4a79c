//! `cargo xtask test` and `build`.

use std::process::{Command, ExitCode};

use anyhow::Context as _;
use clap::Args;

use crate::{bootstrap::status, phases::Phases, vm};

#[derive(Args, Debug)]
pub struct TestArgs {
    /// Skip the VM scenarios (`cargo xtask vm-test` on 5.10, 6.1, 6.12, 6.18
    /// and newest).
    #[arg(long)]
    pub no_vm: bool,
    /// Skip building and checking the release artifacts (`cargo xtask dist`:
    /// the .deb installed and purged, the image run in podman, the manifests
    /// validated).
    #[arg(long)]
    pub no_dist: bool,
    /// Skip the short fuzz run of the trace-file reader and the readers' memory bound.
    #[arg(long)]
    pub no_fuzz: bool,
    /// Seconds of fuzzing per target.
    #[arg(long, default_value_t = 30)]
    pub fuzz_seconds: u32,
}

/// The cargo-fuzz package: its targets, seed corpus and, once built, its
/// sanitized build under `target/`.
const FUZZ_DIR: &str = "gpudirect-trace/fuzz";

/// A short libFuzzer run of each trace-file fuzz target (cargo-fuzz,
/// nightly). New inputs go to a scratch directory; the repository's seed
/// corpus is only read. A crash fails the run and leaves the input in
/// gpudirect-trace/fuzz/artifacts.
fn fuzz(seconds: u32) -> anyhow::Result<()> {
    crate::bootstrap::cargo_fuzz()?;
    // The sanitized build is ~1.9 GiB that no later phase reads. Where this
    // run made it (a fresh clone: CI), it goes when the phase ends, so the
    // VM phase has the disk; a build that was here before is kept.
    let build_dir = std::path::Path::new(FUZZ_DIR).join("target");
    let ours = !build_dir.exists();
    let result = fuzz_targets(seconds);
    if ours && build_dir.is_dir() {
        std::fs::remove_dir_all(&build_dir)
            .with_context(|| format!("removing this run's {}", build_dir.display()))?;
    }
    result
}

fn fuzz_targets(seconds: u32) -> anyhow::Result<()> {
    // memory: the readers' 256 MiB bound on any input (counting allocator).
    for target in ["reader", "columns", "memory"] {
        let scratch =
            std::env::temp_dir().join(format!("gdt-fuzz-{target}-{}", std::process::id()));
        std::fs::create_dir_all(&scratch)?;
        let seeds = format!("corpus/{target}");
        let mut cmd = Command::new("cargo");
        cmd.current_dir(FUZZ_DIR)
            .args(["+nightly", "fuzz", "run", target])
            .arg(&scratch);
        if std::path::Path::new(FUZZ_DIR).join(&seeds).is_dir() {
            cmd.arg(&seeds);
        }
        cmd.args(["--", &format!("-max_total_time={seconds}")]);
        let result = status(&mut cmd).with_context(|| format!("fuzzing {target}"));
        let _ = std::fs::remove_dir_all(&scratch);
        result?;
    }
    Ok(())
}

pub fn run(args: TestArgs) -> anyhow::Result<ExitCode> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    anyhow::ensure!(
        root,
        "the host integration tests load BPF programs: run `cargo xtask test` as root"
    );
    warn_if_disk_is_short(&args);
    let mut phases = Phases::new();
    let result = phases_of(&args, &mut phases);
    eprint!("{}", phases.summary());
    result
}

/// What a full run from a fresh clone writes under the checkout, with a
/// margin. Measured in stop 47 (`.ci/run`, so without incremental state):
/// the checkout peaked at 5.3 GiB at the end of the fuzz phase (debug build
/// 2.4, release build and packages 1.0, the fuzz build 1.9 until the phase
/// removes it) and held 5.2 after the VM phase (the kernels and headers
/// 1.8). The toolchains and packages bootstrap installs come on top,
/// outside it.
const FULL_RUN_BYTES: u64 = 6 << 30;

/// A run that cannot fit says so before its first phase rather than as
/// tar's "No space left" half an hour in; it still goes on, since the
/// figure is an estimate and a warm checkout needs less.
fn warn_if_disk_is_short(args: &TestArgs) {
    let Some(free) = crate::phases::free_bytes(std::path::Path::new(".")) else {
        return;
    };
    let full = !args.no_vm && !args.no_fuzz && !args.no_dist;
    if full && free < FULL_RUN_BYTES {
        eprintln!(
            "xtask: warning: {} free on this disk; a full run from a fresh clone writes about \
             {} here (--no-fuzz, --no-vm and --no-dist each need less)",
            crate::phases::gib(free),
            crate::phases::gib(FULL_RUN_BYTES)
        );
    }
}

fn phases_of(args: &TestArgs, phases: &mut Phases) -> anyhow::Result<ExitCode> {
    phases.run("bootstrap", crate::bootstrap::run)?;
    phases.run("clippy", || {
        status(Command::new("cargo").args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
        .context("clippy (warnings are errors)")
    })?;
    phases.run("tests", || {
        status(Command::new("cargo").args(["test", "--workspace"]))
            .context("unit and host integration tests")
    })?;
    if !args.no_dist {
        phases.run("dist", || {
            crate::bootstrap::dist_tools()?;
            let artifacts = crate::dist::build(false).context("cargo xtask dist")?;
            crate::dist::check::run(&artifacts)
        })?;
    }
    if !args.no_fuzz {
        phases.run("fuzz", || fuzz(args.fuzz_seconds))?;
    }
    if args.no_vm {
        return Ok(ExitCode::SUCCESS);
    }
    phases.run("vm", || {
        let passed = vm::scenario::all_passed(vm::scenario::VmTestArgs::defaults())?;
        anyhow::ensure!(passed, "VM scenarios failed (the table above says which)");
        Ok(ExitCode::SUCCESS)
    })
}
