//! The JSON summary of a session, as `live --json` prints it every interval
//! and `record --json` at the end: one builder, so the two never differ.

use serde_json::{json, Value};

use crate::{
    aggregate::{DeviceSnapshot, LongLived},
    ebpf::SelfStats,
    session::Session,
};

/// Incidents and faults listed in an interval's object (the final one
/// lists every incident the ledger kept).
pub const INTERVAL_INCIDENTS: usize = 32;

pub struct View<'a> {
    pub devices: &'a [DeviceSnapshot],
    pub stats: &'a SelfStats,
    pub long_lived: &'a [(String, &'static str, LongLived)],
    pub interval_s: f64,
    pub last: bool,
}

pub fn session_json(s: &Session, v: &View<'_>) -> Value {
    let ledger = &s.analysis.ledger;
    let all = ledger.incidents();
    let take = if v.last {
        all.len()
    } else {
        INTERVAL_INCIDENTS
    };
    let incidents: Vec<_> = all.iter().skip(all.len().saturating_sub(take)).collect();
    let faults: Vec<_> = incidents.iter().filter_map(|i| i.fault.as_ref()).collect();
    json!({
        "elapsed_s": s.started.elapsed().as_secs_f64(),
        "interval_s": v.interval_s,
        "final": v.last,
        "clock": s.clock(),
        "kernel": s.tracer.kernel.release,
        "mode": if s.stream { "streaming" } else { "aggregate-only" },
        "probes_attached": s.tracer.attached(),
        "devices": v.devices,
        // Per IOMMU unit and invalidation type, across devices.
        "iommu_invalidations": s.analysis.agg.unit_rows(),
        "events": s.analysis.agg.events,
        "kernel_events": v.stats.total_hits(),
        "lost_events": v.stats.lost_events,
        "missed_events": v.stats.missed_events,
        "decode_errors": s.analysis.agg.decode_errors,
        "device_name_failures": v.stats.device_name_failures,
        "timing_nest_full": v.stats.timing_nest_full,
        "lifetime_unmatched": v.stats.lifetime_unmatched,
        "mappings_untracked": v.stats.mappings_untracked,
        // DMA-API maps a kretprobe could not report (docs/probes.md).
        "hook_args_missing": v.stats.hook_args_missing,
        // DMA-API calls whose kernel stack was not kept (`--stacks`).
        "stacks_lost": v.stats.stacks_lost,
        // Processes shown without a name: gone from /proc before they were
        // looked up, and no exit record named them.
        "processes_unnamed": s.analysis.agg.names_unknown,
        "dma_plan": s.tracer.dma_plan,
        "incidents": incidents,
        "incidents_total": all.back().map_or(0, |i| i.id),
        "incidents_evicted": ledger.evicted(),
        // Per device with a grave PCIe incident: its first cause, then what
        // followed (families/pcie/timeline.rs).
        "device_timelines": s.analysis.timelines(),
        "faults": faults,
        "fault_counts": s.analysis.ledger.fault_counts(),
        "misuse": s.analysis.checker.as_ref().map(|c| &c.stats),
        "long_lived": v.long_lived.iter().map(|(dev, lvl, m)| json!({
            "device": dev, "level": lvl, "address": m.address,
            "size": m.size, "age_s": m.age_s, "pid": m.pid,
            "comm": s.analysis.agg.names.get(&m.pid).and_then(|n| n.comm.as_deref())}))
            .collect::<Vec<_>>(),
        "gpus": s.analysis.agg.gpus,
        "nvml": {
            "status": s.gpus.status,
            "first": s.analysis.nvml_first,
            "latest": s.analysis.nvml_latest,
        },
        "kmsg_lost_records": s.kmsg_lost(),
        "kmsg_error": s.kmsg_error,
        "program_stats": s.tracer.program_stats(),
    })
}
