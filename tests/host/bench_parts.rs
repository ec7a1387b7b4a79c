//! Where a hot hit's time goes (issue 17, item 3): each part of the hot
//! path as its own program of the test-support object
//! (gpudirect-trace-ebpf/src/test_support.rs, never loaded by the tool),
//! timed by the kernel's accounting (kernel.bpf_stats_enabled) against an
//! empty program in the same run: a per-CPU array lookup, the counter's
//! per-CPU hash lookup, the clock, the task, a 64-byte record by
//! reserve+submit and by output, the backlog query, and the interrupt-
//! context test (the CPU number and two kernel reads).

use std::os::fd::AsFd as _;

use aya::maps::{MapData, RingBuf};
use gpudirect_trace::ebpf::testrun::run_raw_tracepoint;

use crate::test_support;

const PARTS: [&str; 11] = [
    "part_empty",
    "part_percpu_array",
    "part_percpu_hash",
    "part_ktime",
    "part_jiffies",
    "part_prandom",
    "part_pid_tgid",
    "part_reserve_submit",
    "part_output",
    "part_query",
    "part_preempt_count",
];

#[test]
#[ignore = "benchmark: cargo xtask bench"]
fn bench_hot_path_parts() {
    let mut obj = test_support::load(&PARTS);
    let mut ring: RingBuf<MapData> =
        RingBuf::try_from(obj.take_map("PART_RING").expect("PART_RING")).expect("ring");
    std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1").expect("bpf_stats");
    let mut acc = [(0u64, 0u64); PARTS.len()];
    // Interleaved rounds: the shared host's drift hits every part alike.
    for _ in 0..20 {
        for (i, p) in PARTS.iter().enumerate() {
            let prog = test_support::program(&obj, p);
            let before = prog.info().expect("info");
            let fd = prog.fd().expect("fd");
            for n in 0..5_000u64 {
                run_raw_tracepoint(fd.as_fd(), &[0xffff_8880_0000_1000, 4096 + n], None)
                    .expect("test run");
            }
            let after = prog.info().expect("info");
            acc[i].0 += after.run_count() - before.run_count();
            acc[i].1 += (after.run_time() - before.run_time()).as_nanos() as u64;
            while ring.next().is_some() {}
        }
    }
    std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "0").expect("bpf_stats");
    let ns = |i: usize| acc[i].1 as f64 / acc[i].0.max(1) as f64;
    for (i, p) in PARTS.iter().enumerate() {
        println!(
            "BENCH hot_part part={} runs={} ns_per_hit={:.1} net_of_empty={:.1}",
            p.trim_start_matches("part_"),
            acc[i].0,
            ns(i),
            ns(i) - ns(0)
        );
    }
}
