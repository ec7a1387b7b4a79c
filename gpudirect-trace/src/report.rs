//! `gpudirect-trace report`: a trace file replayed through the live view's
//! aggregator and tables, for the whole recording or a time window.

mod html;
#[cfg(test)]
mod tests;

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

use anyhow::Context as _;
use clap::Args;
use gpudirect_trace_common::{kind, Counter, CounterKey};
use serde_json::json;

use crate::{
    aggregate::{fault_access, Aggregator, DeviceSnapshot, Notable},
    decode::{c_string, dir_name, kind_name, Record},
    output, render,
    tracefile::{self, Checkpoint, Header, Item, Loss, ReadStats},
};

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Trace file written by `gpudirect-trace record`.
    pub file: PathBuf,
    /// Show only this device (PCI bus id or device name); repeat for several.
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
    #[command(flatten)]
    pub out: crate::outfile::OutputFlags,
}

/// A time offset: like `--duration`, but zero is allowed.
pub fn parse_offset(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 0s, 1.5s, 2m)"))
}

/// Width of the event-rate buckets kept for plots.
pub const BUCKET_NS: u64 = 100_000_000;
/// Devices a report keeps apart (as `serve --max-devices` defaults to);
/// the rest are one row, `(other devices)`, with a warning.
pub const MAX_DEVICES: usize = 256;
/// Growth of the aggregator's histograms in a report (aggregate::
/// limit_hist_growth): with the device cap, what a crafted file can make
/// them take stays near 170 MiB (256 devices' initial histograms ~106 MiB).
pub const HIST_GROWTH: usize = 64 << 20;
/// Rate buckets kept in all devices together (32 MiB): one event stamped
/// far after the start used to size a device's vector up to 2^24 buckets
/// (128 MiB), per device, from a few bytes of a crafted file.
pub const MAX_RATE_CELLS: usize = 4 << 20;

/// Everything a report shows, from one pass over the file.
pub struct Replay {
    pub header: Header,
    pub agg: Aggregator,
    /// Faults, Xids, map errors and IOMMU changes in the window, in order.
    pub incidents: Vec<Notable>,
    pub losses: Vec<Loss>,
    /// Decoded faults (kernel log and iommu:io_page_fault) in the window, as
    /// `explain --json` objects.
    pub faults: Vec<serde_json::Value>,
    pub stats: ReadStats,
    /// Window bounds, CLOCK_MONOTONIC ns.
    pub from_ns: u64,
    pub to_ns: u64,
    /// Last event or record time seen inside the window.
    pub last_ns: u64,
    /// Events per device per `BUCKET_NS` since `from_ns`.
    pub rate: BTreeMap<Arc<str>, Vec<u64>>,
    /// Kernel counter source used for the tables, if any.
    pub counters: Option<&'static str>,
    pub kernel_hits: u64,
    pub file_len: u64,
}

impl Replay {
    /// Events lost in the window (saturating: LOSS blocks may be crafted).
    pub fn losses_total(&self) -> u64 {
        self.losses
            .iter()
            .fold(0u64, |a, l| a.saturating_add(l.lost))
    }

    pub fn seconds(&self, ts: u64) -> f64 {
        ts.saturating_sub(self.header.start_ts_ns) as f64 / 1e9
    }

    fn wanted(&self, filter: &[String], device: &str) -> bool {
        filter.is_empty() || filter.iter().any(|f| f == device)
    }

    /// A decoded fault: counted on its device when it came from the kernel
    /// log (tracepoint faults are events, already counted), listed if wanted.
    fn add_fault(&mut self, f: serde_json::Value, filter: &[String], xid_traced: bool) {
        let device = f["device"].as_str().unwrap_or("-").to_owned();
        let xid = f["xid"].as_u64().map(|x| x as u32);
        if f["source"] != "iommu-tracepoint" && !(xid.is_some() && xid_traced) {
            let n = f["count"].as_u64().unwrap_or(1).max(1);
            self.agg.count_fault(&Arc::from(device.as_str()), xid, n);
        }
        if self.wanted(filter, &device) {
            self.faults.push(f);
        }
    }
}

pub fn replay(
    file: &std::path::Path,
    from: Option<Duration>,
    to: Option<Duration>,
    filter: &[String],
) -> anyhow::Result<Replay> {
    let mut reader = tracefile::open(file)?;
    let header = reader.header().clone();
    let offset = |d: Duration| header.start_ts_ns.saturating_add(d.as_nanos() as u64);
    // Without --from, events stamped just before the header (between attach
    // and the header's clock reading) belong to the report too.
    let lo_ns = from.map_or(0, offset);
    let from_ns = from.map_or(header.start_ts_ns, offset);
    let to_ns = to.map_or(u64::MAX, offset);
    if to.is_some() && to_ns <= from_ns {
        anyhow::bail!("--to must be later than --from");
    }
    crate::aggregate::limit_hist_growth(HIST_GROWTH);
    let mut r = Replay {
        header,
        agg: Aggregator::with_max_devices(MAX_DEVICES),
        incidents: Vec::new(),
        losses: Vec::new(),
        faults: Vec::new(),
        stats: ReadStats::default(),
        from_ns,
        to_ns,
        last_ns: from_ns,
        rate: BTreeMap::new(),
        counters: None,
        kernel_hits: 0,
        file_len: std::fs::metadata(file).map(|m| m.len()).unwrap_or(0),
    };
    // As in the live session: with nvidia_dev_xid attached, the log's Xid
    // lines were already counted by the tracepoint.
    let xid_traced = r
        .header
        .probes
        .iter()
        .any(|p| p.name == "nvidia:nvidia_dev_xid" && p.status == "attached");
    let mut base: Option<Checkpoint> = None;
    let mut last: Option<Checkpoint> = None;
    let in_window = |ts: u64| ts >= lo_ns && (to.is_none() || ts < to_ns);
    let mut end_seen = 0u64;
    let mut rate_cells = 0usize;
    while let Some(item) = reader
        .next_item()
        .with_context(|| format!("reading {}", file.display()))?
    {
        let ts = match &item {
            Item::Event { record, .. } => record.event().ts_ns,
            Item::Loss(l) => l.ts_ns,
            Item::Checkpoint(cp) => cp.ts_ns,
            Item::End(e) => e.ts_ns,
            Item::Fault(f) => f["timestamp_ns"].as_u64().unwrap_or(0),
        };
        // The recording's last timestamp, whatever the window.
        end_seen = end_seen.max(ts);
        match item {
            Item::Event { record, device } => {
                let ts = record.event().ts_ns;
                if !in_window(ts) {
                    continue;
                }
                r.last_ns = r.last_ns.max(ts);
                r.agg.ingest(&record, &device);
                if !r.wanted(filter, &device) {
                    continue;
                }
                if let Some(n) = incident(&record, &device) {
                    r.incidents.push(n);
                }
                let b = (ts.saturating_sub(from_ns) / BUCKET_NS) as usize;
                let v = r.rate.entry(device).or_default();
                let grow = (b + 1).saturating_sub(v.len());
                if rate_cells + grow <= MAX_RATE_CELLS {
                    rate_cells += grow;
                    if v.len() <= b {
                        v.resize(b + 1, 0);
                    }
                    v[b] += 1;
                }
            }
            Item::Loss(l) if in_window(l.ts_ns) => {
                r.last_ns = r.last_ns.max(l.ts_ns);
                r.losses.push(l);
            }
            Item::Checkpoint(cp) if cp.ts_ns < lo_ns => base = Some(cp),
            Item::Checkpoint(cp) if to.is_none() || cp.ts_ns < to_ns => {
                r.last_ns = r.last_ns.max(cp.ts_ns);
                last = Some(cp);
            }
            Item::End(e) if in_window(e.ts_ns) => r.last_ns = r.last_ns.max(e.ts_ns),
            Item::Fault(f) if f["timestamp_ns"].as_u64().is_none_or(in_window) => {
                r.add_fault(f, filter, xid_traced);
            }
            _ => {}
        }
    }
    r.stats = reader.stats().clone();
    if to.is_some() {
        // A window given by --to ends there (or where the recording does).
        r.last_ns = to_ns.min(end_seen).max(r.last_ns);
    }
    // Kernel counters are loss-free: use them where they describe the
    // window (whole file), or where they are the only data (aggregate-only).
    if let Some(last) = last {
        let whole = from.is_none() && to.is_none();
        if whole || r.header.aggregate_only {
            let rows = counter_delta(base.as_ref(), &last);
            r.agg.apply_kernel_counters(&rows);
            // Saturating: a crafted file's counters must not panic or wrap.
            let sum = |h: &[u64]| h.iter().fold(0u64, |a, &x| a.saturating_add(x));
            r.kernel_hits =
                sum(&last.hits).saturating_sub(base.as_ref().map_or(0, |b| sum(&b.hits)));
            r.counters = Some(if whole {
                "kernel counters (loss-free) of the whole recording"
            } else {
                "kernel counter checkpoints around the window (1 s granularity)"
            });
        }
    }
    Ok(r)
}

fn counter_delta(
    base: Option<&Checkpoint>,
    last: &Checkpoint,
) -> Vec<(Arc<str>, CounterKey, Counter)> {
    let mut before: HashMap<(&str, u32, u32), (u64, u64)> = HashMap::new();
    for c in base.map(|b| &b.counters[..]).unwrap_or(&[]) {
        before.insert((&c.device, c.kind, c.dir), (c.count, c.bytes));
    }
    last.counters
        .iter()
        .map(|c| {
            let (n, b) = before
                .get(&(&*c.device, c.kind, c.dir))
                .copied()
                .unwrap_or((0, 0));
            let key = CounterKey {
                dev: 0,
                kind: c.kind,
                dir: c.dir,
            };
            let val = Counter {
                count: c.count.saturating_sub(n),
                bytes: c.bytes.saturating_sub(b),
            };
            (c.device.clone(), key, val)
        })
        .collect()
}

/// The rare events a report lists one by one.
fn incident(record: &Record, device: &str) -> Option<Notable> {
    let e = record.event();
    let (address, detail) = match (record, e.kind) {
        (Record::Xid(x), _) => (None, format!("Xid {}: {}", x.xid, c_string(&x.msg))),
        (_, kind::IO_PAGE_FAULT) => (
            Some(format!("{:#x}", e.addr)),
            format!(
                "IOMMU page fault ({}, flags {:#x})",
                fault_access(e.aux),
                e.aux
            ),
        ),
        (_, kind::DMA_MAP_SG_ERR) => (
            None,
            format!(
                "dma_map_sg failed: error {} ({} entries, {})",
                e.aux as i64,
                e.size,
                dir_name(e.dir)
            ),
        ),
        (_, kind::GROUP_ADD_DEVICE | kind::GROUP_REMOVE_DEVICE) => {
            (None, format!("{} {}", kind_name(e.kind), e.aux))
        }
        (_, kind::DOMAIN_ATTACH | kind::DOMAIN_DETACH) => {
            (None, kind_name(e.kind).replace('_', " "))
        }
        _ => return None,
    };
    Some(Notable {
        ts_ns: e.ts_ns,
        kind: kind_name(e.kind),
        device: device.to_owned(),
        pid: e.pid,
        address,
        detail,
    })
}

/// Warnings about the file itself (truncation, damage, unclean end).
pub fn read_warnings(path: &str, stats: &ReadStats, file_len: u64) -> Vec<String> {
    let mut w = Vec::new();
    if let Some(at) = stats.truncated_at {
        w.push(format!(
            "{path} is cut short: readable up to byte offset {at} of {file_len} \
             (recorder killed or disk full?); the rest is ignored"
        ));
    } else if !stats.clean_end {
        w.push(format!(
            "{path} has no end block: the recorder did not finish (read all {file_len} bytes)"
        ));
    }
    if stats.corrupt_regions > 0 {
        w.push(format!(
            "{} damaged region(s) ({} bytes) skipped",
            stats.corrupt_regions, stats.skipped_bytes
        ));
    }
    if stats.unknown_blocks > 0 {
        w.push(format!(
            "{} block(s) of a newer format version skipped",
            stats.unknown_blocks
        ));
    }
    if stats.undecodable_blocks > 0 {
        w.push(format!(
            "{} block(s) with a valid checksum did not decode and were skipped",
            stats.undecodable_blocks
        ));
    }
    w
}

pub fn run(args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let mut r = replay(&args.file, args.from, args.to, &args.devices)?;
    let path = args.file.display().to_string();
    for w in read_warnings(&path, &r.stats, r.file_len) {
        output::warn(&w);
    }
    let clamped = crate::aggregate::hist_clamped();
    if clamped > 0 {
        output::warn(&format!(
            "{clamped} values past the histograms' memory limit were recorded at their \
             histogram's top (counts and maxima stay exact; percentiles above it do not)"
        ));
    }
    if r.agg.folded > 0 {
        output::warn(&format!(
            "the file names more than {MAX_DEVICES} devices: the others are counted together \
             as {}",
            crate::aggregate::FOLDED_DEVICES
        ));
    }
    let window_s = (r.last_ns.saturating_sub(r.from_ns)) as f64 / 1e9;
    let devices = r.agg.snapshot(window_s, &args.devices);
    if let Some(out) = &args.html {
        let page = html::page(&path, &r, &devices, &args.devices);
        let mut f = crate::outfile::create(out, args.out.into())?;
        std::io::Write::write_all(&mut f, page.as_bytes())
            .with_context(|| format!("writing {}", out.display()))?;
        f.commit()?;
        output::note(&format!("wrote {}", out.display()));
    }
    let lost = r.losses_total();
    let result = if args.json {
        output::line(&serde_json::to_string(&json!({
            "file": path,
            "header": r.header,
            "window": {"from_s": r.seconds(r.from_ns), "to_s": r.seconds(r.last_ns)},
            "devices": devices,
            "lost_events": lost,
            "losses": r.losses,
            "incidents": r.incidents,
            "faults": r.faults,
            "counters": r.counters,
            "read": r.stats,
            "warnings": read_warnings(&path, &r.stats, r.file_len),
        }))?)
    } else {
        output::line(&text(&path, &r, &devices, lost, window_s))
    };
    match result {
        Err(e) if e.is::<output::StdoutClosed>() => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e),
        Ok(()) => Ok(ExitCode::SUCCESS),
    }
}

fn text(path: &str, r: &Replay, devices: &[DeviceSnapshot], lost: u64, window_s: f64) -> String {
    use std::fmt::Write as _;
    let h = &r.header;
    let mut s = format!(
        "report of {path}: host {}, recorded by gpudirect-trace {}, boot {}\nwindow {:.3}s..{:.3}s of the recording{}\n",
        h.hostname,
        h.tool_version,
        h.boot_id,
        r.seconds(r.from_ns),
        r.seconds(r.last_ns),
        if h.command.is_empty() {
            String::new()
        } else {
            format!(", command: {}", h.command.join(" "))
        }
    );
    let attached = h.probes.iter().filter(|p| p.status == "attached").count();
    s.push_str(&render::live_text(
        devices,
        r.incidents.iter().rev().take(32).rev(),
        &render::Totals {
            kernel: &h.kernel_release,
            attached,
            elapsed: window_s,
            events: r.agg.events,
            kernel_hits: r.kernel_hits,
            lost,
            // The file's loss records already include kernel-skipped runs.
            missed: 0,
            decode_errors: 0,
            aggregate_only: h.aggregate_only,
            final_summary: true,
        },
    ));
    if r.incidents.len() > 32 {
        let _ = writeln!(
            s,
            "  ({} earlier ones: --json lists all)",
            r.incidents.len() - 32
        );
    }
    for (i, f) in r.faults.iter().enumerate().take(32) {
        if i == 0 {
            let _ = writeln!(s, "\nfaults decoded (kernel log and iommu:io_page_fault):");
        }
        let at = f["timestamp_ns"]
            .as_u64()
            .map(|t| format!("{:>12.6}s", r.seconds(t)))
            .unwrap_or_else(|| format!("{:>13}", "-"));
        let field = |k: &str| f[k].as_str().unwrap_or("-").to_owned();
        let _ = writeln!(
            s,
            "  {at}  {:<16} {:<14} {:<18} {}{}",
            field("source"),
            field("device"),
            field("address"),
            f["xid"]
                .as_u64()
                .map(|x| format!("Xid {x}: "))
                .unwrap_or_default(),
            field("reason"),
        );
        if let Some(m) = f["mapping_state"].as_str() {
            let _ = writeln!(s, "      mapping: {m}");
        }
    }
    if r.faults.len() > 32 {
        let _ = writeln!(s, "  ({} more: --json lists all)", r.faults.len() - 32);
    }
    if let Some(c) = r.counters {
        let _ = writeln!(
            s,
            "\ncounts from {c}; sizes and outstanding mappings from the event stream"
        );
    }
    if !r.losses.is_empty() {
        let _ = writeln!(s, "\nlost events (ring buffer full), {lost} in all:");
        for l in r.losses.iter().take(20) {
            let _ = writeln!(s, "  at {:>10.3}s  {:>10} lost", r.seconds(l.ts_ns), l.lost);
        }
        if r.losses.len() > 20 {
            let _ = writeln!(s, "  ... {} more loss records", r.losses.len() - 20);
        }
    }
    s
}
