//! What `export` writes, as types: the JSON lines' records and the Chrome
//! trace events.
//!
//! Every object's fields are in alphabetical order, and must stay so: these
//! records were `serde_json` maps (keys sorted: the crate is built without
//! `preserve_order`), and an export is diffed and hashed as bytes
//! (`golden_tests`), so the types keep the bytes the maps wrote. Model types
//! that have their own field order elsewhere (`Fault` in `explain --json`,
//! `StackFrames`) are written here through [`Sorted`], as they always were.

use std::borrow::Cow;

use serde::{Serialize, Serializer};

use crate::{
    decode::{c_text, dir_name, kind_name, process_exit, Record},
    model::{misuse::StackFrames, Fault},
    tracefile::{Header, Loss},
};

use super::{is_dma_api, Redactor};

/// Seconds from the trace's start (0 before it).
fn seconds(h: &Header, ts_ns: u64) -> f64 {
    ts_ns.saturating_sub(h.start_ts_ns) as f64 / 1e9
}

/// A value serialized as a `serde_json::Value` would be: object keys sorted
/// at every level, whatever its type's field order.
pub struct Sorted<T>(pub T);

impl<T: Serialize> Serialize for Sorted<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // The model types hold only strings, numbers and lists (no map with
        // a non-string key): this cannot fail, but says so if it ever does.
        serde_json::to_value(&self.0)
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }
}

/// One event: a JSON line of its own, and the Chrome `args` of its instant
/// or span. A scatterlist's `ents`/`lens`/`nents` and an Xid's `msg`/
/// `msg_truncated`/`xid` are there only for those records.
#[derive(Serialize)]
pub struct EventRecord<'a> {
    pub addr: String,
    pub aux: u64,
    /// A process exit's cgroup v2 id (its container; also in `size`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_id: Option<u64>,
    /// A process exit's name (its packed bytes are `addr` and `phys`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// `"interrupt"`: pid/tid then name the interrupted task, not the caller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<&'static str>,
    pub device: &'a str,
    pub dir: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ents: Option<u32>,
    pub flags: u16,
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lens: Option<&'a [u32]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msg: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msg_truncated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nents: Option<u32>,
    pub phys: String,
    pub pid: u32,
    pub size: u64,
    /// With --stacks, DMA-API records carry their kernel stack's id in the
    /// high half of aux; its frames are in the `"kind":"stacks"` lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_id: Option<u32>,
    pub t_s: f64,
    pub tid: u32,
    pub ts_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xid: Option<u32>,
}

impl<'a> EventRecord<'a> {
    /// The record of `r` on `device`. Its addresses' pseudonyms are made
    /// here, `addr` before `phys` (the order they are numbered in).
    pub fn new(h: &Header, r: &'a Record, device: &'a str, red: &mut Redactor) -> Self {
        let e = r.event();
        let addr = red.addr(device, e.kind, e.addr);
        let phys = red.phys(e.phys);
        let in_interrupt = e.flags & gpudirect_trace_common::flags::IN_INTERRUPT != 0;
        let stacks = h.checks.as_ref().is_some_and(|c| c.stacks) && is_dma_api(e.kind);
        let mut rec = EventRecord {
            addr,
            aux: e.aux,
            cgroup_id: None,
            comm: None,
            context: in_interrupt.then_some("interrupt"),
            device,
            dir: dir_name(e.dir),
            ents: None,
            flags: e.flags,
            kind: kind_name(e.kind),
            lens: None,
            msg: None,
            msg_truncated: None,
            nents: None,
            phys,
            pid: e.pid,
            size: e.size,
            stack_id: stacks
                .then(|| gpudirect_trace_common::aux_stack(e.aux))
                .flatten(),
            t_s: seconds(h, e.ts_ns),
            tid: e.tid,
            ts_ns: e.ts_ns,
            xid: None,
        };
        match r {
            Record::Sg(sg) => {
                let n = (sg.n_lens as usize).min(sg.lens.len());
                rec.nents = Some(sg.nents);
                rec.ents = Some(sg.ents);
                rec.lens = Some(&sg.lens[..n]);
            }
            Record::Xid(x) => {
                rec.xid = Some(x.xid);
                rec.msg = Some(c_text(&x.msg));
                rec.msg_truncated = Some(x.msg_truncated != 0);
            }
            Record::Event(_) => {
                if let Some((_, comm)) = process_exit(r) {
                    rec.cgroup_id = Some(e.size);
                    rec.comm = Some(comm);
                }
            }
        }
        rec
    }
}

/// Events the kernel side dropped (`"kind":"lost_events"`).
#[derive(Serialize)]
pub struct LossRecord {
    kind: &'static str,
    lost: u64,
    t_s: f64,
    total: u64,
    ts_ns: u64,
}

impl LossRecord {
    pub fn new(h: &Header, l: &Loss) -> Self {
        LossRecord {
            kind: "lost_events",
            lost: l.lost,
            t_s: seconds(h, l.ts_ns),
            total: l.total,
            ts_ns: l.ts_ns,
        }
    }
}

/// A fault decoded from the kernel log: the fault's keys (as `explain
/// --json` prints them) plus `kind` "decoded_fault" and `t_s` (in place of
/// the fault's own). Written through [`Sorted`]: its keys and the fault's
/// are one sorted object.
#[derive(Serialize)]
pub struct FaultRecord<'a> {
    #[serde(flatten)]
    fault: &'a Fault,
    kind: &'static str,
    /// Null where the log gave no time.
    t_s: Option<f64>,
}

impl<'a> FaultRecord<'a> {
    pub fn new(h: &Header, f: &'a Fault) -> Sorted<Self> {
        let clock = crate::report::clock_of(h);
        Sorted(FaultRecord {
            fault: f,
            kind: "decoded_fault",
            t_s: f.timestamp_ns.map(|t| clock.stamp(t).t_s),
        })
    }
}

/// The trace's symbolized kernel stacks (`"kind":"stacks"`).
#[derive(Serialize)]
pub struct StacksRecord<'a> {
    kind: &'static str,
    stacks: Sorted<&'a [StackFrames]>,
}

impl<'a> StacksRecord<'a> {
    pub fn new(l: &'a [StackFrames]) -> Self {
        StacksRecord {
            kind: "stacks",
            stacks: Sorted(l),
        }
    }
}

/// Chrome's `otherData`: where and how the trace was taken.
#[derive(Serialize)]
pub struct OtherData<'a> {
    boot_id: &'a str,
    clock: &'a str,
    host: &'a str,
    kernel: &'a str,
}

impl<'a> OtherData<'a> {
    pub fn new(h: &'a Header) -> Self {
        OtherData {
            boot_id: &h.boot_id,
            clock: &h.clock,
            host: &h.hostname,
            kernel: &h.kernel_release,
        }
    }
}

/// A trace event's phase (`ph`).
#[derive(Clone, Copy, Serialize)]
pub enum Phase {
    /// A span with its duration: a mapping from map to unmap.
    #[serde(rename = "X")]
    Complete,
    #[serde(rename = "i")]
    Instant,
    /// Names the process and the device tracks.
    #[serde(rename = "M")]
    Metadata,
}

/// An instant's scope (`s`): its track, or the whole trace (losses and
/// the log's faults, which belong to no device's track).
#[derive(Clone, Copy, Serialize)]
pub enum Scope {
    #[serde(rename = "g")]
    Global,
    #[serde(rename = "t")]
    Thread,
}

/// The one process every track is in.
const PID: u32 = 1;

/// One Chrome trace event. Which fields a phase has: metadata `args`,
/// `name` (and `tid` for a track); a span `cat`, `dur`, `tid`, `ts`; an
/// instant `s`, `tid`, `ts`.
#[derive(Serialize)]
pub struct TraceEvent<A> {
    args: A,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    name: Cow<'static, str>,
    ph: Phase,
    pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<Scope>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
}

/// A metadata event's `args`.
#[derive(Serialize)]
pub struct NameArg<'a> {
    name: &'a str,
}

/// A loss instant's `args`.
#[derive(Serialize)]
pub struct LossArgs {
    lost: u64,
    total: u64,
}

impl<'a> TraceEvent<NameArg<'a>> {
    /// Names the process (`tid` None) or a device's track.
    pub fn metadata(what: &'static str, tid: Option<usize>, name: &'a str) -> Self {
        TraceEvent {
            args: NameArg { name },
            cat: None,
            dur: None,
            name: what.into(),
            ph: Phase::Metadata,
            pid: PID,
            s: None,
            tid,
            ts: None,
        }
    }
}

impl<A> TraceEvent<A> {
    /// A mapping's span, `ts_us` and `dur_us` in microseconds.
    pub fn span(tid: usize, ts_us: f64, dur_us: f64, name: String, args: A) -> Self {
        TraceEvent {
            args,
            cat: Some("mapping"),
            dur: Some(dur_us),
            name: name.into(),
            ph: Phase::Complete,
            pid: PID,
            s: None,
            tid: Some(tid),
            ts: Some(ts_us),
        }
    }

    /// An instant on track `tid` (0 with `Scope::Global`).
    pub fn instant(
        s: Scope,
        tid: usize,
        ts_us: f64,
        name: impl Into<Cow<'static, str>>,
        args: A,
    ) -> Self {
        TraceEvent {
            args,
            cat: None,
            dur: None,
            name: name.into(),
            ph: Phase::Instant,
            pid: PID,
            s: Some(s),
            tid: Some(tid),
            ts: Some(ts_us),
        }
    }
}

impl LossArgs {
    pub fn new(l: &Loss) -> Self {
        LossArgs {
            lost: l.lost,
            total: l.total,
        }
    }
}
