//! The JSON summary of a session, as `live --json` prints it every interval
//! and `record --json` at the end: one typed document, so the two never
//! differ, built from the same row types `report --json` uses for the same
//! keys (devices, incidents, faults, invalidations, timelines, NVML).

use serde::Serialize;

use crate::{
    aggregate::{inval::UnitRow, DeviceSnapshot, LongLived},
    analysis::{ledger::FaultCount, misuse::CheckStats},
    ebpf::{DmaOpSource, ProgramStat, SelfStats},
    families::pcie::timeline::Timeline,
    gpu::{GpuIdentity, NvmlStatus, Sample},
    model::{Fault, Incident, TraceClock},
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

/// A session's `--json` object. Fields in the order of their keys, as the
/// output has them (`line` sorts every level).
#[derive(Serialize)]
pub struct SessionJson<'a> {
    clock: TraceClock,
    decode_errors: u64,
    device_name_failures: u64,
    /// Per device with a grave PCIe incident: its first cause, then what
    /// followed (families/pcie/timeline.rs).
    device_timelines: Vec<Timeline>,
    devices: &'a [DeviceSnapshot],
    dma_plan: &'a [DmaOpSource],
    elapsed_s: f64,
    events: u64,
    fault_counts: Vec<FaultCount>,
    faults: Vec<&'a Fault>,
    #[serde(rename = "final")]
    last: bool,
    gpus: &'a [GpuIdentity],
    /// DMA-API maps a kretprobe could not report (docs/probes.md).
    hook_args_missing: u64,
    incidents: Vec<&'a Incident>,
    incidents_evicted: u64,
    incidents_total: u64,
    interval_s: f64,
    /// Per IOMMU unit and invalidation type, across devices.
    iommu_invalidations: Vec<UnitRow>,
    kernel: &'a str,
    kernel_events: u64,
    kmsg_error: Option<&'a str>,
    kmsg_lost_records: u64,
    /// Aggregate-only lifetimes: one mapping in this many is timed (1:
    /// every one; 0: no lifetimes in the kernel, streaming or
    /// `--no-lifetimes`). Each device's `dma.lifetime_ns` counts the timed.
    lifetime_sample: u32,
    lifetime_unmatched: u64,
    long_lived: Vec<LongLivedJson<'a>>,
    lost_events: u64,
    mappings_untracked: u64,
    misuse: Option<&'a CheckStats>,
    missed_events: u64,
    mode: &'static str,
    nvml: NvmlJson<'a>,
    probes_attached: usize,
    /// Processes shown without a name: gone from /proc before they were
    /// looked up, and no exit record named them.
    processes_unnamed: u64,
    program_stats: Vec<ProgramStat>,
    /// DMA-API calls whose kernel stack was not kept (`--stacks`).
    stacks_lost: u64,
    timing_nest_full: u64,
}

/// A mapping outstanding past `--long-lived`, with who made it.
#[derive(Serialize)]
struct LongLivedJson<'a> {
    address: &'a str,
    age_s: f64,
    comm: Option<&'a str>,
    device: &'a str,
    level: &'static str,
    pid: u32,
    size: u64,
}

/// The `nvml` key of live's and report's JSON: the first and latest
/// readings; a live session also says whether NVML could be read (a file
/// keeps only the readings).
#[derive(Serialize)]
pub struct NvmlJson<'a> {
    pub first: Option<&'a Sample>,
    pub latest: Option<&'a Sample>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'a NvmlStatus>,
}

pub fn session_json<'a>(s: &'a Session, v: &View<'a>) -> SessionJson<'a> {
    let ledger = &s.analysis.ledger;
    let agg = &s.analysis.agg;
    let all = ledger.incidents();
    let take = if v.last {
        all.len()
    } else {
        INTERVAL_INCIDENTS
    };
    let incidents: Vec<_> = all.iter().skip(all.len().saturating_sub(take)).collect();
    let faults = incidents.iter().filter_map(|i| i.fault.as_ref()).collect();
    let long_lived = v
        .long_lived
        .iter()
        .map(|(dev, lvl, m)| LongLivedJson {
            address: &m.address,
            age_s: m.age_s,
            comm: agg.names.get(&m.pid).and_then(|n| n.comm.as_deref()),
            device: dev,
            level: lvl,
            pid: m.pid,
            size: m.size,
        })
        .collect();
    SessionJson {
        clock: s.clock(),
        decode_errors: agg.decode_errors,
        device_name_failures: v.stats.device_name_failures,
        device_timelines: s.analysis.timelines(),
        devices: v.devices,
        dma_plan: &s.tracer.dma_plan,
        elapsed_s: s.started.elapsed().as_secs_f64(),
        events: agg.events,
        fault_counts: ledger.fault_counts(),
        faults,
        last: v.last,
        gpus: &agg.gpus,
        hook_args_missing: v.stats.hook_args_missing,
        incidents_total: all.back().map_or(0, |i| i.id),
        incidents,
        incidents_evicted: ledger.evicted(),
        interval_s: v.interval_s,
        iommu_invalidations: agg.unit_rows(),
        kernel: &s.tracer.kernel.release,
        kernel_events: v.stats.total_hits(),
        kmsg_error: s.kmsg_error.as_deref(),
        kmsg_lost_records: s.kmsg_lost(),
        lifetime_sample: s.tracer.lifetime_sample,
        lifetime_unmatched: v.stats.lifetime_unmatched,
        long_lived,
        lost_events: v.stats.lost_events,
        mappings_untracked: v.stats.mappings_untracked,
        misuse: s.analysis.checker.as_ref().map(|c| &c.stats),
        missed_events: v.stats.missed_events,
        mode: if s.stream {
            "streaming"
        } else {
            "aggregate-only"
        },
        nvml: NvmlJson {
            first: s.analysis.nvml_first.as_ref(),
            latest: s.analysis.nvml_latest.as_ref(),
            status: Some(&s.gpus.status),
        },
        probes_attached: s.tracer.attached(),
        processes_unnamed: agg.names_unknown,
        program_stats: s.tracer.program_stats(),
        stacks_lost: v.stats.stacks_lost,
        timing_nest_full: v.stats.timing_nest_full,
    }
}

/// One line of live/record JSON. Through a value tree on purpose: its keys
/// come out sorted at every level, nested rows included, as they always
/// have (`report --json` streams its far larger document in field order
/// instead, and its nested rows keep theirs).
pub fn line(doc: &impl Serialize) -> anyhow::Result<String> {
    Ok(serde_json::to_string(&serde_json::to_value(doc)?)?)
}
