//! `gpudirect-trace import`.

use std::{io::BufWriter, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::Args;

use crate::{ftrace, outfile};

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// ftrace text: the tracefs `trace` file, `trace-cmd report` or `perf
    /// script` output (gzip or zstd too; `-`: standard input).
    pub input: PathBuf,
    /// The trace file to write (created 0600; it holds physical addresses).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
    /// Print what was imported as one JSON object on standard output.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub out: super::trace::OutputFlags,
}

pub fn exec(args: &ImportArgs) -> anyhow::Result<ExitCode> {
    let mut opts = outfile::Options::from(args.out).binary();
    if args.input.as_os_str() != "-" {
        opts = opts.reading(&args.input);
    }
    if outfile::is_stdout(&args.output) && args.json {
        return Err(super::usage(
            "import",
            "--json prints on standard output, where `-o -` writes the trace file: give -o a file",
        ));
    }
    let mut output = outfile::create(&args.output, opts)?;
    let shown = outfile::display(&args.output);
    let stats = ftrace::import_path(
        &args.input,
        BufWriter::with_capacity(1 << 20, output.file()),
    )?;
    output
        .commit()
        .with_context(|| format!("writing {shown}"))?;
    if args.json {
        println!("{}", serde_json::to_string(&stats)?);
    } else {
        eprint!("{}", ftrace::summary(&stats, &shown));
    }
    Ok(ExitCode::SUCCESS)
}
