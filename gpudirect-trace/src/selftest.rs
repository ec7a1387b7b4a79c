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
        .find(|p| p.name == crate::catalog::STANDIN_NAME)
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
