//! A tracing session: the loaded tracer feeding the aggregator. Shared by
//! every sink (live view, recorder, metrics server) so they all see the same
//! events, counts and losses.

use std::{
    os::fd::{AsRawFd, RawFd},
    time::Instant,
};

use anyhow::bail;
use tokio::io::unix::AsyncFd;

use crate::{
    aggregate::Aggregator,
    cli::TraceArgs,
    decode::{decode, Record},
    ebpf::{SelfStats, Status, Tracer, TracerOptions},
};

pub struct Session {
    pub tracer: Tracer,
    pub agg: Aggregator,
    pub started: Instant,
    pub stream: bool,
}

impl Session {
    pub fn start(args: &TraceArgs) -> anyhow::Result<Self> {
        let tracer = Tracer::load(&TracerOptions {
            stream: !args.aggregate_only,
            ring_bytes: args.ring_size,
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
        Ok(Self {
            tracer,
            agg: Aggregator::new(),
            started: Instant::now(),
            stream: !args.aggregate_only,
        })
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
        for r in &records {
            let name = tracer.device_name(r.event().dev);
            agg.ingest(r, &name);
            also(r, &name);
        }
        n
    }

    /// Takes the kernel's loss-free counters into the aggregate.
    pub fn refresh_counters(&mut self) -> SelfStats {
        let counters = self.tracer.kernel_counters();
        self.agg.apply_kernel_counters(&counters);
        let latency = self.tracer.kernel_latency();
        self.agg.apply_kernel_latency(&latency);
        self.tracer.self_stats()
    }

    /// Readiness of the ring buffer, for the async loops. The returned
    /// handle must not outlive the session (it borrows the tracer's fd).
    pub fn ring_ready(&self) -> std::io::Result<AsyncFd<RingFd>> {
        // SAFETY: the fd belongs to `self.tracer`, which every caller keeps
        // alive for as long as it uses the handle (both live in one scope).
        unsafe { AsyncFd::register(RingFd(self.tracer.ring_fd())) }.map_err(|e| e.into_parts().1)
    }
}

/// The ring buffer's fd, borrowed for readiness notifications only.
pub struct RingFd(RawFd);

impl AsRawFd for RingFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}
