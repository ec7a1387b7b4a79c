//! Command-line interface: one subcommand per job.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "gpudirect-trace", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {}
}
