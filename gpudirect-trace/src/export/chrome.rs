//! `export --format chrome`: Chrome trace-event JSON, one track per
//! device, mappings as spans from map to unmap, the rest as instants.

use std::{
    collections::HashMap,
    io::{self, Write},
    sync::Arc,
};

use serde_json::{json, Value};

use super::{event_json, span_level, Items, Redactor};
use crate::{
    decode::{kind_name, Record},
    memory_budget::{self, Keeper},
    tracefile::{Header, Item},
};

const MAX_OPEN_SPANS: usize = 1 << 20;
/// What one open span costs the reader's memory budget: its key, the map's
/// event (a scatterlist's boxed) and its hash slot. The JSON of its args is
/// made when the span closes (kept as JSON, 1 M open spans took 2.85 GB).
const SPAN_BYTES: usize = 160;
/// What one device's track costs (its name, twice).
const TRACK_BYTES: usize = 96;

/// A map whose unmap has not come yet: what its span's args are made of.
enum Opened {
    Event(gpudirect_trace_common::Event),
    Other(Box<Record>),
}

impl Opened {
    fn of(r: Record) -> Self {
        match r {
            Record::Event(e) => Opened::Event(e),
            other => Opened::Other(Box::new(other)),
        }
    }

    fn record(&self) -> Record {
        match self {
            Opened::Event(e) => Record::Event(*e),
            Opened::Other(r) => **r,
        }
    }
}

/// Mappings seen but not yet unmapped, by (track, level, address).
type OpenSpans = HashMap<(usize, u8, u64), Opened>;

/// The Chrome trace's device tracks: one per device, within the reader's
/// memory budget (the rest share one).
struct Tracks {
    ids: HashMap<Arc<str>, usize>,
    names: Vec<Arc<str>>,
}

impl Tracks {
    /// The device's track, and whether it is new (to be named).
    fn of(&mut self, device: &Arc<str>) -> (usize, bool) {
        if let Some(&t) = self.ids.get(device) {
            return (t, false);
        }
        let room = memory_budget::take_or_drop(Keeper::Spans, TRACK_BYTES + 2 * device.len());
        let name: Arc<str> = if room {
            device.clone()
        } else {
            Arc::from(crate::aggregate::FOLDED_DEVICES)
        };
        if let Some(&t) = self.ids.get(&name) {
            return (t, false);
        }
        self.names.push(name.clone());
        let t = self.names.len();
        self.ids.insert(name, t);
        (t, true)
    }

    fn name(&self, tid: usize) -> &str {
        self.names.get(tid - 1).map_or("-", |n| n)
    }
}

pub(super) fn chrome(
    h: &Header,
    items: &mut Items<'_>,
    out: &mut impl Write,
    red: &mut Redactor,
) -> io::Result<()> {
    let us = |ts: u64| ts.saturating_sub(h.start_ts_ns) as f64 / 1e3;
    let mut tracks = Tracks {
        ids: HashMap::new(),
        names: Vec::new(),
    };
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
    // A closed or still open span, as one complete event.
    let span = |h: &Header,
                red: &mut Redactor,
                tid: usize,
                device: &str,
                map: &Record,
                end: u64,
                name: String| {
        let start = map.event().ts_ns;
        let margs = event_json(h, map, device, red);
        let name = format!("{} {name}", margs["kind"].as_str().unwrap_or("map"));
        json!({"ph": "X", "pid": 1, "tid": tid, "ts": us(start),
        "dur": end.saturating_sub(start) as f64 / 1e3, "name": name, "cat": "mapping", "args": margs})
    };
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
        let (tid, new) = tracks.of(&device);
        if new {
            emit(
                out,
                json!({"ph": "M", "pid": 1, "tid": tid, "name": "thread_name", "args": {"name": tracks.name(tid)}}),
            )?;
        }
        let device = tracks.name(tid).to_owned();
        let e = *record.event();
        last_ts = last_ts.max(e.ts_ns);
        match span_level(e.kind) {
            Some((level, true))
                if open.len() < MAX_OPEN_SPANS
                    && memory_budget::take_or_drop(Keeper::Spans, SPAN_BYTES) =>
            {
                // Its pseudonyms in order of appearance, as if made now.
                if red.on {
                    event_json(h, &record, &device, red);
                }
                if open
                    .insert((tid, level, e.addr), Opened::of(record))
                    .is_some()
                {
                    memory_budget::give(Keeper::Spans, SPAN_BYTES);
                }
            }
            Some((level, false)) if open.contains_key(&(tid, level, e.addr)) => {
                let map = open.remove(&(tid, level, e.addr)).expect("checked");
                memory_budget::give(Keeper::Spans, SPAN_BYTES);
                let v = span(
                    h,
                    red,
                    tid,
                    &device,
                    &map.record(),
                    e.ts_ns,
                    crate::output::bytes(e.size),
                );
                emit(out, v)?;
            }
            _ => {
                let args = event_json(h, &record, &device, red);
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
    rest.sort_by_key(|(_, m)| match m {
        Opened::Event(e) => e.ts_ns,
        Opened::Other(r) => r.event().ts_ns,
    });
    for ((tid, _, _), map) in rest {
        let device = tracks.name(tid).to_owned();
        let v = span(
            h,
            red,
            tid,
            &device,
            &map.record(),
            last_ts,
            "(not unmapped)".into(),
        );
        emit(out, v)?;
    }
    writeln!(out, "\n]}}")
}
