//! gpudirect-trace: see README.md. All logic lives in the library; this file
//! only turns errors into one clear line and an exit status.

use std::process::ExitCode;

use clap::Parser as _;
use gpudirect_trace::cli::{run, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            // Not eprintln!: it panics (exit 101) when stderr is a closed pipe.
            gpudirect_trace::output::eprintln(&format!("gpudirect-trace: error: {err:#}"));
            ExitCode::FAILURE
        }
    }
}
