//! Streaming's cost per hit while a reader drains the ring on another CPU
//! (issue 28): what a traced CPU pays in production, where the per-hit
//! bench (`bench_program_cost`) drains only between batches.
//!
//! The ring's consumer position shares a cache line that every reserve
//! reads; a reader that stores it after every record takes that line away
//! from the producers each time. The same programs are timed (the kernel's
//! accounting, net of an empty program run in lockstep with them) under
//! two readers, interleaved: aya 0.13's `RingBuf` (a sequentially
//! consistent store per record) and the tool's own (`ebpf::ring`, a
//! release store per 64 KiB read and when caught up). Each reader waits
//! for the programs' wake-ups (poll, as the session driver does) and
//! drains everything each time.

use std::{
    os::fd::{AsRawFd as _, BorrowedFd, RawFd},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread,
};

use aya::maps::{Map, MapData, RingBuf};
use gpudirect_trace::ebpf::{drain_ring, testrun::run_raw_tracepoint, EventRing, Tracer};

use crate::{
    bench::{map_args, set_bpf_stats, unmap_args, Floor},
    bench_ring::{pin_to, unpin},
    inject::{known_kernel_object, load_unattached},
};

/// Map/unmap pairs per round: 400 000 records, ~29 MB through the default
/// 8 MiB ring, so the reader must keep up (a loss is reported).
const PAIRS: u64 = 200_000;
const ROUNDS: usize = 3;

enum Reader {
    Aya(RingBuf<MapData>),
    Own(EventRing),
}

impl Reader {
    fn name(&self) -> &'static str {
        match self {
            Reader::Aya(_) => "aya",
            Reader::Own(_) => "own",
        }
    }

    fn fd(&self) -> RawFd {
        match self {
            Reader::Aya(r) => r.as_raw_fd(),
            Reader::Own(r) => r.as_raw_fd(),
        }
    }

    fn drain(&mut self) -> u64 {
        match self {
            Reader::Aya(r) => {
                let mut n = 0;
                while r.next().is_some() {
                    n += 1;
                }
                n
            }
            Reader::Own(r) => drain_ring(r, |_| ()) as u64,
        }
    }
}

/// Waits up to 10 ms for the ring to be readable.
fn wait_readable(fd: RawFd) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd owned by this frame.
    unsafe { libc::poll(&mut p, 1, 10) };
}

/// One round: the reader on the last CPU (on a host with SMT siblings
/// numbered apart, not CPU 0's sibling), map/unmap pairs (and the floor)
/// on CPU 0. Prints a BENCH line per program.
fn round(own: bool, floor: &Floor, dev: u64, reader_cpu: usize) {
    let mut tracer: Tracer = load_unattached(gpudirect_trace::ebpf::DEFAULT_RING_BYTES);
    let ring = tracer.take_ring().expect("the ring");
    let mut reader = if own {
        Reader::Own(ring)
    } else {
        Reader::Aya(RingBuf::try_from(Map::RingBuf(ring.into_map())).expect("aya's reader"))
    };
    let name = reader.name();
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = stop.clone();
    let drained = thread::spawn(move || {
        pin_to(reader_cpu);
        let mut n = 0;
        loop {
            let last = stopping.load(Ordering::Acquire);
            wait_readable(reader.fd());
            n += reader.drain();
            if last {
                return n;
            }
        }
    });
    let map = tracer.program_fd("dma_map").expect("dma_map").as_raw_fd();
    let unmap = tracer
        .program_fd("dma_unmap")
        .expect("dma_unmap")
        .as_raw_fd();
    pin_to(0);
    set_bpf_stats(true);
    for i in 0..PAIRS {
        // SAFETY: the tracer and the floor (owners of the fds) outlive the
        // loop.
        let (m, u, f) = unsafe {
            (
                BorrowedFd::borrow_raw(map),
                BorrowedFd::borrow_raw(unmap),
                BorrowedFd::borrow_raw(floor.fd()),
            )
        };
        run_raw_tracepoint(f, &[0], None).expect("floor");
        run_raw_tracepoint(m, &map_args(dev, i), None).expect("dma_map");
        run_raw_tracepoint(u, &unmap_args(dev, i), None).expect("dma_unmap");
    }
    set_bpf_stats(false);
    unpin();
    stop.store(true, Ordering::Release);
    let received = drained.join().expect("the reader");
    let lost = tracer.self_stats().lost_events;
    let floor_ns = floor.ns_per_run();
    for s in tracer
        .program_stats()
        .iter()
        .filter(|s| s.program == "dma_map" || s.program == "dma_unmap")
    {
        println!(
            "BENCH streaming_with_reader reader={name} program={} runs={} ns_per_hit={:.1} \
             net_of_floor={:.1} received={received} lost={lost}",
            s.program,
            s.run_count,
            s.ns_per_run,
            s.ns_per_run - floor_ns
        );
    }
}

#[test]
#[ignore = "benchmark: cargo xtask bench"]
fn bench_streaming_with_reader() {
    crate::require_root();
    let dev = known_kernel_object().addr;
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if cpus < 2 {
        println!("SKIPPED bench_streaming_with_reader: needs two CPUs");
        return;
    }
    let reader_cpu = cpus as usize - 1;
    for _ in 0..ROUNDS {
        for own in [false, true] {
            // A fresh floor each round: its average is this round's.
            let floor = Floor::load();
            round(own, &floor, dev, reader_cpu);
        }
    }
}
