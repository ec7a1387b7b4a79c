//! `report --json`: the window's devices, incidents and faults as the live
//! session's final `--json` object has them, plus what the file said.

use super::{snapshot, warnings, Replay};
use crate::{
    model::{Incident, TraceClock},
    summary::NvmlJson,
    tracefile::{Header, Loss, ReadStats},
};

/// The report's JSON: the window's devices, incidents and faults as the
/// live session's final `--json` object has them, plus what the file said
/// (as a value: tests compare it; the command streams `json_doc`).
pub fn json(
    path: &str,
    r: &Replay,
    devices: &[crate::aggregate::DeviceSnapshot],
) -> serde_json::Value {
    serde_json::to_value(json_doc(path, r, devices)).unwrap_or_default()
}

/// The report's JSON as a document that serializes straight to its output:
/// no value tree and no string of it in memory (a report within its
/// memory budget can still hold tens of MB of incidents; as a value tree
/// they took several times that). Keys in the order `json!` gave them.
pub fn json_doc<'a>(
    path: &'a str,
    r: &'a Replay,
    devices: &'a [crate::aggregate::DeviceSnapshot],
) -> ReportJson<'a> {
    let incidents: Vec<&Incident> = r.incidents().collect();
    let faults = incidents.iter().filter_map(|i| i.fault.as_ref()).collect();
    ReportJson {
        clock: r.clock(),
        counters: r.counters,
        device_timelines: r.analysis.timelines(),
        devices,
        fault_counts: r.analysis.ledger.fault_counts(),
        faults,
        file: path,
        gpus: &r.analysis.agg.gpus,
        header: &r.header,
        incidents,
        incidents_evicted: r.analysis.ledger.evicted(),
        iommu_invalidations: r.analysis.agg.unit_rows(),
        kernel_events: r.kernel_hits,
        later_triggers: &r.later_triggers,
        lead: r.lead.as_ref(),
        losses: &r.losses,
        losses_not_listed: r.losses_unlisted,
        lost_events: r.losses_total(),
        memory_budget: crate::memory_budget::summary(),
        misuse: r.analysis.checker.as_ref().map(|c| &c.stats),
        nvml: NvmlJson {
            first: r.analysis.nvml_first.as_ref(),
            latest: r.analysis.nvml_latest.as_ref(),
            // A file keeps NVML's readings, not whether it could be read.
            status: None,
        },
        read: &r.stats,
        warnings: warnings(path, r),
        window: WindowJson {
            from_s: r.seconds(r.from_ns),
            to_s: r.seconds(r.last_ns),
        },
    }
}

/// `report --json` (see `json_doc`).
#[derive(serde::Serialize)]
pub struct ReportJson<'a> {
    clock: &'a TraceClock,
    counters: Option<&'static str>,
    /// One timeline per device with its first cause (PCIe family).
    device_timelines: Vec<crate::families::pcie::timeline::Timeline>,
    devices: &'a [crate::aggregate::DeviceSnapshot],
    fault_counts: Vec<crate::analysis::ledger::FaultCount>,
    faults: Vec<&'a crate::model::Fault>,
    file: &'a str,
    gpus: &'a [crate::gpu::GpuIdentity],
    header: &'a Header,
    incidents: Vec<&'a Incident>,
    incidents_evicted: u64,
    iommu_invalidations: Vec<crate::aggregate::inval::UnitRow>,
    kernel_events: Option<u64>,
    later_triggers: &'a [crate::tracefile::Trigger],
    lead: Option<&'a snapshot::Lead>,
    losses: &'a [Loss],
    losses_not_listed: u64,
    lost_events: u64,
    memory_budget: Option<crate::memory_budget::Summary>,
    misuse: Option<&'a crate::analysis::misuse::CheckStats>,
    nvml: NvmlJson<'a>,
    read: &'a ReadStats,
    warnings: Vec<String>,
    window: WindowJson,
}

#[derive(serde::Serialize)]
struct WindowJson {
    from_s: f64,
    to_s: f64,
}
