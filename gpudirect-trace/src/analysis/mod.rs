//! What a trace says: the aggregator's per-device tables and the ledger's
//! incidents, fed by the same two inputs wherever the trace comes from:
//! decoded ring-buffer records and faults decoded from the kernel log.
//!
//! The live session, the recorder (whose file keeps both inputs in arrival
//! order) and the replay of a file all go through `Analysis`, so the same
//! events tell the same story in every view.

pub mod ledger;
pub mod misuse;

use std::sync::Arc;

use gpudirect_trace_common::kind;

pub use self::ledger::{FaultCountKey, Ledger, Outcome, INCIDENTS_KEPT};
use crate::{
    aggregate::{Aggregator, ProcName},
    decode::{c_text, dir_name, Record},
    faults::tracepoint,
    gpu::Sample,
    memory_budget::{self, Keeper},
    model::{
        incident::{Context, IommuChange, MapError},
        pci::Topology,
        task_of, Channel, Fault, MappingState, Process, Source, TraceClock,
    },
};

/// A task the session's names can still name: known by pid, no name given.
/// What `unnamed_pids` asks for and what `fill_comm` fills are one set.
fn nameable(p: &Process) -> bool {
    p.comm.is_none() && p.pid != 0
}

/// Fills in the name of a task's process from the names the session has
/// (its exit record, or /proc), where the source gave none.
fn fill_comm(names: &std::collections::HashMap<u32, ProcName>, p: &mut Option<Process>) {
    if let Some(p) = p.as_mut().filter(|p| nameable(p)) {
        p.comm = names.get(&p.pid).and_then(|n| n.comm.clone());
    }
}

pub struct Analysis {
    pub agg: Aggregator,
    pub ledger: Ledger,
    /// The misuse checks (`--check`), when on.
    pub checker: Option<misuse::Checker>,
    /// Kernel stacks (`--stacks`) by id, symbolized.
    pub stacks: std::collections::BTreeMap<u32, Vec<String>>,
    /// NVML's first and latest readings (live: taken by the session;
    /// replay: from the file's NVML blocks, in the same order).
    pub nvml_first: Option<Sample>,
    pub nvml_latest: Option<Sample>,
    /// Which port each PCI device hangs off: the kernel names a link by its
    /// port, its records are the devices' below it.
    pub topology: Topology,
}

/// Seconds of a process's DMA activity an Xid's context shows.
pub const CONTEXT_WINDOW_S: u64 = 5;
/// Devices whose bound driver is kept from bind records (a host has a few
/// hundred PCI functions).
const MAX_DRIVERS_KEPT: usize = 4096;
/// Bytes of a driver's name (and of its device's) kept from a record.
const MAX_DRIVER_NAME: usize = 64;

impl Analysis {
    pub fn new(clock: TraceClock) -> Self {
        Self {
            agg: Aggregator::new(),
            ledger: Ledger::new(clock),
            checker: None,
            stacks: Default::default(),
            nvml_first: None,
            nvml_latest: None,
            topology: Topology::default(),
        }
    }

    /// The host's PCI devices as the trace started (sysfs, or a file's
    /// header): their IOMMU policies and the ports they hang off.
    pub fn set_devices(&mut self, devices: &[crate::tracefile::PciDevice]) {
        self.agg.policies = crate::tracefile::policies(devices);
        self.agg.drivers = crate::tracefile::drivers(devices);
        for d in devices {
            if let Some(port) = &d.upstream {
                self.topology.insert(&d.bus_id, port);
            }
        }
    }

    /// Turns the misuse checks on, with the kernel image's ranges and the
    /// devices' drivers as the trace started.
    pub fn enable_checks<'a>(
        &mut self,
        setup: &crate::model::misuse::CheckSetup,
        drivers: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    ) {
        let mut c = misuse::Checker::new(*self.clock(), setup.kernel_image.clone())
            .with_stacks(setup.stacks);
        for (dev, drv) in drivers {
            c.set_driver(dev, drv);
        }
        self.checker = Some(c);
    }

    /// The loss check: `lost_total` events lost since the start. Findings
    /// made since the last check become incidents when nothing was lost
    /// (see analysis::misuse); returns them.
    pub fn confirm(&mut self, lost_total: u64) -> Vec<Outcome> {
        let Some(c) = self.checker.as_mut() else {
            return Vec::new();
        };
        let names = &self.agg.names;
        c.confirm(lost_total)
            .into_iter()
            .map(|mut m| {
                // The names the tick just resolved (an exited insmod's from
                // its exit record): the finding carries them everywhere.
                for call in [m.map.as_mut(), Some(&mut m.call)].into_iter().flatten() {
                    fill_comm(names, &mut call.process);
                }
                Outcome::New(self.ledger.misuse(m))
            })
            .collect()
    }

    /// The pids whose names the session has yet to look up: the tables'
    /// (a process row) and the incidents' (a failed map's task may have
    /// mapped nothing, so no row names it).
    pub fn unnamed_pids(&self) -> Vec<u32> {
        let mut out = self.agg.unnamed_pids();
        out.extend(
            self.ledger
                .incidents()
                .iter()
                .filter_map(|i| i.process.as_ref())
                .filter(|p| nameable(p) && !self.agg.names.contains_key(&p.pid))
                .map(|p| p.pid),
        );
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Names the processes of incidents made before their names were known
    /// (a short-lived writer whose exit record was drained after the loss
    /// check confirmed its finding: seen on a loaded host, two VMs side by
    /// side; an insmod whose map failed, drained with its exit record).
    /// Called whenever names arrive, live and in replay alike.
    pub fn name_incidents(&mut self) {
        let names = &self.agg.names;
        for i in self.ledger.incidents_mut() {
            fill_comm(names, &mut i.process);
            if let Some(m) = i.misuse.as_mut() {
                for call in [m.map.as_mut(), Some(&mut m.call)].into_iter().flatten() {
                    fill_comm(names, &mut call.process);
                }
            }
        }
    }

    /// Stack ids the findings and map failures name without frames yet.
    pub fn missing_stacks(&self) -> Vec<u32> {
        let mut ids = std::collections::BTreeSet::new();
        for i in self.ledger.incidents() {
            if let Some(m) = &i.misuse {
                for c in [m.map.as_ref(), Some(&m.call)].into_iter().flatten() {
                    ids.extend(c.stack_id);
                }
            }
        }
        if let Some(c) = &self.checker {
            for rows in c.stats.map_failures.values() {
                ids.extend(rows.iter().filter_map(|r| r.stack_id));
            }
        }
        ids.into_iter()
            .filter(|id| !self.stacks.contains_key(id))
            .collect()
    }

    /// Symbolized stacks (taken live, or a trace file's STACKS blocks).
    pub fn add_stacks(&mut self, list: &[crate::model::misuse::StackFrames]) {
        for s in list {
            // Within the reader's memory budget (a file's stacks are as
            // many and as long as it likes); live has none.
            if memory_budget::is_on() {
                if self.stacks.contains_key(&s.id) {
                    continue;
                }
                if !memory_budget::take_or_drop(Keeper::Stacks, frames_bytes(&s.frames)) {
                    continue;
                }
            }
            self.stacks.insert(s.id, s.frames.clone());
        }
    }

    /// Puts the known stacks' frames into the findings and the map
    /// failures' callers.
    pub fn fill_stacks(&mut self) {
        let stacks = &self.stacks;
        for i in self.ledger.incidents_mut() {
            let Some(m) = i.misuse.as_mut() else { continue };
            for c in [m.map.as_mut(), Some(&mut m.call)].into_iter().flatten() {
                if let Some(f) = c.stack_id.and_then(|id| stacks.get(&id)) {
                    // Each finding holds its own copy: a reader's within
                    // its memory budget.
                    if !memory_budget::is_on()
                        || (c.stack.is_empty()
                            && memory_budget::take_or_drop(Keeper::Stacks, frames_bytes(f)))
                    {
                        c.stack = f.clone();
                    }
                }
            }
        }
        if let Some(c) = self.checker.as_mut() {
            for rows in c.stats.map_failures.values_mut() {
                for r in rows {
                    if let Some(f) = r.stack_id.and_then(|id| stacks.get(&id)) {
                        r.caller = crate::symbols::caller(f).map(str::to_owned);
                    }
                }
            }
        }
    }

    /// A device's driver bound (`driver`) or let go (None) of it.
    pub fn driver_change(&mut self, device: &Arc<str>, driver: Option<&str>, ts_ns: u64) {
        // Bounded (a file's records could name devices and drivers without
        // end): at most MAX_DRIVERS_KEPT devices, names cut to
        // MAX_DRIVER_NAME bytes (a kernel's driver names are ~20).
        // One key for the look-up, the insert and the removal.
        let key = crate::sanitize::cut(device, MAX_DRIVER_NAME);
        let known = self.agg.drivers.contains_key(key);
        match driver {
            Some(d) if known || self.agg.drivers.len() < MAX_DRIVERS_KEPT => {
                let d = crate::sanitize::cut(d, MAX_DRIVER_NAME).to_owned();
                self.agg.drivers.insert(key.to_owned(), d);
            }
            Some(_) => {}
            None => {
                self.agg.drivers.remove(key);
            }
        }
        if let Some(c) = self.checker.as_mut() {
            if driver.is_none() {
                c.unbind(device, ts_ns);
            }
            c.set_driver(device, driver);
        }
    }

    /// An NVML reading (identities, BAR1, replays, ...). A GPU in P0 is
    /// busy: its link speed below the maximum is then a downtrain, not its
    /// power management.
    pub fn nvml(&mut self, s: Sample) {
        let ts = self.agg.now_ns;
        for g in &s.gpus {
            let Some(&p) = g.performance_state.ok() else {
                continue;
            };
            let device: Arc<str> = Arc::from(g.identity.bus_id.as_str());
            if !self.agg.devices.contains_key(&device) {
                continue;
            }
            if let Some(c) = self.agg.families_mut(&device).gpu_busy(p == 0, ts) {
                self.ledger.link(&device, ts, c);
            }
        }
        if self.nvml_first.is_none() {
            self.nvml_first = Some(s.clone());
        }
        self.nvml_latest = Some(s);
    }

    /// What surrounded an Xid on `device` by `pid` at `ts_ns`.
    fn context(&self, device: &str, pid: Option<u32>, ts_ns: u64) -> Option<Context> {
        let activity = pid.and_then(|p| self.agg.activity(device, p, ts_ns, CONTEXT_WINDOW_S));
        let latest = self.nvml_latest.as_ref().and_then(|s| s.gpu(device));
        let bar1 = latest.and_then(|g| g.bar1.ok().copied());
        let replays = |s: &Option<Sample>| {
            s.as_ref()
                .and_then(|s| s.gpu(device))
                .and_then(|g| g.pcie.replays.ok().copied())
        };
        let since = match (replays(&self.nvml_first), replays(&self.nvml_latest)) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        let c = Context {
            activity,
            bar1_used: bar1.map(|b| b.used),
            bar1_total: bar1.map(|b| b.total),
            pcie_replays_since_start: since,
        };
        (c != Context::default()).then_some(c)
    }

    pub fn clock(&self) -> &TraceClock {
        self.ledger.clock()
    }

    /// One decoded ring-buffer record, attributed to `device`: into the
    /// tables, and, for rare events, into the ledger. Returns the incident
    /// it created or merged into. A new incident of a task the session has
    /// named already (a long-running process, named on an earlier tick)
    /// carries its name at once; later names come through `name_incidents`.
    pub fn record(&mut self, record: &Record, device: &Arc<str>) -> Option<Outcome> {
        let out = self.record_unnamed(record, device);
        if let Some(Outcome::New(id)) = out {
            if let Some(i) = self.ledger.get_mut(id) {
                fill_comm(&self.agg.names, &mut i.process);
            }
        }
        out
    }

    fn record_unnamed(&mut self, record: &Record, device: &Arc<str>) -> Option<Outcome> {
        // About a process, not a device: the session keeps its name.
        if record.event().kind == kind::PROC_EXIT {
            return None;
        }
        let ev = record.event();
        if kind::info(ev.kind).class == kind::Class::Pcie {
            return self.pcie(record, device);
        }
        self.agg.ingest(record, device);
        if let Some(c) = self.checker.as_mut() {
            c.record(record, device);
        }
        let fault = match record {
            Record::Xid(x) => Some(tracepoint::from_xid_event(device, x.xid, &c_text(&x.msg))),
            _ => match ev.kind {
                kind::IO_PAGE_FAULT => Some(tracepoint::from_io_page_fault(
                    "",
                    device,
                    ev.addr,
                    ev.aux as u32,
                    "iommu:io_page_fault",
                )),
                kind::AER => Some(tracepoint::from_aer_event(device, ev.addr as u32, ev.aux)),
                // A failed dma_map_page/phys/resource (DMA_MAPPING_ERROR)
                // or dma_alloc_attrs (NULL). Older recordings have them as
                // DMA_MAP with the error as handle.
                kind::DMA_MAP_ERR | kind::DMA_MAP
                    if ev.addr == misuse::DMA_MAPPING_ERROR || ev.kind == kind::DMA_MAP_ERR =>
                {
                    let f = gpudirect_trace_common::flags::COHERENT;
                    let r = gpudirect_trace_common::flags::RESOURCE;
                    let e = MapError {
                        api: if ev.flags & f != 0 {
                            "dma_alloc_attrs"
                        } else if ev.flags & r != 0 {
                            "dma_map_resource"
                        } else {
                            "dma_map_page"
                        }
                        .into(),
                        errno: None,
                        entries: None,
                        bytes: Some(ev.size),
                        direction: dir_name(ev.dir).into(),
                    };
                    let id = self.ledger.map_error(device, ev.ts_ns, task_of(ev), e);
                    return Some(Outcome::New(id));
                }
                kind::DMA_MAP_SG_ERR => {
                    let e = MapError {
                        api: "dma_map_sg".into(),
                        // An i32 in the low half (AUX_STACK_SHIFT).
                        errno: Some(i64::from(ev.aux as u32 as i32)),
                        entries: Some(ev.size),
                        bytes: None,
                        direction: dir_name(ev.dir).into(),
                    };
                    let id = self.ledger.map_error(device, ev.ts_ns, task_of(ev), e);
                    return Some(Outcome::New(id));
                }
                kind::GROUP_ADD_DEVICE | kind::GROUP_REMOVE_DEVICE => {
                    let group = ev.aux as u32;
                    let c = if ev.kind == kind::GROUP_ADD_DEVICE {
                        IommuChange::GroupAdd { group }
                    } else {
                        IommuChange::GroupRemove { group }
                    };
                    return Some(Outcome::New(self.ledger.iommu_change(
                        device,
                        ev.ts_ns,
                        task_of(ev),
                        c,
                    )));
                }
                kind::DOMAIN_ATTACH | kind::DOMAIN_DETACH => {
                    let c = if ev.kind == kind::DOMAIN_ATTACH {
                        IommuChange::DomainAttach
                    } else {
                        IommuChange::DomainDetach
                    };
                    return Some(Outcome::New(self.ledger.iommu_change(
                        device,
                        ev.ts_ns,
                        task_of(ev),
                        c,
                    )));
                }
                _ => None,
            },
        };
        let mut f = fault?;
        f.timestamp_ns = Some(ev.ts_ns);
        // Only where the report names no one: the tracepoint's current task,
        // marked as such.
        if f.process.is_none() {
            f.process = Process::of_task(task_of(ev));
        }
        Some(self.fault(f, Channel::Tracepoint))
    }

    /// A PCIe link or presence record: the kernel names a link by the port
    /// above it, so its records go to the devices below the port (the port
    /// itself where none is known); the loader's own records name the
    /// device. Returns the last incident a change made.
    fn pcie(&mut self, record: &Record, device: &Arc<str>) -> Option<Outcome> {
        let ev = record.event();
        if ev.kind == kind::PCI_HOTPLUG && ev.aux == gpudirect_trace_common::pcie::HP_DEVICE_ADDED {
            if let Some(port) = crate::model::pci::unpack(ev.addr) {
                self.topology.insert(device, &port);
            }
        }
        let from_kernel = ev.flags & gpudirect_trace_common::flags::FROM_USERSPACE == 0;
        let below: Vec<Arc<str>> = if from_kernel {
            self.topology
                .below(device)
                .into_iter()
                .map(Arc::from)
                .collect()
        } else {
            Vec::new()
        };
        let targets = if below.is_empty() {
            vec![device.clone()]
        } else {
            below
        };
        let mut out = None;
        for d in &targets {
            self.agg.ingest(record, d);
            if let Some(c) = self.agg.families_mut(d).take_change() {
                out = Some(Outcome::New(self.ledger.link(d, ev.ts_ns, c)));
            }
        }
        out
    }

    /// One timeline per device that had a grave PCIe incident (its link
    /// down, downtrained, the device gone, Xid 79), with its first cause.
    pub fn timelines(&self) -> Vec<crate::families::pcie::timeline::Timeline> {
        let all: Vec<&crate::model::Incident> = self.ledger.incidents().iter().collect();
        crate::families::pcie::timeline::timelines(&all, &self.topology)
    }

    /// A fault decoded from the kernel log.
    pub fn log_fault(&mut self, f: Fault) -> Outcome {
        if let Some(d) = f.device.as_deref() {
            let d: Arc<str> = Arc::from(d);
            self.agg.families_mut(&d).log_fault(&f);
        }
        self.fault(f, Channel::KernelLog)
    }

    fn fault(&mut self, f: Fault, ch: Channel) -> Outcome {
        let agg = &self.agg;
        let out = self.ledger.fault(f, ch, |f| mapping_of(agg, f));
        if let Outcome::New(id) = out {
            if let Some(f) = self.ledger.get(id).and_then(|i| i.fault.as_ref()) {
                let device: Arc<str> = Arc::from(f.device.as_deref().unwrap_or("-"));
                let (xid, n) = (f.xid, f.count.max(1));
                self.agg.count_fault(&device, xid, n);
            }
        }
        // An Xid's context: its process's DMA on the GPU, the GPU's state.
        // Taken again when the log line's process merges in.
        let xid = self
            .ledger
            .get(out.id())
            .and_then(|i| i.fault.as_ref().map(|f| (i, f)))
            .filter(|(_, f)| f.source == Source::NvidiaXid)
            .map(|(i, f)| {
                let pid = f
                    .process
                    .as_ref()
                    .filter(|p| p.from == crate::model::ProcessOrigin::Reported && p.pid != 0)
                    .map(|p| p.pid);
                (i.device.clone(), pid, i.at.mono_ns)
            });
        if let Some((device, pid, ts)) = xid {
            let c = self.context(&device, pid, ts);
            if let Some(i) = self.ledger.get_mut(out.id()) {
                i.context = c;
            }
        }
        out
    }
}

/// What a stack's frames cost the reader's memory budget.
fn frames_bytes(frames: &[String]) -> usize {
    64 + frames.iter().map(|f| f.len() + 24).sum::<usize>()
}

/// The faulting address in the device's mapping history. An Xid's address
/// is a GPU virtual address, not a bus address: the DMA history cannot
/// speak to it.
fn mapping_of(agg: &Aggregator, f: &Fault) -> Option<MappingState> {
    if f.source == Source::NvidiaXid {
        return None;
    }
    let (device, addr) = (f.device.as_deref()?, f.address?);
    Some(agg.mapping_state(device, addr, f.timestamp_ns))
}

#[cfg(test)]
mod tests_names;
