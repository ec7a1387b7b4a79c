//! `cargo xtask`: the project's one entry point for bootstrap, build, tests, VMs.
//! Keep this file a small dispatcher: each subcommand lives in its own module.

mod bench;
mod bench_doc;
mod bench_tables;
mod bench_vm;
mod bench_vm_workload;
mod bootstrap;
mod dist;
mod host;
mod phases;
mod test;
mod vm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "gpudirect-trace's build, bootstrap, test and VM driver"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what building needs on a bare machine (idempotent; says what it
    /// installs): the nightly's rust-src, bpf-linker 0.10.1, Debian packages.
    Bootstrap,
    /// Bootstrap, then build the release binary (target/release/gpudirect-trace).
    Build,
    /// Bootstrap, then run every test: clippy, unit tests, the host
    /// integration tests (root: they load BPF programs), the release
    /// artifacts' check, the fuzzers, and the VM scenarios on 5.10, 6.1,
    /// 6.12, 6.18 and the newest sid kernel (docs/vm-harness.md's matrix).
    Test(test::TestArgs),
    /// Boot a Debian kernel under qemu (TCG, optional VT-d) and run a command in it.
    Vm(vm::VmArgs),
    /// Run the VM scenarios in tests/vm/scenarios on each selected kernel.
    VmTest(vm::scenario::VmTestArgs),
    /// Bootstrap (as `test` does), then show the tracer's live view in a VM
    /// while DMA happens and a fault is injected.
    Demo(vm::demo::DemoArgs),
    /// Benchmarks on the host kernel (per-program cost, pipeline rates,
    /// decode throughput, trace file size): prints and writes docs/benchmarks.md.
    /// With --vm: next to bpftrace on the same events in VMs.
    Bench(bench::BenchArgs),
    /// Bootstrap, build the release binary and write the release artifacts to
    /// target/dist/: a tarball, a .deb and an OCI image archive, with SHA256SUMS.
    Dist(dist::DistArgs),
    /// Regenerate docs/probe-compatibility.md from `gpudirect-trace probes --json` in VMs.
    ProbeMatrix(vm::probe_matrix::ProbeMatrixArgs),
}

fn done(r: anyhow::Result<()>) -> anyhow::Result<ExitCode> {
    r.map(|()| ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Bootstrap => done(bootstrap::run()),
        Cmd::Build => done(bootstrap::run().and_then(|()| dist::build_release())),
        // Bootstrap is the first of test's timed phases.
        Cmd::Test(a) => test::run(a),
        Cmd::Vm(a) => vm::main(a),
        Cmd::VmTest(a) => vm::scenario::main(a),
        // The README's main job on a bare machine: set up what building the
        // tracer needs first, exactly as `test` does (bootstrap is idempotent).
        Cmd::Demo(a) => bootstrap::run().and_then(|()| vm::demo::main(a)),
        Cmd::Bench(a) => done(bootstrap::run().and_then(|()| bench::main(a))),
        Cmd::ProbeMatrix(a) => vm::probe_matrix::main(a),
        Cmd::Dist(a) => bootstrap::run()
            .and_then(|()| bootstrap::dist_tools())
            .and_then(|()| dist::main(a)),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
