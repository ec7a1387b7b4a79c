//! A tracing session: the loaded tracer, the kernel-log follower and the
//! analysis they feed. Every sink (live view, recorder, metrics server) runs
//! on one (`driver::run`), so they all see the same events, counts, losses
//! and incidents.

mod checks;
pub mod driver;
mod options;
mod stacks_to_write;
pub mod stop_signals;
pub mod uevent;

use std::{sync::Arc, time::Instant};

use tokio::io::{unix::AsyncFd, Interest};

pub use self::{
    driver::{Ending, Job, RunOptions, Sink, StopReason},
    options::{SessionOptions, StrictFailure, STRICT_EXIT},
    stacks_to_write::StacksToWrite,
};
use crate::{
    aggregate::ProcName,
    analysis::{Analysis, Outcome},
    decode::{decode_into, Record},
    ebpf::{EventRing, SelfStats, Status, Tracer, TracerOptions},
    faults::KmsgFollower,
    gpu::{process::ProcCache, FactsSource as _, GpuIdentity, NvmlSource, NvmlStatus, Sample},
    model::{misuse::CheckSetup, pci::DriverChange, Fault, Incident, TraceClock},
    output,
};

/// What the session observed, handed to the sink in arrival order: the
/// recorder keeps exactly this sequence, which is what makes a replay tell
/// the same story as the live session.
pub enum Observed<'a> {
    /// A decoded ring-buffer record, after the analysis took it.
    Record {
        record: &'a Record,
        device: &'a Arc<str>,
    },
    /// A fault decoded from the kernel log, as decoded (before the ledger).
    LogFault(&'a Fault),
    /// An incident the last record or log fault created or merged into.
    Incident {
        incident: &'a Incident,
        merged: bool,
    },
    /// An NVML reading of the GPUs (every `NVML_EVERY`, where NVML is).
    Nvml(&'a Sample),
    /// Names of pids seen (resolved at each refresh, for trace files).
    Names(&'a [ProcName]),
    /// A driver bound to or let go of a PCI device (`--check`), after
    /// everything before it in the ring.
    Driver(&'a DriverChange),
    /// Kernel stacks, symbolized (`--stacks`): those the findings name,
    /// and for a trace file those its records name (`StacksToWrite`).
    Stacks(&'a [crate::model::misuse::StackFrames]),
}

/// NVML is read this often (each reading is a few calls per GPU).
pub const NVML_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// The host's GPUs as the session knows them.
pub struct GpuState {
    pub identities: Vec<GpuIdentity>,
    pub status: NvmlStatus,
    source: Option<NvmlSource>,
}

impl GpuState {
    /// No GPU lookup (sessions driven by hand in tests).
    pub fn none() -> Self {
        Self {
            identities: Vec::new(),
            status: NvmlStatus::Unavailable {
                why: "not looked for".into(),
            },
            source: None,
        }
    }

    /// The driver's GPUs (/proc/driver/nvidia, sysfs), with NVML's numbering
    /// and facts where NVML loads.
    pub fn discover() -> (Self, Option<Sample>) {
        let ids = crate::gpu::identity::from_tree(&crate::hosttree::Tree::live());
        let mut src = NvmlSource::open();
        let status = src.status();
        if !status.is_available() {
            return (
                Self {
                    identities: ids,
                    status,
                    source: None,
                },
                None,
            );
        }
        let first = src.sample();
        let nvml_ids: Vec<GpuIdentity> = first.gpus.iter().map(|g| g.identity.clone()).collect();
        let identities = crate::gpu::identity::merge(ids, &nvml_ids);
        (
            Self {
                identities,
                status,
                source: Some(src),
            },
            Some(first),
        )
    }

    pub fn nvml_available(&self) -> bool {
        self.source.is_some()
    }
}

/// Where the ring buffer is: the session's own (sessions driven by hand,
/// e.g. the host tests), or in the driver's async fd. Either way it is not
/// in the tracer, so a drain can read records in place while the tracer
/// names their devices (`pump`).
enum Ring {
    Sync(EventRing),
    Async(AsyncFd<EventRing>),
    /// The tracer had none (already taken).
    None,
}

impl Ring {
    fn get_mut(&mut self) -> Option<&mut EventRing> {
        match self {
            Ring::Sync(r) => Some(r),
            Ring::Async(fd) => Some(fd.get_mut()),
            Ring::None => None,
        }
    }
}

pub struct Session {
    pub tracer: Tracer,
    pub analysis: Analysis,
    /// Streaming (every event) or aggregate-only.
    pub stream: bool,
    pub started: Instant,
    kmsg: Option<KmsgFollower>,
    /// Why the kernel log is not followed, if it is not.
    pub kmsg_error: Option<String>,
    ring: Ring,
    pub gpus: GpuState,
    procs: ProcCache,
    /// NVML's first reading, handed to the sink with the first drain.
    pending_nvml: Option<Sample>,
    /// How DMA-API misuse is checked (`--check`), None when it is not.
    pub check: Option<CheckSetup>,
    /// Driver binds and unbinds (with `--check`).
    uevents: Option<uevent::Uevents>,
    /// The kernel's symbols, kept current (with `--stacks`).
    symbols: Option<crate::symbols::Symbolizer>,
    /// Pids /proc no longer had and no exit record had named yet: looked
    /// up once more on the next tick (their exit record may still be in
    /// the ring).
    unnamed_once: std::collections::HashSet<u32>,
    /// cgroup ids to paths, for exited processes' containers.
    cgroups: crate::gpu::cgroup_index::CgroupIndex,
    /// The families' own sources of records (sysfs link states, ...).
    sources: Vec<Box<dyn crate::families::Source>>,
}

impl Session {
    /// Loads and attaches the programs and starts following the kernel log.
    pub fn start(opts: &SessionOptions) -> anyhow::Result<Self> {
        let tracer = Tracer::load(&TracerOptions {
            stream: opts.stream,
            lifetimes: opts.lifetimes,
            lifetime_sample: opts.lifetime_sample,
            ring_bytes: opts.ring_bytes,
            dma_source: opts.dma_source,
            sg_walk_max: opts.sg_walk_max,
            stacks: opts.check && opts.stacks,
            stacks_every_call: opts.stacks_every_call,
            stack_depth: opts.stack_depth,
            ..Default::default()
        })?;
        let failed = tracer.failed();
        if opts.strict && !failed.is_empty() {
            return Err(StrictFailure(failed).into());
        }
        if tracer.attached() == 0 {
            anyhow::bail!(
                "no probe could be attached on kernel {}; run `gpudirect-trace probes` for the reasons",
                tracer.kernel.release
            );
        }
        let unavailable = tracer
            .probes
            .iter()
            .filter(|p| p.status == Status::Unavailable)
            .count();
        // Said last, once the session is ready: scripts start their workload
        // on this line, and a driver bound before the uevent socket opened
        // would go unseen (7.2 VM: gdt-misuse's bind, insmod right after it).
        let attached = format!(
            "kernel {}: {} probes attached, {} unavailable on this kernel, {} failed \
             (details: gpudirect-trace probes)",
            tracer.kernel.release,
            tracer.attached(),
            unavailable,
            failed.len()
        );
        let mut session = Self::from_tracer(tracer, opts.stream);
        let (gpus, first) = GpuState::discover();
        session.analysis.agg.gpus = gpus.identities.clone();
        let pci = crate::tracefile::pci_inventory(std::path::Path::new("/sys"));
        session.analysis.set_devices(&pci);
        if opts.check {
            session.start_checks(opts, &pci)?;
        }
        // Devices added and removed (the PCIe family), driver binds and
        // unbinds (the driver column, the misuse checks): one socket.
        match uevent::Uevents::open() {
            Ok(u) => session.uevents = Some(u),
            Err(e) => output::warn(&format!(
                "cannot follow PCI uevents ({e}): device removals and driver binds{} go unseen",
                if opts.check {
                    " (and the leak check at unbind)"
                } else {
                    ""
                }
            )),
        }
        let probes = &session.tracer.probes;
        session.sources = crate::families::sources(&|name| {
            probes
                .iter()
                .any(|p| p.name == name && p.status == Status::Attached)
        });
        if let NvmlStatus::Unavailable { why } = &gpus.status {
            if !gpus.identities.is_empty() {
                output::note(&format!(
                    "NVML not available ({why}): GPUs shown without its facts"
                ));
            }
        }
        session.gpus = gpus;
        session.pending_nvml = first;
        if opts.follow_kmsg {
            // VT-d faults, Xid lines and AER errors reach us through the
            // kernel log: follow it from now on.
            match KmsgFollower::open() {
                Ok(k) => session.kmsg = Some(k),
                Err(e) => {
                    let msg = format!(
                        "not following /dev/kmsg ({e}): VT-d faults, Xid and AER lines will be missed"
                    );
                    output::warn(&msg);
                    session.kmsg_error = Some(msg);
                }
            }
        }
        output::note(&attached);
        for f in &failed {
            output::warn(f);
        }
        Ok(session)
    }

    /// A session around an already loaded tracer (`stream` as it was loaded
    /// with), not following the kernel log, its clock starting now; the host
    /// tests use it to drive programs they run themselves.
    pub fn from_tracer(mut tracer: Tracer, stream: bool) -> Self {
        let ring = match tracer.take_ring() {
            Some(r) => Ring::Sync(r),
            None => Ring::None,
        };
        Self {
            tracer,
            analysis: Analysis::new(TraceClock::now()),
            stream,
            started: Instant::now(),
            kmsg: None,
            kmsg_error: None,
            ring,
            gpus: GpuState::none(),
            procs: ProcCache::live(),
            pending_nvml: None,
            check: None,
            uevents: None,
            symbols: None,
            unnamed_once: Default::default(),
            cgroups: crate::gpu::cgroup_index::CgroupIndex::host(),
            sources: Vec::new(),
        }
    }

    /// Hands the families' sources' records on as the programs' are: into
    /// the analysis, then to `f`. `start`: the state as the session starts;
    /// else what changed since the last poll.
    pub fn poll_sources(
        &mut self,
        start: bool,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let now = crate::kernel::monotonic_ns();
        self.analysis.agg.advance(now);
        let mut out = Vec::new();
        for s in &mut self.sources {
            if start {
                s.start(now, &mut out);
            } else {
                s.poll(now, &mut out);
            }
        }
        self.synthesized(out, f)
    }

    /// A PCI device arrived or left: the sources' records for it.
    pub fn presence(
        &mut self,
        p: &crate::model::pci::Presence,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut out = Vec::new();
        for s in &mut self.sources {
            s.presence(p, &mut out);
        }
        if !p.added {
            // Its address may be given to the next device the kernel makes.
            self.tracer.forget_device(&p.device);
        }
        self.synthesized(out, f)
    }

    fn synthesized(
        &mut self,
        records: Vec<crate::families::Synth>,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        for s in records {
            let outcome = self.analysis.record(&s.record, &s.device);
            f(Observed::Record {
                record: &s.record,
                device: &s.device,
            })?;
            self.incident(outcome, f)?;
        }
        Ok(())
    }

    /// Reads NVML (where it loaded) into the analysis, handing the reading
    /// to `f` first (the recorder keeps it).
    pub fn sample_nvml(
        &mut self,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let sample = match self.pending_nvml.take() {
            Some(s) => s,
            None => match self.gpus.source.as_mut() {
                Some(src) => src.sample(),
                None => return Ok(()),
            },
        };
        f(Observed::Nvml(&sample))?;
        self.analysis.nvml(sample);
        Ok(())
    }

    /// Looks up the pids seen whose names are not known yet (comm,
    /// container, from /proc while they run), keeps them for the tables and
    /// hands them to `f` (the recorder keeps them).
    pub fn resolve_names(
        &mut self,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        // Every tick: a module loaded since the last one gets its symbols
        // read while it is loaded (its frames keep its names after it goes).
        if let Some(s) = self.symbols.as_mut() {
            s.poll();
        }
        let pids = self.analysis.unnamed_pids();
        if pids.is_empty() {
            return Ok(());
        }
        let mut later = std::collections::HashSet::new();
        let mut names: Vec<ProcName> = Vec::with_capacity(pids.len());
        for pid in pids {
            let info = self.procs.get(pid);
            if pid != 0 && info.exited && info.comm.is_none() && !self.unnamed_once.contains(&pid) {
                later.insert(pid);
                continue;
            }
            names.push(ProcName {
                pid,
                comm: if pid == 0 {
                    Some("[idle/irq]".into())
                } else {
                    info.comm.clone()
                },
                container: info.container.as_ref().map(|c| c.short_id().to_owned()),
            });
        }
        self.unnamed_once = later;
        self.analysis.agg.names_unknown += names
            .iter()
            .filter(|n| n.pid != 0 && n.comm.is_none())
            .count() as u64;
        if names.is_empty() {
            return Ok(());
        }
        f(Observed::Names(&names))?;
        for n in names {
            self.analysis.agg.names.insert(n.pid, n);
        }
        self.analysis.name_incidents();
        Ok(())
    }

    pub fn clock(&self) -> TraceClock {
        *self.analysis.clock()
    }

    /// Moves the ring buffer into an async fd (inside a tokio runtime), so
    /// the driver can wait for it.
    fn ring_to_async(&mut self) -> anyhow::Result<()> {
        if let Ring::Sync(_) = self.ring {
            let Ring::Sync(ring) = std::mem::replace(&mut self.ring, Ring::None) else {
                unreachable!("matched above");
            };
            // SAFETY: the AsyncFd owns the ring buffer, whose map fd stays
            // open and the same until the AsyncFd is dropped.
            let fd = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
                .map_err(|e| e.into_parts().1)?;
            self.ring = Ring::Async(fd);
        }
        Ok(())
    }

    /// Drains the ring buffer into the analysis, handing what it observed to
    /// `f` in order. Returns the records drained.
    ///
    /// Records are decoded in place, each released to the kernel once it is
    /// taken: copying every record out first (a heap allocation each) was
    /// ~40% of the live path's CPU per event (`cargo xtask bench`,
    /// reader_cpu). A sink error stops the drain; what is still in the ring
    /// stays there for the next one.
    pub fn pump(
        &mut self,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<usize> {
        let Some(ring) = self.ring.get_mut() else {
            return Ok(0);
        };
        let mut n = 0;
        // One record decoded into in place, record after record (decode_into).
        // Prefetching the ring 512 bytes ahead changed nothing (live 44.0-45.2
        // against 44.9 ns per event, CI host, three rounds).
        let mut record = Record::Event(Default::default());
        while let Some(item) = ring.next_record() {
            n += 1;
            if let Err(e) = decode_into(item, &mut record) {
                self.analysis.agg.decode_errors += 1;
                log::debug!("undecodable record: {e}");
                continue;
            }
            if let Some((pid, comm)) = crate::decode::process_exit(&record) {
                let cgroup = self.cgroups.path(record.event().size);
                self.procs.note_exit(pid, comm, cgroup);
            }
            let device = self.tracer.device_name_ref(record.event().dev);
            let outcome = self.analysis.record(&record, device);
            f(Observed::Record {
                record: &record,
                device,
            })?;
            Self::incident_of(&self.analysis, outcome, f)?;
        }
        Ok(n)
    }

    /// Every record waiting in the ring, to `f` undecoded (benchmarks: the
    /// floor of reading the ring).
    #[cfg(any(test, feature = "test-support"))]
    pub fn drain_raw(&mut self, f: impl FnMut(&[u8])) -> usize {
        match self.ring.get_mut() {
            Some(ring) => crate::ebpf::drain_ring(ring, f),
            None => 0,
        }
    }

    fn incident(
        &self,
        outcome: Option<Outcome>,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        Self::incident_of(&self.analysis, outcome, f)
    }

    fn incident_of(
        analysis: &Analysis,
        outcome: Option<Outcome>,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let Some(o) = outcome else { return Ok(()) };
        match analysis.ledger.get(o.id()) {
            Some(incident) => f(Observed::Incident {
                incident,
                merged: matches!(o, Outcome::Merged(_)),
            }),
            None => Ok(()),
        }
    }

    /// Reads new kernel log records and takes the faults they report.
    pub fn poll_kmsg(
        &mut self,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let Some(k) = self.kmsg.as_mut() else {
            return Ok(());
        };
        match k.poll() {
            Ok(faults) => self.log_faults(faults, f),
            Err(e) => {
                self.kmsg_error = Some(format!("reading /dev/kmsg failed: {e}"));
                self.kmsg = None;
                Ok(())
            }
        }
    }

    /// Takes a multi-line kernel-log report still being assembled (at the
    /// end of a session).
    pub fn flush_kmsg(
        &mut self,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let faults = self.kmsg.as_mut().map(|k| k.flush()).unwrap_or_default();
        self.log_faults(faults, f)
    }

    /// Faults decoded from the kernel log, taken in order.
    pub fn log_faults(
        &mut self,
        faults: Vec<Fault>,
        f: &mut dyn FnMut(Observed<'_>) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        for fault in faults {
            f(Observed::LogFault(&fault))?;
            let outcome = self.analysis.log_fault(fault);
            self.incident(Some(outcome), f)?;
        }
        Ok(())
    }

    /// Records lost from /dev/kmsg before we read them.
    pub fn kmsg_lost(&self) -> u64 {
        self.kmsg.as_ref().map_or(0, |k| k.lost_records)
    }

    /// Takes the kernel's loss-free counters (and, in aggregate-only mode,
    /// its mapping table) into the tables; returns the programs' own counts.
    pub fn refresh_counters(&mut self) -> SelfStats {
        let counters = self.tracer.kernel_counters();
        let agg = &mut self.analysis.agg;
        agg.apply_kernel_counters(&counters);
        let latency = self.tracer.kernel_latency();
        self.analysis.agg.apply_kernel_latency(&latency);
        if !self.stream {
            let mappings = self.tracer.kernel_mappings();
            self.analysis.agg.apply_kernel_mappings(&mappings);
            let inval = self.tracer.kernel_invalidations();
            self.analysis.agg.apply_kernel_invalidations(&inval);
        }
        self.tracer
            .self_stats_with(counters.iter().map(|(_, k, c)| (k, c)))
    }
}
