//! `cargo xtask`: the project's one entry point for bootstrap, build and tests.

mod bootstrap;
mod test;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "gpudirect-trace's build, bootstrap and test driver"
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
    /// Bootstrap, then run every test: unit tests and the host integration
    /// tests (root: they load BPF programs).
    Test,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Bootstrap => bootstrap::run(),
        Cmd::Build => bootstrap::run().and_then(|()| test::build_release()),
        Cmd::Test => bootstrap::run().and_then(|()| test::run()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
