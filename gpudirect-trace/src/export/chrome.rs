//! `export --format chrome`: Chrome trace-event JSON, one track per
//! device, mappings as spans from map to unmap, the rest as instants.

use std::{
    collections::HashMap,
    io::{self, Write},
    sync::Arc,
};

use serde::Serialize;

use super::{
    records::{EventRecord, LossArgs, OtherData, Scope, Sorted, TraceEvent},
    span_level, Items, Redactor,
};
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

/// Writes the `traceEvents` array's elements, a comma before all but the
/// first.
struct Emitter {
    first: bool,
}

impl Emitter {
    fn emit(&mut self, out: &mut impl Write, v: &impl Serialize) -> io::Result<()> {
        out.write_all(if self.first { b"\n" } else { b",\n" })?;
        self.first = false;
        serde_json::to_writer(&mut *out, v).map_err(io::Error::from)
    }
}

/// Microseconds from the trace's start (0 before it): Chrome's `ts`.
fn us(h: &Header, ts: u64) -> f64 {
    ts.saturating_sub(h.start_ts_ns) as f64 / 1e3
}

/// A closed or still open mapping's span, as one complete event.
fn span<'r>(
    h: &Header,
    red: &mut Redactor,
    tid: usize,
    device: &'r str,
    map: &'r Record,
    end: u64,
    name: &str,
) -> TraceEvent<EventRecord<'r>> {
    let start = map.event().ts_ns;
    let args = EventRecord::new(h, map, device, red);
    let name = format!("{} {name}", args.kind);
    let dur = end.saturating_sub(start) as f64 / 1e3;
    TraceEvent::span(tid, us(h, start), dur, name, args)
}

pub(super) fn chrome(
    h: &Header,
    items: &mut Items<'_>,
    out: &mut impl Write,
    red: &mut Redactor,
) -> io::Result<()> {
    let mut tracks = Tracks {
        ids: HashMap::new(),
        names: Vec::new(),
    };
    let mut open: OpenSpans = HashMap::new();
    let mut ev = Emitter { first: true };
    write!(out, "{{\"displayTimeUnit\":\"ns\",\"otherData\":")?;
    serde_json::to_writer(&mut *out, &OtherData::new(h))?;
    write!(out, ",\"traceEvents\":[")?;
    let process = format!("DMA on {}", h.hostname);
    ev.emit(out, &TraceEvent::metadata("process_name", None, &process))?;
    let mut last_ts = h.start_ts_ns;
    for item in items {
        let (record, device) = match item? {
            Item::Event { record, device } => (record, device),
            Item::Loss(l) => {
                let name = format!("{} events lost", l.lost);
                let args = LossArgs::new(&l);
                let v = TraceEvent::instant(Scope::Global, 0, us(h, l.ts_ns), name, args);
                ev.emit(out, &v)?;
                continue;
            }
            Item::LogFault(f) => {
                let ts = f.timestamp_ns.unwrap_or(h.start_ts_ns);
                let name = format!("fault: {}", f.reason);
                let v = TraceEvent::instant(Scope::Global, 0, us(h, ts), name, Sorted(&f));
                ev.emit(out, &v)?;
                continue;
            }
            _ => continue,
        };
        let (tid, new) = tracks.of(&device);
        if new {
            let v = TraceEvent::metadata("thread_name", Some(tid), tracks.name(tid));
            ev.emit(out, &v)?;
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
                    EventRecord::new(h, &record, &device, red);
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
                let map = map.record();
                let size = crate::output::bytes(e.size);
                ev.emit(out, &span(h, red, tid, &device, &map, e.ts_ns, &size))?;
            }
            _ => {
                let args = EventRecord::new(h, &record, &device, red);
                let name = kind_name(e.kind);
                let v = TraceEvent::instant(Scope::Thread, tid, us(h, e.ts_ns), name, args);
                ev.emit(out, &v)?;
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
        let map = map.record();
        ev.emit(
            out,
            &span(h, red, tid, &device, &map, last_ts, "(not unmapped)"),
        )?;
    }
    writeln!(out, "\n]}}")
}
