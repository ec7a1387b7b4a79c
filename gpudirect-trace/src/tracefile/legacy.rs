//! Reading what format 1.0 files stored differently.
//!
//! 1.0 kept the session's resolved faults as untyped JSON in FAULTS blocks:
//! those decoded from the kernel log, and also one object per tracepoint
//! fault (io_page_fault, AER, Xid), which 1.1 re-derives from the events
//! themselves. Its `mapping_state` was prose, its `pid`/`process` loose
//! fields. Reading a 1.0 file keeps the log's faults (typed, their process
//! from the line) and drops the tracepoint duplicates; the ledger then
//! tells the story from the events as for a 1.1 file.

use serde_json::Value;

use crate::model::{Fault, Process, Source};

/// A 1.0 FAULTS entry as the log fault it was, or None when it was the
/// session's copy of a tracepoint event (or not a fault at all).
pub fn log_fault_1_0(v: &Value) -> Option<Fault> {
    let raw = v["raw"].as_str().unwrap_or("");
    let source: Source = serde_json::from_value(v["source"].clone()).ok()?;
    let from_tracepoint = match source {
        Source::IommuTracepoint => true,
        Source::Aer => raw == "ras:aer_event",
        // The tracepoint's Xid kept its message as `raw`; log lines are
        // `NVRM: ...` lines.
        Source::NvidiaXid => !raw.contains("NVRM"),
        _ => false,
    };
    if from_tracepoint {
        return None;
    }
    let mut obj = v.as_object()?.clone();
    let pid = obj.remove("pid").and_then(|p| p.as_u64());
    let name = obj
        .remove("process")
        .and_then(|p| p.as_str().map(str::to_owned));
    // The prose state is recomputed from the events by the ledger.
    obj.remove("mapping_state");
    let mut f: Fault = serde_json::from_value(Value::Object(obj)).ok()?;
    if pid.is_some() || name.is_some() {
        f.process = Some(Process::reported(
            pid.and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
            name,
        ));
    }
    Some(f)
}
