//! `gpudirect-trace report`: a trace file replayed through the live view's
//! aggregator and tables, for the whole recording or a time window.

#[cfg(test)]
mod budget_tests;
pub mod fleet;
pub mod html;
mod json;
mod keep;
pub mod series;
pub mod snapshot;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_golden;
mod warnings;

use std::{collections::HashMap, path::Path, sync::Arc, time::Duration};

use anyhow::Context as _;
use gpudirect_trace_common::{Counter, CounterKey};

use crate::{
    analysis::Analysis,
    memory_budget::Keeper,
    model::{Incident, TraceClock},
    tracefile::{self, Checkpoint, Header, Item, Loss, ReadStats},
};

/// Which part of a recording to report.
#[derive(Clone, Debug, Default)]
pub struct Window {
    /// Offsets from the recording's start.
    pub from: Option<Duration>,
    pub to: Option<Duration>,
    /// Only these devices (empty: all).
    pub devices: Vec<String>,
}

/// Whether `device` passes a `--device` list already resolved to the
/// recording's names (empty: every device). report and export share it.
pub fn device_wanted(wanted: &[String], device: &str) -> bool {
    wanted.is_empty() || wanted.iter().any(|w| w == device)
}

/// Devices a report keeps apart; the rest are one row, `(other devices)`,
/// with a warning. A GPU server's DMA-active devices (GPUs, NICs, NVMe,
/// switches' functions) are a few dozen; each kept device costs up to
/// ~0.9 MB (its histograms, 20 KB each before they grow, and its page
/// series), measured with heaptrack on a crafted 4096-device file: 128 of
/// them keep `report` of any file under its 256 MiB bound.
pub const MAX_DEVICES: usize = 128;
/// What a kept loss record costs the reader's memory budget.
const LOSS_BYTES: usize = 32;

use self::keep::{keep, keep_name, release, CheckpointDevices};
pub use self::{
    json::{json, json_doc, ReportJson},
    warnings::{clip_warnings, read_warnings, warnings},
};

/// Everything a report shows, from one pass over the file: the same
/// analysis (tables and ledger) the live session built, fed the same
/// inputs in the same order.
pub struct Replay {
    pub header: Header,
    pub analysis: Analysis,
    pub losses: Vec<Loss>,
    pub stats: ReadStats,
    /// Window bounds, CLOCK_MONOTONIC ns.
    pub from_ns: u64,
    pub to_ns: u64,
    /// Last event or record time seen inside the window.
    pub last_ns: u64,
    /// The page's time series of the wanted devices (bounded: `series`).
    pub series: series::Series,
    /// Kernel counter source used for the tables, if any.
    pub counters: Option<&'static str>,
    /// Tracepoint hits counted in-kernel in the window, where checkpoints
    /// bracket it.
    pub kernel_hits: Option<u64>,
    pub file_len: u64,
    pub window: Window,
    /// A flight-recorder snapshot's triggers after the one that opened it.
    pub later_triggers: Vec<crate::tracefile::Trigger>,
    /// A snapshot's trigger device at the trigger (see `snapshot`).
    pub lead: Option<snapshot::Lead>,
    /// The recording's last timestamp, whatever the window.
    pub end_ns: u64,
    /// Loss records past the reader's memory budget: not listed, their
    /// losses counted here (`losses_total` includes them).
    pub losses_unlisted: u64,
    pub lost_unlisted: u64,
    /// Checkpoint counter rows left out for the budget.
    pub counter_rows_dropped: u64,
}

impl Replay {
    /// Events lost in the window (saturating: LOSS blocks may be crafted).
    pub fn losses_total(&self) -> u64 {
        self.losses
            .iter()
            .fold(self.lost_unlisted, |a, l| a.saturating_add(l.lost))
    }

    /// How long a flight-recorder snapshot's recording went on after its
    /// trigger: what the file holds, at most the `--after` asked (a
    /// recorder stopped early, by SIGTERM, holds less).
    pub fn after_trigger_ns(&self) -> Option<(u64, u64)> {
        let info = self.header.snapshot.as_ref()?;
        let held = self.end_ns.saturating_sub(info.trigger.at_ns);
        Some((held.min(info.after_ns), info.after_ns))
    }

    pub fn clock(&self) -> &TraceClock {
        self.analysis.clock()
    }

    pub fn seconds(&self, ts: u64) -> f64 {
        self.clock().rel_s(ts)
    }

    pub fn wanted(&self, device: &str) -> bool {
        device_wanted(&self.window.devices, device)
    }

    /// The incidents of the window on the wanted devices, in order.
    pub fn incidents(&self) -> impl Iterator<Item = &Incident> + '_ {
        self.analysis
            .ledger
            .incidents()
            .iter()
            .filter(|i| self.wanted(&i.device))
    }
}

/// The clock of a recording: its header's start.
pub fn clock_of(h: &Header) -> TraceClock {
    TraceClock::new(h.start_ts_ns, h.start_unix_ns)
}

pub fn replay(file: &Path, window: &Window) -> anyhow::Result<Replay> {
    replay_from(file, tracefile::open(file)?, window)
}

/// Replays an opened recording: the file is opened once, because it may be
/// a FIFO whose bytes a second open would not see again.
pub fn replay_from<R: std::io::Read>(
    file: &Path,
    mut reader: tracefile::TraceReader<R>,
    window: &Window,
) -> anyhow::Result<Replay> {
    let header = reader.header().clone();
    let span = tracefile::Span::of(&header, window.from, window.to)?;
    let (from_ns, to_ns) = (span.from_ns, span.to_ns.unwrap_or(u64::MAX));
    // Everything the replay keeps (tables, mappings, handles, incidents,
    // names, stacks, series, ...) is within one budget, whatever the file
    // asks (memory_budget).
    crate::memory_budget::limit_reader();
    let mut analysis = Analysis::new(clock_of(&header));
    analysis.agg = crate::aggregate::Aggregator::with_max_devices(MAX_DEVICES);
    analysis.agg.gpus = header.gpus.clone();
    analysis.set_devices(&header.devices);
    if let Some(setup) = &header.checks {
        analysis.enable_checks(
            setup,
            header
                .devices
                .iter()
                .map(|d| (d.bus_id.as_str(), d.driver.as_deref())),
        );
    }
    let mut r = Replay {
        analysis,
        header,
        losses: Vec::new(),
        stats: ReadStats::default(),
        from_ns,
        to_ns,
        last_ns: from_ns,
        series: series::Series::new(from_ns),
        counters: None,
        kernel_hits: None,
        file_len: std::fs::metadata(file).map(|m| m.len()).unwrap_or(0),
        window: window.clone(),
        later_triggers: Vec::new(),
        lead: None,
        end_ns: 0,
        losses_unlisted: 0,
        lost_unlisted: 0,
        counter_rows_dropped: 0,
    };
    let mut cp_devices = CheckpointDevices::default();
    // A snapshot: what led to its trigger, on the trigger's device.
    let trigger_at = r.header.snapshot.as_ref().map(|s| s.trigger.at_ns);
    if let Some(dev) = r
        .header
        .snapshot
        .as_ref()
        .and_then(|s| s.trigger.incident.as_ref())
        .map(|i| i.device.clone())
    {
        r.lead = Some(snapshot::Lead {
            device: dev,
            ..Default::default()
        });
    }
    let mut captured = false;
    // A snapshot's checkpoints count from the session's start: its first one
    // is the base of the counts it covers.
    let is_snapshot = r.header.snapshot.is_some();
    let mut base: Option<Checkpoint> = None;
    let mut last: Option<Checkpoint> = None;
    let mut end_seen = 0u64;
    while let Some(item) = reader
        .next_item()
        .with_context(|| format!("reading {}", file.display()))?
    {
        let ts = match &item {
            Item::Event { record, .. } => record.event().ts_ns,
            Item::Loss(l) => l.ts_ns,
            Item::Checkpoint(cp) => cp.ts_ns,
            Item::End(e) => e.ts_ns,
            Item::LogFault(f) => f.timestamp_ns.unwrap_or(0),
            Item::Trigger(t) => t.at_ns,
            Item::Driver(c) => c.ts_ns,
            Item::Stacks(_) => 0,
            Item::Names(_) | Item::Nvml(_) => 0,
        };
        // The recording's last timestamp, whatever the window.
        end_seen = end_seen.max(ts);
        // The loss checks the recorder made, at the same places: misuse
        // findings become incidents here as they did live.
        match &item {
            Item::Checkpoint(cp) => drop(r.analysis.confirm(cp.lost_total)),
            Item::End(e) => drop(r.analysis.confirm(e.lost_total)),
            _ => {}
        }
        // A checkpoint is kept (the window's first and last) with its rows
        // folded to the devices a report keeps, within the budget.
        let item = match item {
            Item::Checkpoint(cp) => {
                Item::Checkpoint(cp_devices.fold(cp, &r.analysis.agg, &mut r.counter_rows_dropped))
            }
            other => other,
        };
        match item {
            Item::Event { record, device } => {
                if !span.holds(ts) {
                    continue;
                }
                // Past MAX_DEVICES, one "(other devices)" row everywhere.
                let device = r.analysis.agg.admit(&device);
                if let (Some(at), Some(lead), false) = (trigger_at, r.lead.as_mut(), captured) {
                    if ts > at {
                        let incidents: Vec<&Incident> =
                            r.analysis.ledger.incidents().iter().collect();
                        snapshot::capture(lead, &r.analysis.agg, at, &incidents);
                        captured = true;
                    } else {
                        snapshot::count_lead(lead, at, &device, record.event().kind, ts);
                    }
                }
                r.last_ns = r.last_ns.max(ts);
                r.analysis.record(&record, &device);
                if !r.wanted(&device) {
                    continue;
                }
                r.series.event(&record, &device, &r.analysis.agg);
            }
            Item::Loss(l) if span.holds(l.ts_ns) => {
                r.last_ns = r.last_ns.max(l.ts_ns);
                if crate::memory_budget::take_or_drop(Keeper::Losses, LOSS_BYTES) {
                    r.losses.push(l);
                } else {
                    r.losses_unlisted += 1;
                    r.lost_unlisted = r.lost_unlisted.saturating_add(l.lost);
                }
            }
            Item::Checkpoint(cp) if cp.ts_ns < span.lo_ns => keep(&mut base, cp),
            Item::Checkpoint(cp) if is_snapshot && window.from.is_none() && base.is_none() => {
                r.last_ns = r.last_ns.max(cp.ts_ns);
                keep(&mut base, cp);
            }
            Item::Checkpoint(cp) if span.before_end(cp.ts_ns) => {
                r.last_ns = r.last_ns.max(cp.ts_ns);
                r.series.checkpoint(&cp);
                keep(&mut last, cp);
            }
            Item::Checkpoint(cp) => release(&cp),
            Item::End(e) if span.holds(e.ts_ns) => r.last_ns = r.last_ns.max(e.ts_ns),
            Item::LogFault(f) if f.timestamp_ns.is_none_or(|t| span.holds(t)) => {
                r.analysis.log_fault(*f);
            }
            Item::Trigger(t) => {
                let bytes = serde_json::to_vec(&t).map_or(0, |v| v.len()) + 64;
                if crate::memory_budget::take_or_drop(Keeper::Triggers, bytes) {
                    r.later_triggers.push(*t);
                }
            }
            Item::Names(names) => {
                for n in names {
                    keep_name(&mut r.analysis.agg.names, n);
                }
                r.analysis.name_incidents();
            }
            Item::Nvml(s) => r.analysis.nvml(*s),
            Item::Stacks(l) => r.analysis.add_stacks(&l),
            Item::Driver(c) => {
                let device: std::sync::Arc<str> = std::sync::Arc::from(c.device.as_str());
                r.analysis
                    .driver_change(&device, c.driver.as_deref(), c.ts_ns);
            }
            _ => {}
        }
    }
    r.stats = reader.stats().clone();
    // (A file of a header alone ends where it starts.)
    r.end_ns = end_seen.max(r.header.start_ts_ns);
    r.analysis.fill_stacks();
    if let (Some(at), Some(lead), false) = (trigger_at, r.lead.as_mut(), captured) {
        let incidents: Vec<&Incident> = r.analysis.ledger.incidents().iter().collect();
        snapshot::capture(lead, &r.analysis.agg, at, &incidents);
    }
    if let Some(to_ns) = span.to_ns {
        // A window given by --to ends there (or where the recording does).
        r.last_ns = to_ns.min(end_seen).max(r.last_ns);
    }
    // Kernel counters are loss-free: use them where they describe the
    // window (whole file), or where they are the only data (aggregate-only).
    if let Some(last) = last {
        let whole = window.from.is_none() && window.to.is_none();
        // Saturating: a crafted file's counters must not panic or wrap.
        let hits = |c: &Checkpoint| c.hits.iter().fold(0u64, |a, &x| a.saturating_add(x));
        // A snapshot with a single checkpoint has no window to count over.
        let base = base.filter(|b| b.ts_ns != last.ts_ns || !is_snapshot);
        r.kernel_hits = Some(hits(&last).saturating_sub(base.as_ref().map_or(0, hits)));
        if whole || r.header.aggregate_only {
            let rows = counter_delta(base.as_ref(), &last);
            r.analysis.agg.apply_kernel_counters(&rows);
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

/// The report as text: the live view's tables and incident list for the
/// window, then what the file itself said (losses, counter source).
pub fn text(
    path: &str,
    r: &Replay,
    devices: &[crate::aggregate::DeviceSnapshot],
    window_s: f64,
) -> String {
    use std::fmt::Write as _;
    let h = &r.header;
    let started = r
        .clock()
        .wall(h.start_ts_ns)
        .map(|w| format!(" (started {w})"))
        .unwrap_or_default();
    let mut s = format!(
        "report of {path}: host {}, recorded by gpudirect-trace {}{}\nwindow {:.3}s..{:.3}s of the recording{started}{}\n",
        h.hostname,
        h.tool_version,
        // An imported ftrace text knows no boot id.
        if h.boot_id.is_empty() {
            String::new()
        } else {
            format!(", boot {}", h.boot_id)
        },
        r.seconds(r.from_ns),
        r.seconds(r.last_ns),
        if h.command.is_empty() {
            String::new()
        } else {
            format!(", command: {}", h.command.join(" "))
        }
    );
    if let Some(info) = &h.snapshot {
        let incidents: Vec<&Incident> = r.incidents().collect();
        s.push_str(&snapshot::text(
            info,
            r.lead.as_ref(),
            &incidents,
            r.clock(),
            r.after_trigger_ns(),
        ));
        for t in &r.later_triggers {
            s.push_str(&format!(
                "  later trigger {} ({}) at {:.6}s: {}\n",
                t.name,
                t.label,
                r.seconds(t.at_ns),
                t.suppressed.as_deref().unwrap_or("")
            ));
        }
    }
    let lost = r.losses_total();
    let attached = h.probes.iter().filter(|p| p.status == "attached").count();
    s.push_str(&crate::render::live_text(
        devices,
        &crate::render::Totals {
            kernel: &h.kernel_release,
            attached,
            elapsed: window_s,
            events: r.analysis.agg.events,
            kernel_hits: r.kernel_hits,
            lost,
            // The file's loss records already include kernel-skipped runs.
            missed: 0,
            decode_errors: 0,
            aggregate_only: h.aggregate_only,
            final_summary: true,
        },
    ));
    let a = &r.analysis;
    s.push_str(&crate::render::gpus_text(
        &a.agg.gpus,
        a.nvml_first.as_ref(),
        a.nvml_latest.as_ref(),
    ));
    s.push_str(&crate::render::processes_text(devices));
    s.push_str(&crate::render::latency_text(devices));
    s.push_str(&crate::render::invalidations_text(
        &r.analysis.agg.unit_rows(),
        devices,
    ));
    s.push_str(&crate::render::translation_text(devices));
    s.push_str(&crate::render::misuse_text(
        r.analysis.checker.as_ref().map(|c| &c.stats),
    ));
    let incidents: Vec<&Incident> = r.incidents().collect();
    let skip = incidents.len().saturating_sub(64);
    s.push_str(&crate::render::incidents_text(
        incidents.iter().skip(skip).copied(),
        skip as u64 + r.analysis.ledger.evicted(),
    ));
    s.push_str(&crate::render::timelines_text(&r.analysis.timelines()));
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
        let more = (r.losses.len() as u64).saturating_sub(20) + r.losses_unlisted;
        if more > 0 {
            let _ = writeln!(s, "  ... {more} more loss records");
        }
    }
    // What the file made the report drop or cut, in the report itself too.
    let cuts: Vec<String> = clip_warnings(&r.stats)
        .into_iter()
        .chain(crate::memory_budget::note())
        .collect();
    for c in cuts {
        let _ = writeln!(s, "\nnote: {c}");
    }
    s
}
