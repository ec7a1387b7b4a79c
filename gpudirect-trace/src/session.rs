//! A tracing session: the loaded tracer feeding the aggregator. Shared by
//! every sink (live view, recorder, metrics server) so they all see the same
//! events, counts and losses.

use std::{
    collections::{BTreeMap, VecDeque},
    os::fd::{AsRawFd, RawFd},
    sync::Arc,
    time::Instant,
};

use anyhow::bail;
use gpudirect_trace_common::kind;
use tokio::io::unix::AsyncFd;

use crate::{
    aggregate,
    aggregate::Aggregator,
    cli::TraceArgs,
    decode::{c_string, decode, Record},
    ebpf::{SelfStats, Status, Tracer, TracerOptions},
    faults::{tracepoint::from_io_page_fault, Fault, KmsgFollower, Source},
};

pub struct Session {
    pub tracer: Tracer,
    pub agg: Aggregator,
    pub started: Instant,
    pub stream: bool,
    /// Decoded faults (kernel log + iommu:io_page_fault), newest last.
    pub faults: VecDeque<Fault>,
    /// All faults seen, by (device, source, reason).
    pub fault_counts: BTreeMap<(String, &'static str, String), u64>,
    kmsg: Option<KmsgFollower>,
    /// nvidia:nvidia_dev_xid is attached: Xids arrive from the tracepoint,
    /// so their kernel log lines are duplicates (fixed once probes attach).
    xid_traced: bool,
    /// Why the kernel log is not followed, if it is not.
    pub kmsg_error: Option<String>,
}

/// Decoded faults kept for display.
pub const FAULTS_KEPT: usize = 256;

impl Session {
    pub fn start(args: &TraceArgs) -> anyhow::Result<Self> {
        let tracer = Tracer::load(&TracerOptions {
            stream: !args.aggregate_only,
            lifetimes: !args.no_lifetimes,
            ring_bytes: args.ring_size,
            dma_source: args.dma_source,
            sg_walk_max: args.sg_walk_max,
            ..Default::default()
        })?;
        let failed: Vec<_> = tracer
            .probes
            .iter()
            .filter(|p| p.status == Status::Failed)
            .map(|p| format!("{}: {}", p.name, p.reason))
            .collect();
        if args.strict && !failed.is_empty() {
            bail!(
                "--strict: {} probe(s) failed:\n  {}",
                failed.len(),
                failed.join("\n  ")
            );
        }
        if tracer.attached() == 0 {
            bail!(
                "no probe could be attached on kernel {}; run `gpudirect-trace probes` for the reasons",
                tracer.kernel.release
            );
        }
        let unavailable = tracer
            .probes
            .iter()
            .filter(|p| p.status == Status::Unavailable)
            .count();
        eprintln!(
            "gpudirect-trace: kernel {}: {} probes attached, {} unavailable on this kernel, {} failed \
             (details: gpudirect-trace probes)",
            tracer.kernel.release,
            tracer.attached(),
            unavailable,
            failed.len()
        );
        for f in &failed {
            eprintln!("gpudirect-trace: warning: {f}");
        }
        // VT-d faults, Xid lines and AER errors reach us only through the
        // kernel log: follow it from now on.
        let mut session = Self::from_tracer(tracer, !args.aggregate_only);
        match KmsgFollower::open() {
            Ok(k) => session.kmsg = Some(k),
            Err(e) => {
                let msg = format!(
                    "not following /dev/kmsg ({e}): VT-d faults, Xid and AER lines will be missed"
                );
                eprintln!("gpudirect-trace: warning: {msg}");
                session.kmsg_error = Some(msg);
            }
        }
        Ok(session)
    }

    /// A session around an already loaded tracer (`stream` as it was loaded
    /// with), not following the kernel log; the host tests use it to serve
    /// programs they drive themselves.
    pub fn from_tracer(tracer: Tracer, stream: bool) -> Self {
        let xid_traced = tracer
            .probes
            .iter()
            .any(|p| p.name == "nvidia:nvidia_dev_xid" && p.status == Status::Attached);
        Self {
            xid_traced,
            tracer,
            agg: Aggregator::new(),
            started: Instant::now(),
            stream,
            faults: VecDeque::new(),
            fault_counts: BTreeMap::new(),
            kmsg: None,
            kmsg_error: None,
        }
    }

    /// Drains the ring buffer into the aggregator, handing each decoded
    /// record to `also` (e.g. the recorder) too. Returns records drained.
    pub fn pump(&mut self, mut also: impl FnMut(&Record, &str)) -> usize {
        let Self { tracer, agg, .. } = self;
        let mut records = Vec::new();
        let mut bad = 0u64;
        tracer.drain(|bytes| match decode(bytes) {
            Ok(r) => records.push(r),
            Err(e) => {
                bad += 1;
                log::debug!("undecodable record: {e}");
            }
        });
        agg.decode_errors += bad;
        let n = records.len();
        let mut faults = Vec::new();
        for r in &records {
            let ev = r.event();
            let name = tracer.device_name(ev.dev);
            agg.ingest(r, &name);
            also(r, &name);
            let fault = match r {
                Record::Xid(x) => Some(xid_fault(&name, x.xid, &c_string(&x.msg))),
                _ if ev.kind == kind::IO_PAGE_FAULT => Some(from_io_page_fault(
                    "",
                    &name,
                    ev.addr,
                    ev.aux as u32,
                    "iommu:io_page_fault",
                )),
                _ if ev.kind == kind::AER => Some(aer_fault(&name, ev.addr as u32, ev.aux)),
                _ => None,
            };
            if let Some(mut f) = fault {
                f.timestamp_ns = Some(ev.ts_ns);
                faults.push(f);
            }
        }
        for f in faults {
            self.add_fault(f, false);
        }
        n
    }

    /// Reads new kernel log records and adds the faults they report.
    pub fn poll_kmsg(&mut self) {
        let Some(k) = self.kmsg.as_mut() else { return };
        match k.poll() {
            Ok(faults) => {
                for f in faults {
                    self.add_fault(f, true);
                }
            }
            Err(e) => {
                self.kmsg_error = Some(format!("reading /dev/kmsg failed: {e}"));
                self.kmsg = None;
            }
        }
    }

    /// Records lost from /dev/kmsg before we read them.
    pub fn kmsg_lost(&self) -> u64 {
        self.kmsg.as_ref().map_or(0, |k| k.lost_records)
    }

    /// Correlates a fault with the mapping history and keeps it. Faults from
    /// the log are also counted on their device (tracepoint faults already
    /// are, by the aggregator).
    fn add_fault(&mut self, mut f: Fault, from_log: bool) {
        if let (Some(dev), Some(addr)) = (f.device.as_deref(), f.address) {
            f.mapping_state = Some(self.agg.mapping_state(dev, addr, f.timestamp_ns));
        }
        let dev = f.device.clone().unwrap_or_else(|| "-".into());
        // With nvidia:nvidia_dev_xid attached the tracepoint already reported
        // this Xid; its log line must not count or list it twice.
        if from_log && f.xid.is_some() && self.xid_traced {
            return;
        }
        if from_log {
            let name: Arc<str> = Arc::from(dev.as_str());
            self.agg.count_fault(&name, f.xid, f.count.max(1));
        }
        *self
            .fault_counts
            .entry((dev, f.source.as_str(), f.reason.clone()))
            .or_default() += f.count.max(1);
        if self.faults.len() == FAULTS_KEPT {
            self.faults.pop_front();
        }
        self.faults.push_back(f);
    }

    /// Takes the kernel's loss-free counters into the aggregate.
    pub fn refresh_counters(&mut self) -> SelfStats {
        let counters = self.tracer.kernel_counters();
        self.agg.apply_kernel_counters(&counters);
        let latency = self.tracer.kernel_latency();
        self.agg.apply_kernel_latency(&latency);
        if !self.stream {
            let mappings = self.tracer.kernel_mappings();
            self.agg.apply_kernel_mappings(&mappings);
        }
        self.tracer
            .self_stats_with(counters.iter().map(|(_, k, c)| (k, c)))
    }

    /// Readiness of the ring buffer, for the async loops. The returned
    /// handle must not outlive the session (it borrows the tracer's fd).
    pub fn ring_ready(&self) -> std::io::Result<AsyncFd<RingFd>> {
        // SAFETY: the fd belongs to `self.tracer`, which every caller keeps
        // alive for as long as it uses the handle (both live in one scope).
        unsafe { AsyncFd::register(RingFd(self.tracer.ring_fd())) }.map_err(|e| e.into_parts().1)
    }
}

/// A Fault from ras:aer_event, decoded with the kernel's AER bit names.
fn aer_fault(device: &str, status: u32, severity: u64) -> Fault {
    let correctable = severity == 2;
    let bits = crate::faults::aer::decode_status(status, correctable);
    let reason = if bits.is_empty() {
        format!("PCIe AER {} error", aggregate::aer_severity(severity))
    } else {
        format!(
            "PCIe AER {}: {}",
            aggregate::aer_severity(severity),
            bits.join(", ")
        )
    };
    let mut f = Fault::new(Source::Aer, reason, "ras:aer_event");
    f.set_device(device);
    f.reason_code = Some(status);
    f.explanation = "A PCIe link/transaction error reported by AER on this device. Corrected \
        errors (receiver errors, bad TLPs) at a steady rate point at signal integrity (riser, \
        cable, slot, retimer); uncorrected ones at the device or its link; check the link speed \
        and width (gpudirect-trace doctor) and the device's recent DMA activity here."
        .to_owned();
    f
}

/// A Fault from nvidia:nvidia_dev_xid, with the Xid catalog's meaning.
fn xid_fault(device: &str, xid: u32, msg: &str) -> Fault {
    let (meaning, checks) = crate::faults::xid::lookup(xid).unwrap_or(("unknown Xid", ""));
    let mut f = Fault::new(Source::NvidiaXid, format!("Xid {xid}: {meaning}"), msg);
    f.set_device(device);
    f.xid = Some(xid);
    f.reason_code = Some(xid);
    f.explanation = checks.to_owned();
    f
}

/// The ring buffer's fd, borrowed for readiness notifications only.
pub struct RingFd(RawFd);

impl AsRawFd for RingFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}
