//! Forced wake-ups of the reader by rare events (faults, map failures,
//! group changes, Xids): the first of a burst wakes the reader at once, the
//! rest of the burst waits for its next drain: at most one forced wake-up a
//! CPU per `RARE_WAKE_GAP_NS`. Before that limit every rare record forced
//! one (an irq_work on the traced CPU and a reader wake-up each): a storm
//! of map failures, as when swiotlb runs out at line rate, would have cost
//! more than the DMA it reports.
//!
//! The wake-ups are counted as edges of an edge-triggered epoll on the
//! ring's fd, looked at after every injected fault: the ring's wait queue
//! is woken only by a wake-up the programs ask for (the record's arrival
//! alone signals nothing), so each edge is one wake-up.

use std::{
    os::fd::{AsRawFd as _, RawFd},
    time::{Duration, Instant},
};

use gpudirect_trace::ebpf::drain_ring;
use gpudirect_trace_common::RARE_WAKE_GAP_NS;

use crate::{
    bench_ring::{pin_to, unpin},
    inject::Injector,
};

/// An edge-triggered epoll on `fd`.
struct Edges(RawFd);

impl Edges {
    fn on(fd: RawFd) -> Self {
        // SAFETY: plain syscalls on fds this test owns; the event struct
        // lives through the call.
        unsafe {
            let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
            assert!(
                ep >= 0,
                "epoll_create1: {}",
                std::io::Error::last_os_error()
            );
            let mut ev = libc::epoll_event {
                events: (libc::EPOLLIN | libc::EPOLLET) as u32,
                u64: 0,
            };
            let rc = libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev);
            assert_eq!(rc, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
            Self(ep)
        }
    }

    /// 1 if the ring was woken since the last look, else 0 (waits up to
    /// `timeout_ms` for it).
    fn take(&self, timeout_ms: i32) -> u64 {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: one event's room, owned by this frame.
        let n = unsafe { libc::epoll_wait(self.0, &mut ev, 1, timeout_ms) };
        u64::from(n > 0)
    }
}

impl Drop for Edges {
    fn drop(&mut self) {
        // SAFETY: the epoll fd this struct created.
        unsafe { libc::close(self.0) };
    }
}

#[test]
fn a_fault_storm_wakes_the_reader_once_a_millisecond_not_per_fault() {
    const STORM: u64 = 2000;
    let mut inj = Injector::as_root();
    let mut ring = inj.tracer.take_ring().expect("the ring");
    let edges = Edges::on(ring.as_raw_fd());
    let dev = inj.device.addr;
    // One CPU: the limit is per CPU.
    pin_to(0);
    let fault = |inj: &Injector| inj.run("iommu_io_page_fault", &[dev, 0x123000, 1]);

    // A lone fault after a quiet spell wakes the reader at once.
    std::thread::sleep(Duration::from_nanos(2 * RARE_WAKE_GAP_NS));
    fault(&inj);
    assert_eq!(edges.take(1000), 1, "a lone fault must wake the reader");

    // A storm: the first fault wakes it (the lone one was over a gap ago),
    // the rest at most once per gap.
    std::thread::sleep(Duration::from_nanos(2 * RARE_WAKE_GAP_NS));
    let t0 = Instant::now();
    let mut woken = 0;
    for _ in 0..STORM {
        fault(&inj);
        woken += edges.take(0);
    }
    let elapsed_ns = t0.elapsed().as_nanos() as u64;
    woken += edges.take(10);
    unpin();
    let gaps = elapsed_ns / RARE_WAKE_GAP_NS + 1;
    println!("storm: {STORM} faults in {elapsed_ns} ns, {woken} wake-ups (limit {gaps})");
    assert!(woken >= 1, "the storm's first fault must wake the reader");
    assert!(
        woken <= gaps + 1,
        "{woken} wake-ups for {STORM} faults in {elapsed_ns} ns: more than one per \
         {RARE_WAKE_GAP_NS} ns"
    );
    // Nothing waits forever or is lost: every record is in the ring.
    let received = drain_ring(&mut ring, |_| ()) as u64;
    assert_eq!(received, STORM + 1);
    assert_eq!(inj.tracer.self_stats().lost_events, 0);
}
