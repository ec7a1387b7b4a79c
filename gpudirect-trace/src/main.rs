//! gpudirect-trace: see README.md. All logic lives in the library; this file
//! only turns errors into one clear line and an exit status.

use std::process::ExitCode;

use clap::Parser as _;
use gpudirect_trace::{
    commands::{run, Cli, UsageError, USAGE_EXIT},
    output,
    session::{StrictFailure, STRICT_EXIT},
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            output::note(&format!("error: {err:#}"));
            if err.is::<StrictFailure>() {
                ExitCode::from(STRICT_EXIT)
            } else if err.is::<UsageError>() {
                ExitCode::from(USAGE_EXIT)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
