//! `cargo xtask bench`'s flight-recorder numbers (ignored tests, run in
//! release mode): the CPU an event costs in the ring against a file, the
//! memory of a ring held at 1 M events/s for 5 minutes of (synthetic) time,
//! and the time to write a full 60 s ring as a snapshot.

use std::{
    io::BufWriter,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use gpudirect_trace_common::{kind, Event};

use super::{FlightOptions, Recorder, Trigger};
use crate::{
    decode::Record,
    kernel::thread_cpu_ns,
    session::Observed,
    tracefile::{tests::Rng, Header, TraceWriter},
};

/// Synthetic time: 1 µs per event, so 1 M events are one second.
static NOW: AtomicU64 = AtomicU64::new(0);
fn now() -> u64 {
    NOW.load(Ordering::Relaxed)
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// A map/unmap stream shaped like an NVMe driver's (as the trace-file
/// benchmark's): IOVAs from a recycled pool, scattered physical pages.
struct Stream {
    rng: Rng,
    i: u64,
    live: Vec<u64>,
}

impl Stream {
    fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed),
            i: 0,
            live: Vec::new(),
        }
    }

    /// A map of a new address or an unmap of a live one, from one of 8
    /// pids.
    fn next(&mut self) -> Record {
        self.i += 1;
        let (kind, addr, phys) =
            if self.live.len() > 64 || (!self.live.is_empty() && self.rng.below(2) == 0) {
                let k = self.rng.below(self.live.len() as u64) as usize;
                (kind::DMA_UNMAP, self.live.swap_remove(k), 0)
            } else {
                let addr = 0xffff_0000 - (self.rng.below(256) << 17);
                self.live.push(addr);
                (kind::DMA_MAP, addr, self.rng.below(64 << 18) << 12)
            };
        let pid = 1000 + (self.i % 8) as u32;
        Record::Event(Event {
            kind,
            dir: 2,
            ts_ns: self.i * 1000,
            pid,
            tid: pid,
            addr,
            phys,
            size: 4096,
            ..Default::default()
        })
    }
}

fn opts(dir: &std::path::Path) -> FlightOptions {
    FlightOptions {
        dir: dir.to_owned(),
        max_age: Some(Duration::from_secs(60)),
        max_bytes: None,
        triggers: vec![Trigger::Signal],
        after: Duration::ZERO,
        max_snapshots: None,
        min_spacing: Duration::ZERO,
        retention: Default::default(),
    }
}

/// The recorder sees the stream's next record as event `i`, at its
/// synthetic time (1 µs per event).
fn observe_next(r: &mut Recorder, s: &mut Stream, i: u64, device: &Arc<str>) {
    NOW.store(i * 1000, Ordering::Relaxed);
    let rec = s.next();
    r.observe(&Observed::Record {
        record: &rec,
        device,
    })
    .expect("observe");
}

#[test]
#[ignore = "benchmark: cargo xtask bench"]
fn bench_flight_recorder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let device: Arc<str> = Arc::from("0000:00:04.0");
    let header = Header {
        hostname: "bench".into(),
        clock: "CLOCK_MONOTONIC".into(),
        ..Default::default()
    };
    // CPU per event: the same stream into a file and into the ring.
    let n = 4_000_000u64;
    let mut s = Stream::new(7);
    let file = std::fs::File::create(dir.path().join("f.gdt")).expect("file");
    let mut w = TraceWriter::new(BufWriter::with_capacity(1 << 20, file), &header).expect("w");
    let t0 = thread_cpu_ns();
    for i in 0..n {
        w.push(&s.next(), &device).expect("push");
        if i % 1_000_000 == 999_999 {
            w.flush().expect("flush");
        }
    }
    w.flush().expect("flush");
    let file_ns = (thread_cpu_ns() - t0) as f64 / n as f64;

    NOW.store(0, Ordering::Relaxed);
    let mut r = Recorder::with_clock(header.clone(), opts(dir.path()), now).expect("recorder");
    let mut s = Stream::new(7);
    let t0 = thread_cpu_ns();
    for i in 0..n {
        observe_next(&mut r, &mut s, i, &device);
        if i % 1_000_000 == 999_999 {
            r.writer.flush().expect("flush");
        }
    }
    let ring_ns = (thread_cpu_ns() - t0) as f64 / n as f64;
    println!(
        "BENCH flight_cpu events={n} file_ns_per_event={file_ns:.1} ring_ns_per_event={ring_ns:.1}"
    );

    // Memory: 5 minutes at 1 M events/s (300 M events) into a 60 s ring;
    // blocks flushed every synthetic second, as the recorder does.
    drop(r);
    let base = rss_bytes();
    let mut r = Recorder::with_clock(header, opts(dir.path()), now).expect("recorder");
    let mut s = Stream::new(11);
    let total = 300_000_000u64;
    let mut max_rss = 0u64;
    let mut max_ring = 0u64;
    let started = Instant::now();
    for i in 0..total {
        observe_next(&mut r, &mut s, i, &device);
        if i % 1_000_000 == 999_999 {
            r.writer.flush().expect("flush");
            if i % 10_000_000 == 9_999_999 {
                max_rss = max_rss.max(rss_bytes().saturating_sub(base));
                max_ring = max_ring.max(r.stats().ring_bytes);
            }
        }
    }
    let st = r.stats();
    println!(
        "BENCH flight_memory events={total} synthetic_s=300 ring_max_s=60 ring_bytes={} \
         ring_held_s={:.1} ring_dropped_events={} max_rss_over_start={max_rss} \
         rss_minus_ring={} wall_s={:.1}",
        st.ring_bytes,
        st.ring_seconds,
        st.ring_dropped_events,
        max_rss as i64 - max_ring as i64,
        started.elapsed().as_secs_f64()
    );

    // A full 60 s ring written as a snapshot.
    let t = Instant::now();
    r.user_signal();
    r.close_now().expect("close");
    let took = t.elapsed().as_secs_f64();
    let st = r.stats();
    let size = st
        .last_path
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.len());
    println!(
        "BENCH flight_snapshot bytes={size} seconds={took:.3} of_which_fdatasync={:.3}",
        st.last_sync_seconds
    );
    assert_eq!(st.failures, 0);
}
