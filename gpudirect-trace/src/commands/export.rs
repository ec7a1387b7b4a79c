//! `gpudirect-trace export`.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Args, ValueEnum};

use crate::export::{self, ExportOptions, Format};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// One JSON object per line: every event, and loss records.
    Jsonl,
    /// Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev): one
    /// track per device; mappings as spans from map to unmap, the rest as
    /// instants.
    Chrome,
    /// HdrHistogram interval log (V2): mapped sizes per device and
    /// operation, one histogram per second.
    Hdr,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Jsonl => Format::Jsonl,
            FormatArg::Chrome => Format::Chrome,
            FormatArg::Hdr => Format::Hdr,
        }
    }
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Trace file written by `gpudirect-trace record`.
    pub file: PathBuf,
    #[arg(long, value_enum)]
    pub format: FormatArg,
    /// Output file (default, or `-`: standard output). Never the input.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Replace physical (and coherent-buffer kernel virtual) addresses with
    /// per-file pseudonyms (p1, p2, ... by first appearance); IOVAs, DMA
    /// addresses and bus ids stay.
    #[arg(long)]
    pub redact: bool,
    /// Start of the window, as time since the recording started (e.g. 2s,
    /// 1.5, 2m): events, losses and faults before it are left out (a
    /// mapping made before it and unmapped inside has no span).
    #[arg(long, value_parser = super::trace::parse_offset, value_name = "T")]
    pub from: Option<Duration>,
    /// End of the window (exclusive), counted as --from.
    #[arg(long, value_parser = super::trace::parse_offset, value_name = "T")]
    pub to: Option<Duration>,
    /// Only this device's events and log faults (repeatable), named as in
    /// `report --device`: a bus id, GPU0 or a GPU's UUID, or a name the
    /// recording's host gave a PCI function (nvme0n1, eth0, mlx5_0).
    /// Losses stay: they are the recording's.
    #[arg(long = "device", value_name = "DEV")]
    pub devices: Vec<String>,
    #[command(flatten)]
    pub out: super::trace::OutputFlags,
}

pub fn exec(args: &ExportArgs) -> anyhow::Result<ExitCode> {
    let (reader, wanted) = super::trace::open_recording(&args.file, &args.devices)?;
    let options = ExportOptions {
        file: args.file.clone(),
        format: args.format.into(),
        output: args.output.clone(),
        redact: args.redact,
        out: crate::outfile::Options::from(args.out).reading(&args.file),
        from: args.from,
        to: args.to,
        devices: export::DeviceFilter {
            wanted,
            typed: args.devices.clone(),
        },
    };
    export::run_from(&options, reader)
}
