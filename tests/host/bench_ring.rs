//! Ring sizing (issue 17, item 4): the default ring and wake-up policy under
//! offered loads, with the REAL session driver as the reader (its epoll
//! wake-ups, its drain timer, the analysis of the live path).
//!
//! What is measured per offered load, the reader pinned to one CPU and the
//! injector (BPF_PROG_TEST_RUN of the real dma_map program, paced) to the
//! other, so the reader has a core of its own apart from other users' work:
//! - events injected, received and lost (the identity must hold);
//! - the reader thread's wake-ups (voluntary context switches: each one is
//!   a sleep in epoll ended by a ring wake-up or the drain timer) and its
//!   CPU time (CLOCK_THREAD_CPUTIME_ID), per second and per event;
//! - how long records waited in the ring (now - the record's own timestamp,
//!   sampled every 64th record): the backlog the reader actually carried.
//!
//! The ring's capacity in records is measured by filling it with no reader
//! until the kernel counts the first loss; capacity / rate is how long the
//! ring covers a reader that does not run at all. A reader stall is also
//! staged: a job that sleeps inside the driver, once shorter and once
//! longer than that cover.

use std::{
    os::fd::{AsRawFd as _, BorrowedFd},
    process::ExitCode,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use gpudirect_trace::{
    ebpf::{testrun::run_raw_tracepoint, Tracer, TracerOptions},
    kernel::monotonic_ns,
    session::{driver::RunOptions, Ending, Job, Observed, Session, Sink},
};
use tokio::sync::{mpsc, watch};

use crate::{bench_reader::thread_cpu_ns, inject::known_kernel_object};

/// The reader's CPU, the injector's CPU (the machine has 2).
pub(crate) const READER_CPU: usize = 0;
const INJECT_CPU: usize = 1;

pub(crate) fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET and
    // sched_setaffinity(0) act on this thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
    }
}

pub(crate) fn unpin() {
    // SAFETY: as in `pin_to`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
    }
}

/// This thread's voluntary context switches (sleeps it woke from).
fn voluntary_switches() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Clone, Default, Debug)]
struct ReaderStats {
    records: u64,
    cpu_ns: u64,
    wakeups: u64,
    wall_s: f64,
    /// How long records waited in the ring, in microseconds (sampled).
    waits_us: Option<hdrhistogram::Histogram<u64>>,
    lost: u64,
}

impl ReaderStats {
    fn wait_ms(&self, q: f64) -> f64 {
        self.waits_us
            .as_ref()
            .filter(|h| !h.is_empty())
            .map_or(0.0, |h| h.value_at_quantile(q) as f64 / 1e3)
    }
}

/// The live path's reader (the analysis runs in the session's pump) with a
/// sink that only counts, reading the reader thread's clocks at its start
/// and end.
struct CountingSink {
    out: Arc<Mutex<ReaderStats>>,
    st: ReaderStats,
    cpu0: u64,
    csw0: u64,
    t0: Option<Instant>,
}

impl Sink for CountingSink {
    fn start(
        &mut self,
        _s: &mut Session,
        _jobs: &mpsc::UnboundedSender<Job<Self>>,
    ) -> anyhow::Result<()> {
        self.cpu0 = thread_cpu_ns();
        self.csw0 = voluntary_switches();
        self.t0 = Some(Instant::now());
        Ok(())
    }

    fn observe(&mut self, o: Observed<'_>) -> anyhow::Result<()> {
        if let Observed::Record { record, .. } = o {
            self.st.records += 1;
            if self.st.records % 64 == 0 {
                let wait_us = monotonic_ns().saturating_sub(record.event().ts_ns) / 1000;
                let h = self.st.waits_us.get_or_insert_with(|| {
                    hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 3).expect("bounds")
                });
                h.saturating_record(wait_us.max(1));
            }
        }
        Ok(())
    }

    fn finish(mut self, s: &mut Session, _end: &Ending) -> anyhow::Result<ExitCode> {
        self.st.lost = s.tracer.self_stats().lost_events;
        self.st.cpu_ns = thread_cpu_ns() - self.cpu0;
        self.st.wakeups = voluntary_switches() - self.csw0;
        self.st.wall_s = self.t0.map_or(0.0, |t| t.elapsed().as_secs_f64());
        *self.out.lock().expect("stats lock") = self.st.clone();
        Ok(ExitCode::SUCCESS)
    }
}

pub(crate) fn dma_map_args(dev: u64, i: u64) -> [u64; 6] {
    let iova = 0x1000_0000 + (i % 65_536) * 4096;
    [dev, iova, iova, 4096, 1, 0]
}

/// Records the default ring holds: filled with no reader until the kernel
/// counts the first loss.
fn ring_capacity(opts: &TracerOptions, dev: u64) -> u64 {
    let tracer = Tracer::load(opts).expect("load");
    let fd = tracer.program_fd("dma_map").expect("dma_map");
    let mut n = 0u64;
    loop {
        run_raw_tracepoint(fd, &dma_map_args(dev, n), None).expect("test run");
        n += 1;
        if n % 1024 == 0 && tracer.self_stats().lost_events > 0 {
            return n - tracer.self_stats().lost_events;
        }
    }
}

struct Run {
    injected: u64,
    /// Events per second the injector achieved while it ran.
    rate: f64,
    lost: u64,
    reader: ReaderStats,
}

/// One run: `rate` events/s (u64::MAX: as fast as one injector can) for
/// `secs`; `stall` makes the reader sleep that long once, mid-run.
fn run_at(opts: &TracerOptions, dev: u64, rate: u64, secs: f64, stall: Option<Duration>) -> Run {
    let tracer = Tracer::load(opts).expect("load");
    let fd = tracer.program_fd("dma_map").expect("dma_map").as_raw_fd();
    let session = Session::from_tracer(tracer, true);
    let out = Arc::new(Mutex::new(ReaderStats::default()));
    let sink = CountingSink {
        out: out.clone(),
        st: ReaderStats::default(),
        cpu0: 0,
        csw0: 0,
        t0: None,
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let (jobs_tx, jobs_rx) = mpsc::unbounded_channel::<Job<CountingSink>>();
    let stall_tx = jobs_tx.clone();
    let injector = std::thread::spawn(move || {
        pin_to(INJECT_CPU);
        // Let the driver reach its loop before the clock starts.
        std::thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        let mut n = 0u64;
        let mut stalled = stall.is_none();
        loop {
            let t = start.elapsed().as_secs_f64();
            if t >= secs {
                break;
            }
            if !stalled && t >= secs / 2.0 {
                let d = stall.expect("stall given");
                let _ = stall_tx.send(Box::new(move |_, _| std::thread::sleep(d)));
                stalled = true;
            }
            if rate != u64::MAX && n >= (t * rate as f64) as u64 {
                std::hint::spin_loop();
                continue;
            }
            // SAFETY: the session owning the fd outlives this thread (it is
            // joined before the session's run returns its tracer).
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            run_raw_tracepoint(fd, &dma_map_args(dev, n), None).expect("test run");
            n += 1;
        }
        let elapsed = start.elapsed().as_secs_f64();
        // At once: the reader drains once more when it stops, so the last
        // records wait no longer than they would for the next wake-up.
        let _ = stop_tx.send(true);
        (n, elapsed)
    });
    pin_to(READER_CPU);
    session
        .run_with_jobs(
            sink,
            RunOptions {
                stop: Some(stop_rx),
                ..Default::default()
            },
            jobs_tx,
            jobs_rx,
        )
        .expect("session");
    unpin();
    let (injected, inject_s) = injector.join().expect("injector");
    let reader = out.lock().expect("lock").clone();
    Run {
        injected,
        rate: injected as f64 / inject_s,
        lost: reader.lost,
        reader,
    }
}

fn print_run(label: &str, r: &Run, capacity: u64) {
    let st = &r.reader;
    let rate = r.rate.max(1e-9);
    println!(
        "BENCH ring_load offered={label} achieved_per_s={rate:.0} injected={} received={} lost={} \
         wakeups_per_s={:.1} reader_cpu_pct={:.1} reader_ns_per_event={:.1} \
         wait_p50_ms={:.2} wait_p99_ms={:.2} wait_max_ms={:.2} ring_covers_ms={:.1}",
        r.injected,
        st.records,
        r.lost,
        st.wakeups as f64 / st.wall_s,
        100.0 * st.cpu_ns as f64 / 1e9 / st.wall_s,
        st.cpu_ns as f64 / st.records.max(1) as f64,
        st.wait_ms(0.5),
        st.wait_ms(0.99),
        st.wait_ms(1.0),
        if r.injected == 0 {
            f64::INFINITY
        } else {
            capacity as f64 / rate * 1e3
        },
    );
}

#[test]
#[ignore = "benchmark: cargo xtask bench"]
fn bench_ring_sizing() {
    let dev = known_kernel_object().addr;
    // The defaults a session uses: ring size and wake-up threshold.
    let opts = TracerOptions {
        attach: false,
        ..Default::default()
    };
    let capacity = ring_capacity(&opts, dev);
    let per_record = f64::from(opts.ring_bytes) / capacity as f64;
    println!(
        "BENCH ring_capacity ring_bytes={} records={capacity} bytes_per_record={per_record:.1} \
         wakeup_bytes={} drain_timer_ms={}",
        opts.ring_bytes,
        opts.wakeup_bytes,
        gpudirect_trace::session::driver::DRAIN_EVERY.as_millis()
    );
    let mut fastest = None;
    for (label, rate, secs) in [
        ("idle", 0, 2.0),
        ("10k", 10_000u64, 3.0),
        ("1M", 1_000_000, 2.0),
        ("max", u64::MAX, 2.0),
    ] {
        let r = run_at(&opts, dev, rate, secs, None);
        assert_eq!(
            r.reader.records + r.lost,
            r.injected,
            "loss accounting at {label}"
        );
        print_run(label, &r, capacity);
        if rate > 0 {
            fastest = Some(r);
        }
    }
    // 10 M events/s cannot be offered here (one BPF_PROG_TEST_RUN per event
    // is a syscall: one core offers ~1-2 M/s). What the ring and the reader
    // would do at that rate follows from what was measured: the capacity,
    // the wake-up threshold, and the reader's CPU per event at the highest
    // rate that was offered.
    let r = fastest.expect("ran");
    let ns = r.reader.cpu_ns as f64 / r.reader.records.max(1) as f64;
    let rate = 10e6;
    println!(
        "BENCH ring_load offered=10M derived=1 wakeups_per_s={:.0} reader_cpu_pct={:.0} \
         ring_covers_ms={:.1} fill_to_wakeup_ms={:.2}",
        rate * per_record / opts.wakeup_bytes as f64
            + 1e3 / gpudirect_trace::session::driver::DRAIN_EVERY.as_millis() as f64,
        rate * ns / 1e7,
        capacity as f64 / rate * 1e3,
        opts.wakeup_bytes as f64 / per_record / rate * 1e3,
    );
    // 8 M events/s, time-scaled: 1 M events/s into a ring and a wake-up
    // threshold 8x smaller give the same cover in milliseconds and the same
    // time to the wake-up threshold as 8 M events/s into the full sizes, so
    // the loss under this machine's real scheduling of the reader is what
    // 8 M events/s would see (the reader's CPU per event is not: its batches
    // are 8x smaller).
    for models_mib in [2u32, 4, 8, 32] {
        let scaled = TracerOptions {
            ring_bytes: (models_mib << 20) / 8,
            wakeup_bytes: opts.wakeup_bytes / 8,
            ..opts.clone()
        };
        let r = run_at(&scaled, dev, 1_000_000, 4.0, None);
        assert_eq!(r.reader.records + r.lost, r.injected, "loss accounting");
        let cap = capacity * u64::from(scaled.ring_bytes) / u64::from(opts.ring_bytes);
        println!(
            "BENCH ring_scaled models_ring_mib={models_mib} models_rate_per_s=8000000 \
             ring_bytes={} wakeup_bytes={} rate_per_s={:.0} ring_covers_ms={:.1} injected={} \
             lost={} wait_p99_ms={:.2}",
            scaled.ring_bytes,
            scaled.wakeup_bytes,
            r.rate,
            cap as f64 / r.rate * 1e3,
            r.injected,
            r.lost,
            r.reader.wait_ms(0.99),
        );
    }
    // A ring smaller than the wake-up threshold's 4x (`--ring-size 256K`):
    // the loader lowers the threshold to a quarter of the ring, or the
    // reader would wake only on its 100 ms timer, long after such a ring
    // filled.
    let small = TracerOptions {
        ring_bytes: 256 << 10,
        ..opts.clone()
    };
    let r = run_at(&small, dev, 100_000, 2.0, None);
    assert_eq!(r.reader.records + r.lost, r.injected, "loss accounting");
    println!(
        "BENCH ring_small ring_bytes={} rate_per_s={:.0} ring_covers_ms={:.1} injected={} lost={} \
         wakeups_per_s={:.1}",
        small.ring_bytes,
        r.rate,
        (capacity / 32) as f64 / r.rate * 1e3,
        r.injected,
        r.lost,
        r.reader.wakeups as f64 / r.reader.wall_s,
    );
    // A reader that stops: shorter, then longer than the ring's cover at
    // 1 M events/s. The first must lose nothing, the second about
    // (stall - cover) x rate.
    let cover = Duration::from_secs_f64(capacity as f64 / 1e6);
    for stall in [cover / 2, cover * 2] {
        let r = run_at(&opts, dev, 1_000_000, 2.0, Some(stall));
        assert_eq!(r.reader.records + r.lost, r.injected, "loss accounting");
        let rate = r.rate;
        println!(
            "BENCH ring_stall rate_per_s={rate:.0} stall_ms={:.0} ring_covers_ms={:.1} lost={} \
             expected_lost={:.0}",
            stall.as_secs_f64() * 1e3,
            capacity as f64 / rate * 1e3,
            r.lost,
            (stall.as_secs_f64() - capacity as f64 / rate).max(0.0) * rate
        );
    }
}
