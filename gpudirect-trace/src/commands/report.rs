//! `gpudirect-trace report`.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::Args;

use super::{
    trace::{parse_offset, OutputFlags},
    usage,
};
use crate::{
    output,
    report::{self, html, Window},
};

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Trace file written by `gpudirect-trace record` (or a snapshot). Give
    /// several files or a directory (its `*.gdt`, 4 levels down: a fleet's
    /// collected snapshots) for one summary over all of them: hosts, GPUs,
    /// incidents by kind, each host's first cause, what hosts share.
    #[arg(value_name = "FILE|DIR", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Show only this device: a PCI bus id, a GPU index (0, GPU0) or UUID
    /// (GPU-4f39...), a name the recording's host gave a device (nvme0n1,
    /// eth0: its PCI function, from the names the recording kept), or a
    /// device name as the tables show it; repeat for several.
    #[arg(long = "device", value_name = "BDF")]
    pub devices: Vec<String>,
    /// One JSON object on stdout instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Start of the window, as time since the recording started (e.g. 2s, 1.5, 2m).
    #[arg(long, value_parser = parse_offset, value_name = "T")]
    pub from: Option<Duration>,
    /// End of the window, as time since the recording started (e.g. 5s, 4.25).
    #[arg(long, value_parser = parse_offset, value_name = "T")]
    pub to: Option<Duration>,
    /// Also write a self-contained HTML page with plots (no network needed);
    /// `-`: the page on standard output instead of the text report.
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
    #[command(flatten)]
    pub out: OutputFlags,
}

pub fn exec(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let page_to_stdout = args.html.as_deref().is_some_and(crate::outfile::is_stdout);
    if page_to_stdout && args.json {
        return Err(usage(
            "report",
            "--html - and --json both want standard output: give --html a file name",
        ));
    }
    if args
        .to
        .is_some_and(|to| to <= args.from.unwrap_or_default())
    {
        return Err(usage(
            "report",
            "--to must be later than --from (both count from the recording's start)",
        ));
    }
    let many = args.files.len() > 1 || args.files[0].is_dir();
    if many {
        return fleet(args, page_to_stdout);
    }
    let file = &args.files[0];
    let (reader, devices) = super::trace::open_recording(file, &args.devices)?;
    let window = Window {
        from: args.from,
        to: args.to,
        devices: devices.clone(),
    };
    let mut r = report::replay_from(file, reader, &window)?;
    output::warn_unmatched(&devices, &args.devices, &r.analysis.agg.device_names());
    // One field wherever it is shown (a file name may hold a line feed).
    let path = crate::sanitize::text(&file.display().to_string()).into_owned();
    for w in report::warnings(&path, &r) {
        output::warn(&w);
    }
    let window_s = (r.last_ns.saturating_sub(r.from_ns)) as f64 / 1e9;
    let devices = r.analysis.agg.snapshot(window_s, &devices);
    if let Some(out) = &args.html {
        let page = html::page(&path, &r, &devices);
        // Never the recording being read (`--html f.gdt --force` replaced it).
        let opts = crate::outfile::Options::from(args.out).reading(file);
        if write_page(out, opts, &page, page_to_stdout)? {
            return Ok(ExitCode::SUCCESS);
        }
    }
    finish(if args.json {
        output::json_line(&report::json_doc(&path, &r, &devices))
    } else {
        // A trace file is untrusted input: no control character of its
        // names or messages reaches the terminal.
        output::line(&crate::sanitize::multiline(&report::text(
            &path, &r, &devices, window_s,
        )))
    })
}

/// Writes the HTML page to `out`; true when it went to standard output (and
/// nothing else is to be printed). A reader that closed the pipe early ends
/// the command quietly.
fn write_page(
    out: &std::path::Path,
    opts: crate::outfile::Options,
    page: &str,
    page_to_stdout: bool,
) -> anyhow::Result<bool> {
    let mut f = crate::outfile::create(out, opts)?;
    match std::io::Write::write_all(f.file(), page.as_bytes()) {
        Err(e) if page_to_stdout && e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(true),
        other => other.with_context(|| format!("writing {}", crate::outfile::display(out)))?,
    }
    f.commit()?;
    if !page_to_stdout {
        output::note(&format!("wrote {}", out.display()));
    }
    Ok(page_to_stdout)
}

/// The text or JSON printed: a closed standard output is not an error.
fn finish(printed: anyhow::Result<()>) -> anyhow::Result<ExitCode> {
    match printed {
        Err(e) if e.is::<output::StdoutClosed>() => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e),
        Ok(()) => Ok(ExitCode::SUCCESS),
    }
}

/// `report FILE FILE...` or `report DIR`: the fleet summary.
fn fleet(args: &ReportArgs, page_to_stdout: bool) -> anyhow::Result<ExitCode> {
    if args.from.is_some() || args.to.is_some() || !args.devices.is_empty() {
        anyhow::bail!(
            "--from, --to and --device are for one file's report: over many files the summary \
             covers each file whole (give one file to look into it)"
        );
    }
    let (files, skipped, over) = report::fleet::expand(&args.files);
    if files.is_empty() {
        anyhow::bail!("no trace files (*.gdt) found in what was given");
    }
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut fleet = report::fleet::summarize(&files, |i, n, path| {
        if tty {
            output::eprint(&format!("\rreading {}/{n}: {path}\x1b[K", i + 1));
        }
    });
    if tty {
        output::eprint("\r\x1b[K");
    }
    fleet.entries_skipped = skipped;
    fleet.files_not_read = over;
    for r in fleet.files.iter().filter(|r| r.error.is_some()) {
        output::warn(&format!(
            "{}: not read: {}",
            r.path,
            r.error.as_deref().unwrap_or("")
        ));
    }
    if let Some(out) = &args.html {
        let page = report::fleet::html::page(&fleet);
        crate::outfile::refuse_inputs(out, &files)?;
        let opts = crate::outfile::Options::from(args.out);
        if write_page(out, opts, &page, page_to_stdout)? {
            return Ok(ExitCode::SUCCESS);
        }
    }
    finish(if args.json {
        output::json_line(&fleet)
    } else {
        output::line(&crate::sanitize::multiline(&report::fleet::text::text(
            &fleet,
        )))
    })
}
