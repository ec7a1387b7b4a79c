//! `gpudirect-trace selftest` (hidden): checks of the tool's own machinery
//! on the running kernel, for the VM scenarios and for support cases.
//!
//! `module-hook` proves the module-BTF fentry loader (`ebpf::module_fentry`)
//! where the NVIDIA driver cannot exist (the CI VMs): the timing programs
//! of the nv_dma_map_sgt slot are attached to a function of another module
//! (the VM scenario uses nvme's nvme_queue_rq) through that module's BTF, exactly as they
//! are attached to the NVIDIA driver, and must count calls.

use std::time::Duration;

use gpudirect_trace_common::op;
use serde_json::{json, Value};

use crate::ebpf::{Status, Tracer, TracerOptions};

/// `module-hook`: the nv_dma_map_sgt slot's programs on `module`'s
/// `function`, counting calls for `duration`. Returns the JSON result and
/// whether the hook attached and counted calls.
pub fn module_hook(
    module: &str,
    function: &str,
    duration: Duration,
) -> anyhow::Result<(Value, bool)> {
    let mut tracer = Tracer::load(&TracerOptions {
        stream: false,
        lifetimes: false,
        module_standin: Some((module.to_owned(), function.to_owned())),
        ..Default::default()
    })?;
    let probe = tracer
        .probes
        .iter()
        .find(|p| p.name == crate::families::nvidia::STANDIN_NAME)
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("the stand-in hook was not tried"))?;
    crate::output::note(&format!(
        "selftest: {} {}: {}",
        probe.name,
        probe.status.as_str(),
        probe.reason
    ));
    if probe.status == Status::Attached {
        std::thread::sleep(duration);
    }
    let hists = tracer.kernel_latency();
    let mut calls = 0;
    let mut max_ns = 0;
    for (_, o, h) in &hists {
        if *o == op::NV_DMA_MAP_SGT {
            calls += h.count;
            max_ns = max_ns.max(h.max_ns);
        }
    }
    let doc = json!({
            "check": "module-hook",
            "module": module,
            "function": function,
            "status": probe.status.as_str(),
            "kind": probe.kind,
            "reason": probe.reason,
            "calls": calls,
            "max_ns": max_ns,
    });
    Ok((doc, probe.status == Status::Attached && calls > 0))
}

/// `snapshot-write`: `events` synthetic map/unmap events into a flight
/// recorder's ring, a SIGUSR1-style trigger, and the snapshot written and
/// closed through the recorder's own code; prints what it wrote.
pub fn snapshot_write(dir: &std::path::Path, events: u64) -> anyhow::Result<(Value, bool)> {
    use std::sync::Arc;

    use gpudirect_trace_common::{kind, Event};

    use crate::{
        decode::Record,
        flight::{FlightOptions, Recorder, Trigger},
        session::Observed,
        tracefile::Header,
    };
    let now = crate::kernel::monotonic_ns();
    let header = Header {
        hostname: "selftest".into(),
        clock: "CLOCK_MONOTONIC".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        start_ts_ns: now,
        ..Default::default()
    };
    let mut r = Recorder::with_header(
        header,
        FlightOptions {
            dir: dir.to_owned(),
            max_age: None,
            max_bytes: Some(1 << 30),
            triggers: vec![Trigger::Signal],
            after: Duration::ZERO,
            max_snapshots: None,
            min_spacing: Duration::ZERO,
            retention: Default::default(),
        },
    )?;
    let device: Arc<str> = Arc::from("0000:00:04.0");
    for i in 0..events {
        let map = i % 2 == 0;
        let rec = Record::Event(Event {
            kind: if map { kind::DMA_MAP } else { kind::DMA_UNMAP },
            dir: 2,
            ts_ns: now + i * 1000,
            pid: 100 + (i % 7) as u32,
            tid: 100 + (i % 7) as u32,
            addr: 0xffff_0000 - ((i / 2) % 4096) * 4096,
            phys: if map { (i * 7919 % (1 << 24)) << 12 } else { 0 },
            size: 4096,
            ..Default::default()
        });
        r.observe(&Observed::Record {
            record: &rec,
            device: &device,
        })?;
    }
    r.user_signal();
    r.close_now()?;
    let st = r.stats();
    let doc = json!({
        "check": "snapshot-write",
        "events": events,
        "written": st.written.values().sum::<u64>(),
        "path": st.last_path,
        "failures": st.failures,
    });
    Ok((doc, st.failures == 0 && st.last_path.is_some()))
}
