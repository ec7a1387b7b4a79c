//! `gpudirect-trace export`: a trace file as JSON lines, Chrome/Perfetto
//! trace-event JSON, or HdrHistogram interval logs (V2) of mapped sizes.

use std::{
    collections::BTreeMap,
    io::{self, BufWriter, Write},
    path::PathBuf,
    process::ExitCode,
    time::{Duration, UNIX_EPOCH},
};

use anyhow::Context as _;
use gpudirect_trace_common::kind;
use hdrhistogram::{
    serialization::{interval_log, V2Serializer},
    Histogram,
};

#[cfg(test)]
mod budget_tests;
mod chrome;
#[cfg(test)]
mod golden_tests;
mod records;
mod redact;

use self::records::{EventRecord, FaultRecord, LossRecord, StacksRecord};
pub use self::redact::{Redactor, MAX_PSEUDONYMS};
use crate::{
    aggregate::record as hist_record,
    decode::Record,
    memory_budget::{self, Keeper},
    outfile, sanitize,
    tracefile::{self, Header, Item},
};

/// The output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line: every event, log fault and loss record.
    Jsonl,
    /// Chrome trace-event JSON: one track per device, mappings as spans.
    Chrome,
    /// HdrHistogram V2 interval logs of mapped sizes per device and operation.
    Hdr,
}

/// What to export, where to.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    pub file: PathBuf,
    pub format: Format,
    /// Output file (None: stdout).
    pub output: Option<PathBuf>,
    /// Pseudonyms for physical addresses.
    pub redact: bool,
    /// How the output file is created.
    pub out: outfile::Options,
    /// Only what happened in this window of offsets from the recording's
    /// start (events, losses, faults), as `report --from/--to` counts it.
    pub from: Option<Duration>,
    pub to: Option<Duration>,
    /// Only the events and log faults of these devices, as the recording
    /// names them (`report --device`'s filter); empty: every device.
    pub devices: DeviceFilter,
}

/// `--device` of an export: the names the values became (for the
/// filter), and the values as typed (for the end's note on a value that
/// matched nothing).
#[derive(Clone, Debug, Default)]
pub struct DeviceFilter {
    pub wanted: Vec<String>,
    pub typed: Vec<String>,
}

#[cfg(test)]
impl ExportOptions {
    /// `export FILE --format FORMAT -o OUT [--redact]`, nothing else asked:
    /// the tests' export of a whole recording.
    pub(crate) fn whole(
        file: &std::path::Path,
        format: Format,
        out: &std::path::Path,
        redact: bool,
    ) -> Self {
        Self {
            file: file.to_owned(),
            format,
            output: Some(out.to_owned()),
            redact,
            out: Default::default(),
            from: None,
            to: None,
            devices: Default::default(),
        }
    }
}

impl DeviceFilter {
    fn keeps(&self, device: &str) -> bool {
        crate::report::device_wanted(&self.wanted, device)
    }
}

/// Whether an export keeps `item`: what has a time, inside the window;
/// what has none (names, stacks, a fault without a time) is kept; an event
/// or a log fault of a device, only if the filter wants the device (a
/// fault naming none, only without a filter). Losses are the recording's
/// and stay.
fn keeps(span: &tracefile::Span, devices: &DeviceFilter, item: &Item) -> bool {
    match item {
        Item::Event { record, device } => span.holds(record.event().ts_ns) && devices.keeps(device),
        Item::Loss(l) => span.holds(l.ts_ns),
        Item::LogFault(f) => {
            f.timestamp_ns.is_none_or(|t| span.holds(t))
                && (devices.wanted.is_empty()
                    || f.device.as_deref().is_some_and(|d| devices.keeps(d)))
        }
        _ => true,
    }
}

/// The recording's devices an export names in the note on a `--device`
/// that matched none: as many as a report keeps apart (a crafted file's
/// table may hold 65536 names, which the reader keeps anyway).
const MAX_SEEN: usize = crate::report::MAX_DEVICES;

pub fn run(args: &ExportOptions) -> anyhow::Result<ExitCode> {
    let reader =
        tracefile::open(&args.file).map_err(|e| crate::ftrace::with_import_hint(&args.file, e))?;
    run_from(args, reader)
}

/// `run` of a recording already opened (the command opens it once, to
/// resolve `--device` names from its header: the file may be a FIFO).
pub fn run_from(
    args: &ExportOptions,
    mut reader: tracefile::TraceReader<std::io::BufReader<std::fs::File>>,
) -> anyhow::Result<ExitCode> {
    // Everything an export keeps (open spans, tracks, pseudonyms,
    // histograms) is within one budget, whatever the file asks.
    memory_budget::limit_reader();
    // One field wherever it is shown (a file name may hold a line feed).
    let path = crate::sanitize::text(&args.file.display().to_string()).into_owned();
    // Before the output is made: a wrong window leaves no file behind.
    let header = reader.header().clone();
    let span = tracefile::Span::of(&header, args.from, args.to)?;
    // Like recordings: unredacted exports hold physical addresses (0600).
    let mut file = match &args.output {
        Some(p) => Some(outfile::create(p, args.out)?),
        None => None,
    };
    let sink: Box<dyn Write + '_> = match file.as_mut() {
        Some(f) => Box::new(f),
        None => Box::new(io::stdout().lock()),
    };
    let mut out = BufWriter::with_capacity(1 << 20, sink);
    let mut red = Redactor::for_header(args.redact, &header);
    let mut items = std::iter::from_fn(|| reader.next_item().transpose())
        .filter(|i| {
            i.as_ref()
                .map_or(true, |item| keeps(&span, &args.devices, item))
        })
        .map(|i| i.map(tasks_apart));
    let result = match args.format {
        Format::Jsonl => jsonl(&header, &mut items, &mut out, &mut red),
        Format::Chrome => chrome::chrome(&header, &mut items, &mut out, &mut red),
        Format::Hdr => hdr(&header, &mut items, &mut out),
    }
    .and_then(|()| out.flush());
    drop(out);
    drop(items);
    match result {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        // A failed export leaves no partial file (and an old one in place).
        other => other.with_context(|| format!("exporting {path}"))?,
    }
    if let Some(f) = file {
        f.commit()?;
    }
    if !args.devices.wanted.is_empty() {
        // The file's device table: the devices its events named.
        let mut seen: Vec<String> = reader.devices().iter().map(|d| d.to_string()).collect();
        seen.sort_unstable();
        seen.dedup();
        seen.truncate(MAX_SEEN);
        crate::output::warn_unmatched(&args.devices.wanted, &args.devices.typed, &seen);
    }
    let len = std::fs::metadata(&args.file).map(|m| m.len()).unwrap_or(0);
    for w in crate::report::read_warnings(&path, reader.stats(), len) {
        crate::output::warn(&w);
    }
    for w in crate::report::clip_warnings(reader.stats()) {
        crate::output::warn(&w);
    }
    if let Some(n) = red.note() {
        crate::output::warn(&n);
    }
    if let Some(n) = memory_budget::note() {
        crate::output::warn(&n);
    }
    Ok(ExitCode::SUCCESS)
}

/// The `device` (and Chrome track) of records about tasks rather than a
/// device: a process exit is recorded under dev 0, whose name,
/// "(iommu, unattributed)", means unattributed IOMMU activity.
pub const TASKS: &str = "(processes)";

fn tasks_apart(item: Item) -> Item {
    match item {
        Item::Event { record, .. } if !kind::info(record.event().kind).class.about_devices() => {
            Item::Event {
                record,
                device: TASKS.into(),
            }
        }
        other => other,
    }
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

type Items<'a> = dyn Iterator<Item = io::Result<Item>> + 'a;

fn jsonl(
    h: &Header,
    items: &mut Items<'_>,
    out: &mut impl Write,
    red: &mut Redactor,
) -> io::Result<()> {
    for item in items {
        match item? {
            Item::Event { record, device } => {
                line(out, &EventRecord::new(h, &record, &device, red))?
            }
            Item::Loss(l) => line(out, &LossRecord::new(h, &l))?,
            Item::LogFault(f) => line(out, &FaultRecord::new(h, &f))?,
            Item::Stacks(l) => line(out, &StacksRecord::new(&l))?,
            _ => continue,
        }
    }
    Ok(())
}

/// One JSON line.
fn line(out: &mut impl Write, record: &impl serde::Serialize) -> io::Result<()> {
    serde_json::to_writer(&mut *out, record)?;
    out.write_all(b"\n")
}

/// Records of DMA-API calls (their aux may carry a stack id).
fn is_dma_api(k: u16) -> bool {
    kind::info(k).stack
}

/// Which mapping family an event opens or closes (for map→unmap spans).
fn span_level(k: u16) -> Option<(u8, bool)> {
    crate::aggregate::span_of(k)
}

/// Interval-log tags may not contain spaces or commas; a device name is
/// one field, escaped as everywhere (`sanitize::text`).
pub fn hdr_tag(device: &str, op: &str) -> String {
    sanitize::text(&format!("{device}/{op}")).replace([' ', ','], "_")
}

/// What one histogram holds, as charged to the reader's memory budget.
/// (Twice its counts: growth is charged so, `aggregate::record`, and a
/// fresh one alike, so what an interval gives back is what it took.)
fn hist_bytes(h: &Histogram<u64>) -> usize {
    2 * h.distinct_values() * std::mem::size_of::<u64>()
}

fn hdr(h: &Header, items: &mut Items<'_>, out: &mut impl Write) -> io::Result<()> {
    const INTERVAL_NS: u64 = 1_000_000_000;
    let start = UNIX_EPOCH + Duration::from_nanos(h.start_unix_ns);
    let mut ser = V2Serializer::new();
    let mut log = interval_log::IntervalLogWriterBuilder::new()
        .add_comment(&format!(
            "gpudirect-trace mapped sizes in bytes per device/operation, host {}, kernel {}",
            sanitize::text(&h.hostname),
            sanitize::text(&h.kernel_release)
        ))
        .with_start_time(start)
        .with_base_time(start)
        .begin_log_with(out, &mut ser)?;
    // Bounded per interval (the file may name any number of devices and
    // feed u64-range sizes: 23.4 GB for a 138 KB file of 65 536 devices):
    // at most HDR_TAGS histograms, the rest folded into one per operation,
    // all of them and their growth within the reader's memory budget (given
    // back when an interval is written).
    const HDR_TAGS: usize = 1024;
    let mut hists: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    let mut interval = 0u64;
    let mut flush =
        |hists: &mut BTreeMap<String, Histogram<u64>>, interval: u64| -> io::Result<()> {
            for (tag, hist) in hists.iter() {
                log.write_histogram(
                    hist,
                    Duration::from_nanos(interval * INTERVAL_NS),
                    Duration::from_nanos(INTERVAL_NS),
                    interval_log::Tag::new(tag),
                )
                .map_err(|e| io::Error::other(e.to_string()))?;
                memory_budget::give(Keeper::Histograms, hist_bytes(hist) + tag.len());
            }
            hists.clear();
            Ok(())
        };
    for item in items {
        let Item::Event { record, device } = item? else {
            continue;
        };
        let e = record.event();
        let op = match e.kind {
            kind::DMA_MAP | kind::DMA_MAP_SG => "dma_map",
            kind::IOMMU_MAP => "iommu_map",
            kind::DMA_ALLOC => "dma_alloc",
            kind::SWIOTLB_BOUNCED => "swiotlb_bounced",
            _ => continue,
        };
        // Slightly out-of-order events go into the current interval.
        let i = e.ts_ns.saturating_sub(h.start_ts_ns) / INTERVAL_NS;
        if i > interval {
            flush(&mut hists, interval)?;
            interval = i;
        }
        let mut tag = hdr_tag(&device, op);
        if !hists.contains_key(&tag) {
            let fresh = Histogram::new(3).expect("3 significant digits is valid");
            if hists.len() >= HDR_TAGS
                || !memory_budget::take_or_drop(Keeper::Histograms, hist_bytes(&fresh) + tag.len())
            {
                tag = hdr_tag(crate::aggregate::FOLDED_DEVICES, op);
            }
            if !hists.contains_key(&tag) {
                memory_budget::charge(Keeper::Histograms, hist_bytes(&fresh) + tag.len());
                hists.insert(tag.clone(), fresh);
            }
        }
        let hist = hists.get_mut(&tag).expect("inserted above");
        match &record {
            Record::Sg(sg) => {
                let n = (sg.n_lens as usize).min(sg.lens.len());
                for &l in sg.lens[..n].iter().filter(|&&l| l > 0) {
                    hist_record(hist, u64::from(l));
                }
            }
            _ => hist_record(hist, e.size),
        }
    }
    flush(&mut hists, interval)
}
