//! The event stream's own reader (`ebpf::ring::EventRing`) against the
//! kernel's ring buffer: every record in order across many wrap-arounds of
//! a small ring, the space given back to the producers (a reader that kept
//! it would make the next fill lose records), and nothing left to report
//! once it has caught up (a poll that stayed readable would spin the
//! session driver).

use std::os::fd::AsRawFd as _;

use gpudirect_trace::{decode::decode, ebpf::drain_ring};

use crate::inject::{load_unattached, Injector};

/// 16 KiB: 227 records of 72 bytes; each round below fills two thirds.
const RING_BYTES: u32 = 16 << 10;
const PER_ROUND: u64 = 150;
const ROUNDS: u64 = 40;

/// Whether `fd` polls readable right now.
fn readable(fd: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd owned by this frame.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & libc::POLLIN != 0
}

#[test]
fn the_reader_reads_every_record_in_order_across_wraps_and_gives_the_space_back() {
    crate::require_root();
    let mut inj = Injector::new(load_unattached(RING_BYTES));
    let mut ring = inj.tracer.take_ring().expect("the ring");
    let dev = inj.device.addr;
    let mut next = 0u64;
    for round in 0..ROUNDS {
        for i in 0..PER_ROUND {
            let iova = 0x1000_0000 + (round * PER_ROUND + i) * 4096;
            inj.run("dma_map", &[dev, 0x20_0000, iova, 4096, 1, 0]);
        }
        assert!(
            readable(ring.as_raw_fd()),
            "round {round}: records but not readable"
        );
        let mut addrs = Vec::new();
        let n = drain_ring(&mut ring, |b| {
            addrs.push(decode(b).expect("record").event().addr)
        });
        assert_eq!(n as u64, PER_ROUND, "round {round}: records drained");
        for a in addrs {
            assert_eq!(a, 0x1000_0000 + next * 4096, "record {next} out of order");
            next += 1;
        }
        assert!(
            !readable(ring.as_raw_fd()),
            "round {round}: the ring still polls readable after a full drain"
        );
    }
    // 40 rounds through a ring that holds 1.5 of them: had the reader kept
    // the space it read, the second round would have lost records.
    assert_eq!(next, ROUNDS * PER_ROUND);
    assert_eq!(inj.tracer.self_stats().lost_events, 0);
}
