//! Per-device aggregation: counts and bytes by operation and direction,
//! mapped-size distributions (HdrHistogram), outstanding mappings and their
//! history for fault correlation. Incidents (faults, Xids, errors, IOMMU
//! changes) are the ledger's (`analysis::ledger`); it counts them here.
//!
//! Three levels are kept apart because they answer different questions and
//! one DMA-API call can cause several IOMMU operations: `dma` (streaming DMA
//! API: dma_map_page/phys/resource/sg), `iommu` (IOMMU page-table maps) and
//! `coherent` (dma_alloc/free). The flat `maps`/`unmaps`/`bytes_mapped`
//! fields report the DMA-API view when the kernel traces it (6.8+), else the
//! IOMMU view, and say which in `level`.

pub mod budget;
mod devices;
mod dma_api;
mod fault_context;
pub mod inval;
mod kernel_tables;
mod latency;
mod level;
mod outstanding;
pub mod procs;
mod snapshot;

use std::{
    collections::{BTreeMap, VecDeque},
    sync::Arc,
};

use gpudirect_trace_common::{flags, kind, op, Event, LatHist};

use crate::{
    gpu::GpuIdentity,
    memory_budget::{self, Keeper},
    model::{task_of, MapLevel, INTERRUPT_PID},
};

pub use self::{
    devices::Devices,
    dma_api::{DmaApiStats, IovaSnapshot},
    fault_context::{Unmapped, RECENT_UNMAPS},
    latency::{sum_log2, LatencySnapshot, OpLatency},
    level::{record, Level, LevelSnapshot, LongLived, Percentiles, MAPPING_BYTES},
    snapshot::{DeviceSnapshot, ProcName, ProcessRow, TOP_PROCESSES},
};
use crate::decode::Record;

/// Device name used for events that carry no device (iommu:map/unmap).
pub const UNATTRIBUTED: &str = "(iommu, unattributed)";
/// Outstanding mappings tracked per device and level before new ones are
/// only counted (bounded memory on hosts with millions of live mappings).
pub const MAX_TRACKED: usize = 1 << 20;

#[derive(Default)]
pub struct DeviceStats {
    pub dma: Level,
    pub iommu: Level,
    pub coherent: Level,
    /// Bytes of streaming DMA-API mappings by `enum dma_data_direction`.
    pub bytes_by_dir: [u64; 4],
    pub sg_maps: u64,
    pub sg_entries: u64,
    pub map_errors: u64,
    pub faults: u64,
    pub xids: u64,
    /// Xids by number (`xids` is their sum).
    pub xid_counts: BTreeMap<u32, u64>,
    /// Records streamed for the device.
    pub events: u64,
    /// The kernel's loss-free count of its hits, at the last counter read:
    /// its events are the larger of the two, taken when shown (a max taken
    /// at each read and then added to would count again the records still
    /// in the ring at the read: a live session and the replay of its file
    /// differed by those, seen under load in the VFIO scenario).
    pub kernel_hits: u64,
    events_at_last_snapshot: u64,
    pub iommu_group: Option<u32>,
    /// IOMMU events attributed through the enclosing DMA-API call / the domain.
    pub iommu_via_dma_api: u64,
    pub iommu_via_domain: u64,
    /// Streamed latencies per operation (`gpudirect_trace_common::op`).
    pub latency: BTreeMap<u32, OpLatency>,
    /// The kernel's log2 latency histograms per operation.
    pub kernel_latency: BTreeMap<u32, LatHist>,
    /// The latest unmaps of any level, for "DMA after unmap" diagnosis.
    pub recent_unmaps: VecDeque<Unmapped>,
    /// Times of the device's first and last streamed events.
    pub first_ts: u64,
    pub last_ts: u64,
    /// The DMA-API level's source, truncated walks, syncs (dma_api.rs).
    pub dma_api: DmaApiStats,
    /// IOMMU invalidations attributed to the device (inval.rs).
    pub inval: inval::DeviceInval,
    /// The probe families' own state of the device (`families::Devices`).
    pub families: crate::families::Devices,
}

/// What a device kept apart costs the reader's memory budget before it
/// grows: its tables and six histograms of 16 KiB each.
pub const DEVICE_BYTES: usize = 128 << 10;
/// What a row keyed by a value from the file costs (an Xid number's count).
const XID_ROW_BYTES: usize = 64;

#[derive(Default)]
pub struct Aggregator {
    /// By name; read out in name order.
    pub devices: Devices,
    pub events: u64,
    pub decode_errors: u64,
    /// Names of the pids seen, by pid.
    pub names: std::collections::HashMap<u32, ProcName>,
    /// Pids that were gone from /proc with no exit record to name them
    /// (the exit record lost, or sched:sched_process_exit not attached):
    /// the only processes shown without a name.
    pub names_unknown: u64,
    /// The host's NVIDIA GPUs.
    pub gpus: Vec<GpuIdentity>,
    /// IOMMU group types by device (sysfs, at the start).
    pub policies: std::collections::HashMap<String, String>,
    /// The driver bound to each device (sysfs at the start, then the
    /// trace's bind and unbind records): what a bus id is, in the tables.
    pub drivers: std::collections::HashMap<String, String>,
    /// Devices kept apart at most (None: every one); later ones are counted
    /// together under [`FOLDED_DEVICES`]. Each device's histograms take up
    /// to ~400 KiB each when fed values across the u64 range: a 138 KB
    /// crafted file naming 65 536 devices made `report` use 23.8 GB.
    pub max_devices: Option<usize>,
    /// Updates that went to [`FOLDED_DEVICES`] because of `max_devices`.
    pub folded: u64,
    /// IOMMU invalidations across devices, per unit and type.
    pub units: inval::Units,
    /// The trace's latest moment (CLOCK_MONOTONIC): its newest record, or
    /// later where the session says time went on (`advance`). States that
    /// last (a link below its maximum) are counted up to it.
    pub now_ns: u64,
}

/// The row of the devices beyond `Aggregator::max_devices`.
pub const FOLDED_DEVICES: &str = "(other devices)";

impl Aggregator {
    pub fn new() -> Self {
        Self::default()
    }

    /// An aggregator that keeps at most `n` devices apart (input that may
    /// name any number of them: trace files).
    pub fn with_max_devices(n: usize) -> Self {
        Self {
            max_devices: Some(n),
            ..Self::default()
        }
    }

    /// The name `name`'s data goes under: its own while the aggregator has
    /// room for it (`max_devices`), [`FOLDED_DEVICES`] after. Callers that
    /// keep per-device state of their own (a report's series, the ledger)
    /// use it so that they are bounded alike.
    pub fn admit(&mut self, name: &Arc<str>) -> Arc<str> {
        let room = self.max_devices.is_none_or(|n| self.devices.len() < n)
            && memory_budget::fits(Keeper::Devices, DEVICE_BYTES);
        if room || self.devices.contains_key(name) || &**name == FOLDED_DEVICES {
            return name.clone();
        }
        self.folded += 1;
        Arc::from(FOLDED_DEVICES)
    }

    /// Time went on to `ts` (a session's tick with no record since).
    pub fn advance(&mut self, ts: u64) {
        self.now_ns = self.now_ns.max(ts);
    }

    /// The probe families' state of `device`, made if new.
    pub fn families_mut(&mut self, device: &Arc<str>) -> &mut crate::families::Devices {
        &mut self.device(device).families
    }

    /// A pointer compare for a run of one device's records, else one hash
    /// of the name (devices.rs, `Devices::slot_of`).
    fn device(&mut self, name: &Arc<str>) -> &mut DeviceStats {
        let slot = match self.devices.slot_of(name) {
            Some(i) => i,
            None => {
                let full = self.max_devices.is_some_and(|n| self.devices.len() >= n);
                if &**name != FOLDED_DEVICES
                    && (full || !memory_budget::take_or_drop(Keeper::Devices, DEVICE_BYTES))
                {
                    self.folded += 1;
                    return self.devices.get_or_default(&Arc::from(FOLDED_DEVICES));
                }
                self.devices.insert(name, DeviceStats::default())
            }
        };
        self.devices.at_mut(slot)
    }

    /// Adds one decoded record, attributed to `device`.
    pub fn ingest(&mut self, record: &Record, device: &Arc<str>) {
        if let Record::Event(ev) = record {
            if ev.kind == kind::IOMMU_INVAL {
                return self.ingest_inval(ev, device);
            }
        }
        self.events += 1;
        let ev = *record.event();
        self.now_ns = self.now_ns.max(ev.ts_ns);
        let d = self.device(device);
        d.events += 1;
        if d.first_ts == 0 {
            d.first_ts = ev.ts_ns;
        }
        d.last_ts = d.last_ts.max(ev.ts_ns);
        match record {
            Record::Sg(sg) => {
                d.dma_api.note_record(&ev);
                if ev.kind == kind::DMA_MAP_SG {
                    d.sg_maps += 1;
                    d.sg_entries = d.sg_entries.saturating_add(u64::from(sg.nents));
                    let lens = &sg.lens[..(sg.n_lens as usize).min(sg.lens.len())];
                    d.dma.map_entries(
                        ev.addr,
                        ev.size,
                        lens.iter().filter(|&&l| l > 0).map(|&l| u64::from(l)),
                        ev.ts_ns,
                        task_of(&ev),
                    );
                    if let Some(b) = d.bytes_by_dir.get_mut(ev.dir as usize) {
                        *b = b.saturating_add(ev.size);
                    }
                } else {
                    d.dma.unmap_handle(ev.addr, ev.size, ev.ts_ns);
                    d.note_unmap(&ev, ev.size, MapLevel::DmaApi);
                }
            }
            // Xids are counted by the ledger, once per event however many
            // channels reported it.
            Record::Xid(_) => {}
            Record::Event(_) => {
                if !Self::ingest_event(d, &ev) {
                    self.decode_errors += 1;
                }
            }
        }
    }

    /// One plain event into its device's tables (looked up once per record
    /// by `ingest`: the name lookup is a hash of it, `devices`).
    /// Returns false for a record no event can be (counted as undecodable).
    fn ingest_event(d: &mut DeviceStats, ev: &Event) -> bool {
        if d.families.ingest(&Record::Event(*ev)) {
            return true;
        }
        d.dma_api.note_record(ev);
        match ev.kind {
            // A failed map (dma:dma_map_page fires for it too, with
            // DMA_MAPPING_ERROR as the handle) mapped nothing.
            kind::DMA_MAP if ev.addr == u64::MAX => d.map_errors += 1,
            kind::DMA_MAP => {
                d.dma.map(ev.addr, ev.size, ev.ts_ns, task_of(ev));
                if let Some(b) = d.bytes_by_dir.get_mut(ev.dir as usize) {
                    *b = b.saturating_add(ev.size);
                }
            }
            // An IOVA unlink or destroy ends every link in its range.
            kind::DMA_UNMAP if ev.flags & flags::IOVA != 0 => {
                d.dma.unmap_each(ev.addr, ev.size, ev.ts_ns);
                d.note_unmap(ev, ev.size, MapLevel::DmaApi);
            }
            kind::DMA_UNMAP => {
                d.dma.unmap_handle(ev.addr, ev.size, ev.ts_ns);
                d.note_unmap(ev, ev.size, MapLevel::DmaApi);
            }
            kind::IOMMU_MAP | kind::IOMMU_UNMAP => {
                if ev.flags & flags::VIA_DMA_API != 0 {
                    d.iommu_via_dma_api += 1;
                } else if ev.flags & flags::VIA_DOMAIN != 0 {
                    d.iommu_via_domain += 1;
                }
                if ev.kind == kind::IOMMU_MAP {
                    d.iommu.map(ev.addr, ev.size, ev.ts_ns, task_of(ev));
                } else {
                    d.iommu.unmap(ev.addr, ev.aux.max(ev.size), ev.ts_ns);
                    d.note_unmap(ev, ev.aux.max(ev.size), MapLevel::Iommu);
                }
            }
            kind::DMA_ALLOC => d.coherent.map(ev.addr, ev.size, ev.ts_ns, task_of(ev)),
            kind::DMA_FREE => {
                d.coherent.unmap_handle(ev.addr, ev.size, ev.ts_ns);
                d.note_unmap(ev, ev.size, MapLevel::Coherent);
            }
            // Only the ops that exist: one histogram per distinct op, and a
            // crafted file could name 2^32 of them.
            kind::LATENCY if ev.aux < u64::from(op::COUNT) => {
                let o = ev.aux as u32;
                if let Some(l) = d.latency.get_mut(&o) {
                    l.record(ev.size);
                } else if memory_budget::take_or_drop(Keeper::Rows, latency::OP_BYTES) {
                    d.latency.entry(o).or_default().record(ev.size);
                }
            }
            kind::LATENCY => return false,
            kind::DMA_MAP_ERR => {
                d.map_errors += 1;
            }
            kind::DMA_MAP_SG_ERR => d.map_errors += 1,
            kind::GROUP_ADD_DEVICE => d.iommu_group = Some(ev.aux as u32),
            kind::GROUP_REMOVE_DEVICE => d.iommu_group = None,
            // Faults (io_page_fault, AER) are counted by the ledger.
            _ => {}
        }
        true
    }

    /// Counts a fault (an Xid when `xid` is set) on its device: called by
    /// the ledger once per incident, whichever channels reported it.
    pub fn count_fault(&mut self, device: &Arc<str>, xid: Option<u32>, n: u64) {
        let d = self.device(device);
        if let Some(x) = xid {
            d.xids = d.xids.saturating_add(n);
            // Per number within the reader's budget (a crafted file may name
            // 2^32 of them); the total above is always exact.
            if d.xid_counts.contains_key(&x)
                || memory_budget::take_or_drop(Keeper::Rows, XID_ROW_BYTES)
            {
                let c = d.xid_counts.entry(x).or_default();
                *c = c.saturating_add(n);
            }
        } else {
            d.faults = d.faults.saturating_add(n);
        }
    }

    /// The names of the devices seen, for saying which `--device` filters
    /// matched none (live and report alike).
    pub fn device_names(&self) -> Vec<String> {
        self.devices.keys().map(|d| d.to_string()).collect()
    }

    /// Pids seen whose names are not known yet.
    pub fn unnamed_pids(&self) -> Vec<u32> {
        let mut out: Vec<u32> = self
            .devices
            .values()
            .flat_map(|d| [&d.dma, &d.iommu, &d.coherent])
            .flat_map(|l| l.procs.iter().map(|(pid, _)| pid))
            .filter(|p| {
                *p != procs::OTHER_PID && *p != INTERRUPT_PID && !self.names.contains_key(p)
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Mappings outstanding for longer than `threshold_ns` at `now_ns`
    /// (kernel monotonic clock), oldest first, per device and level.
    pub fn long_lived(
        &self,
        now_ns: u64,
        threshold_ns: u64,
        limit: usize,
    ) -> Vec<(String, &'static str, LongLived)> {
        let mut out = Vec::new();
        for (name, d) in &self.devices {
            for (lvl, l) in [
                ("dma", &d.dma),
                ("iommu", &d.iommu),
                ("coherent", &d.coherent),
            ] {
                for m in l.long_lived(now_ns, threshold_ns, limit) {
                    out.push((name.to_string(), lvl, m));
                }
            }
        }
        out.sort_by(|a, b| b.2.age_s.total_cmp(&a.2.age_s));
        out.truncate(limit);
        out
    }

    /// Per-device snapshot; `interval_secs` is the time since the previous
    /// snapshot (for events/s), `filter` keeps only the named devices.
    pub fn snapshot(&mut self, interval_secs: f64, filter: &[String]) -> Vec<DeviceSnapshot> {
        let mut out = Vec::new();
        for (name, d) in &mut self.devices {
            if !filter.is_empty() && !filter.iter().any(|f| f.as_str() == &**name) {
                continue;
            }
            let events = d.events.max(d.kernel_hits);
            let rate = if interval_secs > 0.0 {
                events.saturating_sub(d.events_at_last_snapshot) as f64 / interval_secs
            } else {
                0.0
            };
            d.events_at_last_snapshot = events;
            if d.dma_api.unmap_not_needed > 0 {
                d.dma.skip_unmaps();
            }
            let mut dma = d.dma.snapshot();
            if dma.lifetime_ns.count == 0 {
                if let Some(l) = kernel_tables::kernel_lifetimes(&d.kernel_latency) {
                    dma.lifetime_ns = l;
                }
            }
            let iommu = d.iommu.snapshot();
            // Never "iommu" for a device the IOMMU did not map for (no
            // IOMMU, or passthrough): "none" until one level has activity.
            let (level, primary, procs) = if d.dma.maps > 0 || d.dma.unmaps > 0 {
                ("dma", &dma, &d.dma.procs)
            } else if d.iommu.maps > 0 || d.iommu.unmaps > 0 {
                ("iommu", &iommu, &d.iommu.procs)
            } else {
                ("none", &dma, &d.dma.procs)
            };
            let mut processes: Vec<ProcessRow> = procs
                .iter()
                .map(|(pid, p)| {
                    let n = self.names.get(&pid);
                    let irq = pid == INTERRUPT_PID;
                    ProcessRow {
                        pid: if irq { 0 } else { pid },
                        context: irq.then_some("interrupt"),
                        comm: if irq {
                            Some("(interrupt context)".to_owned())
                        } else {
                            n.and_then(|n| n.comm.clone())
                        },
                        container: n.and_then(|n| n.container.clone()),
                        maps: p.maps,
                        unmaps: p.unmaps,
                        bytes_mapped: p.bytes_mapped,
                        outstanding_mappings: p.outstanding,
                        outstanding_bytes: p.outstanding_bytes,
                    }
                })
                .collect();
            processes.sort_by(|a, b| {
                (b.outstanding_bytes, b.bytes_mapped, a.pid).cmp(&(
                    a.outstanding_bytes,
                    a.bytes_mapped,
                    b.pid,
                ))
            });
            processes.truncate(TOP_PROCESSES);
            let gpu = self.gpus.iter().find(|g| *g.bus_id == **name).cloned();
            let latency_ns = latency::snapshot_of(d);
            let window_s = d.last_ts.saturating_sub(d.first_ts) as f64 / 1e9;
            let translation =
                budget::budget(&latency_ns, window_s, primary.bytes_mapped, d.inval.time());
            let invalidations = d.inval.rows();
            out.push(DeviceSnapshot {
                device: name.to_string(),
                level,
                dma_source: d.dma_api.source(),
                dma_sources: d.dma_api.sources(),
                iova: d.dma_api.iova_snapshot(),
                unmap_not_needed: d.dma_api.unmap_not_needed,
                maps: primary.maps,
                unmaps: primary.unmaps,
                bytes_mapped: primary.bytes_mapped,
                bytes_unmapped: primary.bytes_unmapped,
                map_size: primary.size.clone(),
                outstanding_mappings: primary.outstanding_mappings,
                outstanding_bytes: primary.outstanding_bytes,
                bytes_to_device: d.bytes_by_dir[1],
                bytes_from_device: d.bytes_by_dir[2],
                bytes_bidirectional: d.bytes_by_dir[0],
                sg_maps: d.sg_maps,
                sg_entries: d.sg_entries,
                sg_truncated: d.dma_api.sg_truncated,
                sg_unmap_truncated: d.dma_api.sg_unmap_truncated,
                dma_syncs: d.dma_api.syncs,
                dma_sync_bytes: d.dma_api.sync_bytes,
                families: d.families.snapshot(self.now_ns),
                coherent_allocs: d.coherent.maps,
                coherent_frees: d.coherent.unmaps,
                coherent_bytes: d.coherent.bytes_mapped,
                map_errors: d.map_errors,
                faults: d.faults,
                xids: d.xids,
                events: d.events.max(d.kernel_hits),
                events_per_sec: rate,
                iommu_group: d.iommu_group,
                iommu_via_dma_api: d.iommu_via_dma_api,
                iommu_via_domain: d.iommu_via_domain,
                latency_ns,
                dma,
                iommu,
                gpu,
                iommu_policy: self.policies.get(&**name).cloned(),
                driver: self.drivers.get(&**name).cloned(),
                translation,
                invalidations_via: (!invalidations.is_empty()).then_some(d.inval.via),
                invalidations,
                cache_tag_flushes: d.inval.tag_rows(),
                processes,
            });
        }
        out
    }
}

/// The level (0 dma, 1 iommu, 2 coherent) a record of kind `k` opens
/// (true) or closes, per the kind catalogue.
pub fn span_of(k: u16) -> Option<(u8, bool)> {
    use gpudirect_trace_common::kind::{MapLevel, Span};
    let level = |l| match l {
        MapLevel::Dma => 0,
        MapLevel::Iommu => 1,
        MapLevel::Coherent => 2,
    };
    match kind::info(k).span {
        Span::Opens(l) => Some((level(l), true)),
        Span::Closes(l) => Some((level(l), false)),
        Span::None => None,
    }
}

/// iommu:io_page_fault flags: IOMMU_FAULT_READ 0x0, IOMMU_FAULT_WRITE 0x1
/// (include/linux/iommu.h).
pub fn fault_access(flags: u64) -> &'static str {
    if flags & 1 != 0 {
        "write"
    } else {
        "read"
    }
}

#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod tests_iova;
