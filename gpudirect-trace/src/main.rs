//! gpudirect-trace: see README.md. All logic lives in the library; this file
//! only turns errors into one clear line and an exit status.

use std::process::ExitCode;

use clap::Parser as _;
use gpudirect_trace::{
    commands::{run, Cli},
    output,
    session::{StrictFailure, STRICT_EXIT},
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let err = match run(cli) {
        Ok(code) => return code,
        Err(err) => err,
    };
    // Options that clash (commands::usage): reported as clap reports its
    // own usage errors, with their status (2).
    let err = match err.downcast::<clap::Error>() {
        Ok(usage) => {
            let _ = usage.print();
            return ExitCode::from(u8::try_from(usage.exit_code()).unwrap_or(2));
        }
        Err(err) => err,
    };
    output::note(&format!("error: {err:#}"));
    if err.is::<StrictFailure>() {
        ExitCode::from(STRICT_EXIT)
    } else {
        ExitCode::FAILURE
    }
}
