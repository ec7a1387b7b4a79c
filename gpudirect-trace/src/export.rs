//! `gpudirect-trace export`: a trace file as JSON lines, Chrome/Perfetto
//! trace-event JSON, or HdrHistogram interval logs (V2) of mapped sizes.

use std::{
    collections::{BTreeMap, HashMap},
    io::{self, BufWriter, Write},
    path::PathBuf,
    process::ExitCode,
    sync::Arc,
    time::{Duration, UNIX_EPOCH},
};

use anyhow::Context as _;
use gpudirect_trace_common::kind;
use hdrhistogram::{
    serialization::{interval_log, V2Serializer},
    Histogram,
};
use serde_json::{json, Map, Value};

use crate::{
    aggregate::record_within as hist_record,
    decode::{c_string, dir_name, kind_name, Record},
    outfile,
    tracefile::{self, Header, Item, Loss},
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
}

pub fn run(args: &ExportOptions) -> anyhow::Result<ExitCode> {
    let mut reader = tracefile::open(&args.file)?;
    let path = args.file.display().to_string();
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
    let header = reader.header().clone();
    let mut items = std::iter::from_fn(|| reader.next_item().transpose());
    let result = match args.format {
        Format::Jsonl => jsonl(&header, &mut items, &mut out, args.redact),
        Format::Chrome => chrome(&header, &mut items, &mut out, args.redact),
        Format::Hdr => hdr(&header, &mut items, &mut out),
    }
    .and_then(|()| out.flush());
    drop(out);
    match result {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        // A failed export leaves no partial file (and an old one in place).
        other => other.with_context(|| format!("exporting {path}"))?,
    }
    if let Some(f) = file {
        f.commit()?;
    }
    let len = std::fs::metadata(&args.file).map(|m| m.len()).unwrap_or(0);
    for w in crate::report::read_warnings(&path, reader.stats(), len) {
        crate::output::warn(&w);
    }
    let clamped = crate::aggregate::hist_clamped();
    if clamped > 0 {
        crate::output::warn(&format!(
            "{clamped} sizes past the histograms' memory limit were recorded at their \
             histogram's top"
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// Distinct physical addresses given their own pseudonym (~48 MiB).
pub const MAX_PSEUDONYMS: usize = 1 << 20;

/// Stable per-file pseudonyms for physical addresses.
#[derive(Default)]
pub struct Redactor {
    on: bool,
    ids: HashMap<u64, u64>,
}

impl Redactor {
    pub fn new(on: bool) -> Self {
        Self {
            on,
            ids: HashMap::new(),
        }
    }

    pub fn phys(&mut self, v: u64) -> String {
        if !self.on || v == 0 {
            return format!("{v:#x}");
        }
        // Bounded (a crafted file may hold any number of distinct addresses):
        // past the limit new ones share one pseudonym, never their value.
        if self.ids.len() >= MAX_PSEUDONYMS && !self.ids.contains_key(&v) {
            return "p-more".to_owned();
        }
        let next = self.ids.len() as u64 + 1;
        format!("p{}", self.ids.entry(v).or_insert(next))
    }
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

/// The JSON form of one event (the `jsonl` line, the Chrome `args`).
pub fn event_json(h: &Header, r: &Record, device: &str, red: &mut Redactor) -> Map<String, Value> {
    let e = r.event();
    let mut m = Map::new();
    m.insert(
        "t_s".into(),
        json!(e.ts_ns.saturating_sub(h.start_ts_ns) as f64 / 1e9),
    );
    m.insert("ts_ns".into(), json!(e.ts_ns));
    m.insert("kind".into(), json!(kind_name(e.kind)));
    m.insert("device".into(), json!(device));
    m.insert("pid".into(), json!(e.pid));
    m.insert("tid".into(), json!(e.tid));
    // pid/tid then name the interrupted task, not the caller.
    if e.flags & gpudirect_trace_common::flags::IN_INTERRUPT != 0 {
        m.insert("context".into(), json!("interrupt"));
    }
    m.insert("dir".into(), json!(dir_name(e.dir)));
    m.insert("flags".into(), json!(e.flags));
    m.insert("addr".into(), json!(hex(e.addr)));
    m.insert("phys".into(), json!(red.phys(e.phys)));
    m.insert("size".into(), json!(e.size));
    m.insert("aux".into(), json!(e.aux));
    // With --stacks, DMA-API records carry their kernel stack's id in the
    // high half of aux; its frames are in the `"kind":"stacks"` lines.
    if h.checks.as_ref().is_some_and(|c| c.stacks) && is_dma_api(e.kind) {
        if let Some(id) = gpudirect_trace_common::aux_stack(e.aux) {
            m.insert("stack_id".into(), json!(id));
        }
    }
    match r {
        Record::Sg(sg) => {
            let n = (sg.n_lens as usize).min(sg.lens.len());
            m.insert("nents".into(), json!(sg.nents));
            m.insert("ents".into(), json!(sg.ents));
            m.insert("lens".into(), json!(&sg.lens[..n]));
        }
        Record::Xid(x) => {
            m.insert("xid".into(), json!(x.xid));
            m.insert("msg".into(), json!(c_string(&x.msg)));
            m.insert("msg_truncated".into(), json!(x.msg_truncated != 0));
        }
        Record::Event(_) => {}
    }
    m
}

fn loss_json(h: &Header, l: &Loss) -> Value {
    json!({
        "t_s": l.ts_ns.saturating_sub(h.start_ts_ns) as f64 / 1e9,
        "ts_ns": l.ts_ns,
        "kind": "lost_events",
        "lost": l.lost,
        "total": l.total,
    })
}

/// A fault decoded from the kernel log as a JSON line: the fault's keys
/// (as `explain --json` prints them) plus `kind` "decoded_fault" and `t_s`.
fn fault_json(h: &Header, f: &crate::model::Fault) -> Value {
    let mut v = serde_json::to_value(f).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("kind".into(), json!("decoded_fault"));
        let clock = crate::report::clock_of(h);
        m.insert(
            "t_s".into(),
            json!(f.timestamp_ns.map(|t| clock.stamp(t).t_s)),
        );
    }
    v
}

type Items<'a> = dyn Iterator<Item = io::Result<Item>> + 'a;

fn jsonl(h: &Header, items: &mut Items<'_>, out: &mut impl Write, redact: bool) -> io::Result<()> {
    let mut red = Redactor::new(redact);
    for item in items {
        let v = match item? {
            Item::Event { record, device } => {
                Value::Object(event_json(h, &record, &device, &mut red))
            }
            Item::Loss(l) => loss_json(h, &l),
            Item::LogFault(f) => fault_json(h, &f),
            Item::Stacks(l) => json!({"kind": "stacks", "stacks": l}),
            _ => continue,
        };
        serde_json::to_writer(&mut *out, &v)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Records of DMA-API calls (their aux may carry a stack id).
fn is_dma_api(k: u16) -> bool {
    kind::info(k).stack
}

/// Which mapping family an event opens or closes (for map→unmap spans).
fn span_level(k: u16) -> Option<(u8, bool)> {
    crate::aggregate::span_of(k)
}

const MAX_OPEN_SPANS: usize = 1 << 20;

/// Mappings seen but not yet unmapped: (track, level, address) to the map's
/// time and arguments.
type OpenSpans = HashMap<(usize, u8, u64), (u64, Map<String, Value>)>;

fn chrome(h: &Header, items: &mut Items<'_>, out: &mut impl Write, redact: bool) -> io::Result<()> {
    let mut red = Redactor::new(redact);
    let us = |ts: u64| ts.saturating_sub(h.start_ts_ns) as f64 / 1e3;
    let mut tids: HashMap<Arc<str>, usize> = HashMap::new();
    let mut open: OpenSpans = HashMap::new();
    let mut first = true;
    let mut emit = |out: &mut dyn Write, v: Value| -> io::Result<()> {
        out.write_all(if first { b"\n" } else { b",\n" })?;
        first = false;
        serde_json::to_writer(&mut *out, &v).map_err(io::Error::from)
    };
    write!(out, "{{\"displayTimeUnit\":\"ns\",\"otherData\":")?;
    serde_json::to_writer(
        &mut *out,
        &json!({"host": h.hostname, "kernel": h.kernel_release, "clock": h.clock, "boot_id": h.boot_id}),
    )?;
    write!(out, ",\"traceEvents\":[")?;
    emit(
        out,
        json!({"ph": "M", "pid": 1, "name": "process_name", "args": {"name": format!("DMA on {}", h.hostname)}}),
    )?;
    let mut last_ts = h.start_ts_ns;
    for item in items {
        let (record, device) = match item? {
            Item::Event { record, device } => (record, device),
            Item::Loss(l) => {
                emit(
                    out,
                    json!({"ph": "i", "s": "g", "pid": 1, "tid": 0, "ts": us(l.ts_ns),
                    "name": format!("{} events lost", l.lost), "args": {"lost": l.lost, "total": l.total}}),
                )?;
                continue;
            }
            Item::LogFault(f) => {
                let ts = f.timestamp_ns.unwrap_or(h.start_ts_ns);
                let name = format!("fault: {}", f.reason);
                emit(
                    out,
                    json!({"ph": "i", "s": "g", "pid": 1, "tid": 0, "ts": us(ts),
                    "name": name, "args": f}),
                )?;
                continue;
            }
            _ => continue,
        };
        let next = tids.len() + 1;
        let tid = match tids.get(&device) {
            Some(&t) => t,
            None => {
                tids.insert(device.clone(), next);
                emit(
                    out,
                    json!({"ph": "M", "pid": 1, "tid": next, "name": "thread_name", "args": {"name": &*device}}),
                )?;
                next
            }
        };
        let e = *record.event();
        last_ts = last_ts.max(e.ts_ns);
        let args = event_json(h, &record, &device, &mut red);
        match span_level(e.kind) {
            Some((level, true)) if open.len() < MAX_OPEN_SPANS => {
                open.insert((tid, level, e.addr), (e.ts_ns, args));
            }
            Some((level, false)) if open.contains_key(&(tid, level, e.addr)) => {
                let (start, margs) = open.remove(&(tid, level, e.addr)).expect("checked");
                let name = format!(
                    "{} {}",
                    margs["kind"].as_str().unwrap_or("map"),
                    crate::output::bytes(e.size)
                );
                emit(
                    out,
                    json!({"ph": "X", "pid": 1, "tid": tid, "ts": us(start),
                    "dur": e.ts_ns.saturating_sub(start) as f64 / 1e3, "name": name, "cat": "mapping", "args": margs}),
                )?;
            }
            _ => {
                emit(
                    out,
                    json!({"ph": "i", "s": "t", "pid": 1, "tid": tid, "ts": us(e.ts_ns),
                    "name": kind_name(e.kind), "args": args}),
                )?;
            }
        }
    }
    // Mappings still open at the end: spans to the end of the trace.
    let mut rest: Vec<_> = open.into_iter().collect();
    rest.sort_by_key(|(_, (ts, _))| *ts);
    for ((tid, _, _), (start, margs)) in rest {
        let name = format!("{} (not unmapped)", margs["kind"].as_str().unwrap_or("map"));
        emit(
            out,
            json!({"ph": "X", "pid": 1, "tid": tid, "ts": us(start),
            "dur": last_ts.saturating_sub(start) as f64 / 1e3, "name": name, "cat": "mapping", "args": margs}),
        )?;
    }
    writeln!(out, "\n]}}")
}

/// Interval-log tags may not contain spaces or commas.
pub fn hdr_tag(device: &str, op: &str) -> String {
    format!("{device}/{op}")
        .replace([' ', ','], "_")
        .replace(['\r', '\n'], "")
}

fn hdr(h: &Header, items: &mut Items<'_>, out: &mut impl Write) -> io::Result<()> {
    const INTERVAL_NS: u64 = 1_000_000_000;
    let start = UNIX_EPOCH + Duration::from_nanos(h.start_unix_ns);
    let mut ser = V2Serializer::new();
    let mut log = interval_log::IntervalLogWriterBuilder::new()
        .add_comment(&format!(
            "gpudirect-trace mapped sizes in bytes per device/operation, host {}, kernel {}",
            h.hostname, h.kernel_release
        ))
        .with_start_time(start)
        .with_base_time(start)
        .begin_log_with(out, &mut ser)?;
    // Bounded per interval (the file may name any number of devices and
    // feed u64-range sizes: 23.4 GB for a 138 KB file of 65 536 devices):
    // at most HDR_TAGS histograms, the rest folded into one per operation,
    // and HDR_GROWTH bytes of histogram growth.
    const HDR_TAGS: usize = 1024;
    const HDR_GROWTH: usize = 64 << 20;
    let mut hists: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    let mut growth_left = HDR_GROWTH;
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
            growth_left = HDR_GROWTH;
            interval = i;
        }
        let mut tag = hdr_tag(&device, op);
        if hists.len() >= HDR_TAGS && !hists.contains_key(&tag) {
            tag = hdr_tag(crate::aggregate::FOLDED_DEVICES, op);
        }
        let hist = hists
            .entry(tag)
            .or_insert_with(|| Histogram::new(3).expect("3 significant digits is valid"));
        match &record {
            Record::Sg(sg) => {
                let n = (sg.n_lens as usize).min(sg.lens.len());
                for &l in sg.lens[..n].iter().filter(|&&l| l > 0) {
                    hist_record(hist, u64::from(l), &mut growth_left);
                }
            }
            _ => hist_record(hist, e.size, &mut growth_left),
        }
    }
    flush(&mut hists, interval)
}
