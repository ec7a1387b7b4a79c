//! The kernel's jiffies as CLOCK_MONOTONIC time: how sampled lifetimes
//! date the mappings they do not time.
//!
//! A tracing program's cheap clock is `bpf_jiffies64()` (5.5+), a load of
//! the tick counter; `bpf_ktime_get_coarse_ns()` would be the natural one,
//! but the kernel refuses it to kprobe, fentry and tracepoint programs
//! ("program of this type cannot use helper", measured on 6.18: its
//! seqlock could deadlock under a program running in the timekeeping
//! update). So the programs store jiffies, and userspace turns them into
//! nanoseconds: the tick's length is CLOCK_MONOTONIC_COARSE's resolution
//! (TICK_NSEC), and one (jiffies, time) pair, read by a three-instruction
//! program between two clock reads, anchors the count. The kernel advances
//! jiffies from the same clock in whole ticks (tick_do_update_jiffies64),
//! so the two do not drift apart; a date is good to a tick or two.

use std::os::fd::{AsFd as _, OwnedFd};

use super::{
    sys::{self, insn},
    testrun::run_raw_tracepoint,
};

/// `BPF_FUNC_jiffies64`.
const JIFFIES64: i32 = 118;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JiffyClock {
    /// Nanoseconds per jiffy (TICK_NSEC: 1 ms at HZ=1000, 4 ms at 250).
    pub tick_ns: u64,
    /// A jiffies count and the CLOCK_MONOTONIC time it was read at.
    at_jiffies: u64,
    at_ns: u64,
}

impl JiffyClock {
    /// Reads the anchor; None where programs cannot read jiffies or the
    /// coarse clock's resolution is unknown (then every mapping is timed).
    pub fn calibrate() -> Option<Self> {
        let low = jiffies_program(0)?;
        let high = jiffies_program(32)?;
        let tick_ns = coarse_resolution_ns()?;
        // The high half read on both sides of the low one: equal unless
        // the low half wrapped in between (every 49 days at HZ=1000).
        for _ in 0..4 {
            let h1 = run(&high)?;
            let t0 = crate::kernel::monotonic_ns();
            let l = run(&low)?;
            let t1 = crate::kernel::monotonic_ns();
            if run(&high)? == h1 {
                return Some(Self {
                    tick_ns,
                    at_jiffies: (u64::from(h1) << 32) | u64::from(l),
                    at_ns: t0 + (t1 - t0) / 2,
                });
            }
        }
        None
    }

    /// The CLOCK_MONOTONIC time of a jiffies count, to a tick or so.
    pub fn ns(&self, jiffies: u64) -> u64 {
        let ticks = i128::from(jiffies.wrapping_sub(self.at_jiffies) as i64);
        let ns = i128::from(self.at_ns) + ticks * i128::from(self.tick_ns);
        ns.clamp(0, i128::from(u64::MAX)) as u64
    }

    #[cfg(test)]
    fn new(tick_ns: u64, at_jiffies: u64, at_ns: u64) -> Self {
        Self {
            tick_ns,
            at_jiffies,
            at_ns,
        }
    }
}

/// A raw tracepoint program that returns jiffies >> `shift` (the test run
/// returns 32 bits).
fn jiffies_program(shift: i32) -> Option<OwnedFd> {
    #[rustfmt::skip]
    let insns: [u64; 3] = [
        insn(0x85, 0, 0, 0, JIFFIES64), // call bpf_jiffies64
        insn(0x77, 0, 0, 0, shift),     // r0 >>= shift
        insn(0x95, 0, 0, 0, 0),         // exit
    ];
    // BPF_PROG_TYPE_RAW_TRACEPOINT
    sys::prog_load_insns(17, &insns).ok()
}

/// One test run of `prog`, which takes no arguments: its return value.
fn run(prog: &OwnedFd) -> Option<u32> {
    run_raw_tracepoint(prog.as_fd(), &[0], None).ok()
}

/// CLOCK_MONOTONIC_COARSE's resolution: the kernel's tick (TICK_NSEC).
fn coarse_resolution_ns() -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec for the kernel to fill.
    let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    let ns = u64::try_from(ts.tv_sec).ok()? * 1_000_000_000 + u64::try_from(ts.tv_nsec).ok()?;
    (rc == 0 && ns > 0).then_some(ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jiffies_become_nanoseconds_either_side_of_the_anchor() {
        let c = JiffyClock::new(4_000_000, 4_295_000_000, 10_000_000_000);
        assert_eq!(c.ns(4_295_000_000), 10_000_000_000);
        assert_eq!(c.ns(4_295_000_250), 11_000_000_000);
        assert_eq!(c.ns(4_294_999_750), 9_000_000_000);
        // Before boot, or garbage: clamped, never wrapped.
        assert_eq!(c.ns(0), 0);
    }

    #[test]
    fn the_coarse_clock_has_a_tick() {
        let ns = coarse_resolution_ns().expect("CLOCK_MONOTONIC_COARSE");
        assert!((100_000..=100_000_000).contains(&ns), "tick of {ns} ns");
    }
}
