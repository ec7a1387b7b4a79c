//! `cargo xtask`: the project's one entry point for bootstrap, build, tests, VMs.
//! Keep this file a small dispatcher: each subcommand lives in its own module.

mod host;
mod vm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "cargo xtask", about = "gpudirect-trace's development tasks")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Boot a Debian kernel under qemu (TCG, optional VT-d) and run a command in it.
    Vm(vm::VmArgs),
    /// Run the VM scenarios in tests/vm/scenarios on each selected kernel.
    VmTest(vm::scenario::VmTestArgs),
    /// Show the tracer's live view in a VM while DMA happens and a fault is injected.
    Demo(vm::demo::DemoArgs),
    /// Regenerate docs/probe-compatibility.md from `gpudirect-trace probes --json` in VMs.
    ProbeMatrix(vm::probe_matrix::ProbeMatrixArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Vm(a) => vm::main(a),
        Cmd::VmTest(a) => vm::scenario::main(a),
        Cmd::Demo(a) => vm::demo::main(a),
        Cmd::ProbeMatrix(a) => vm::probe_matrix::main(a),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
