//! `gpudirect-trace report`.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::Args;

use super::trace::parse_offset;
use crate::{
    output,
    report::{self, html, Window},
};

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Trace file written by `gpudirect-trace record`.
    pub file: PathBuf,
    /// Show only this device: a PCI bus id, a GPU index (0, GPU0) or UUID
    /// (GPU-4f39...), or a device name; repeat for several.
    #[arg(long = "device", value_name = "BDF")]
    pub devices: Vec<String>,
    /// One JSON object on stdout instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Start of the window, as time since the recording started (e.g. 2s).
    #[arg(long, value_parser = parse_offset, value_name = "T")]
    pub from: Option<Duration>,
    /// End of the window, as time since the recording started (e.g. 5s).
    #[arg(long, value_parser = parse_offset, value_name = "T")]
    pub to: Option<Duration>,
    /// Also write a self-contained HTML page with plots (no network needed).
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
}

pub fn exec(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let gpus = crate::tracefile::open(&args.file)?.header().gpus.clone();
    let devices = super::trace::resolve_devices(&args.devices, &gpus)?;
    let window = Window {
        from: args.from,
        to: args.to,
        devices: devices.clone(),
    };
    let mut r = report::replay(&args.file, &window)?;
    let seen: Vec<String> = r
        .analysis
        .agg
        .devices
        .keys()
        .map(|d| d.to_string())
        .collect();
    output::warn_unmatched(&devices, &seen);
    let path = args.file.display().to_string();
    for w in report::read_warnings(&path, &r.stats, r.file_len) {
        output::warn(&w);
    }
    let window_s = (r.last_ns.saturating_sub(r.from_ns)) as f64 / 1e9;
    let devices = r.analysis.agg.snapshot(window_s, &devices);
    if let Some(out) = &args.html {
        let page = html::page(&path, &r, &devices);
        write_private(out, page.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
        output::note(&format!("wrote {}", out.display()));
    }
    let result = if args.json {
        output::line(&serde_json::to_string(&report::json(&path, &r, &devices))?)
    } else {
        output::line(&report::text(&path, &r, &devices, window_s))
    };
    match result {
        Err(e) if e.is::<output::StdoutClosed>() => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e),
        Ok(()) => Ok(ExitCode::SUCCESS),
    }
}

/// Like recordings, 0600 (also when replacing a file): the page holds
/// addresses, process ids and the kernel's log lines.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::{
        io::Write as _, os::unix::fs::OpenOptionsExt as _, os::unix::fs::PermissionsExt as _,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)
}
