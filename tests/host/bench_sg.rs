//! The scatter-gather walk's cost per entry (issue 17, item 3), from the
//! kernel's own accounting (kernel.bpf_stats_enabled): the REAL dma_map_sg
//! program over real `struct scatterlist` chains in kernel memory (the
//! arena of `sg_walk`: arrays of 128 entries joined by chain entries, as
//! sg_alloc_table lays them out), of 1 to 4096 entries, against the same
//! program given no list. The streamed record must show every entry's
//! bytes, so a walk cut short cannot pass for a cheap one.

use std::os::fd::{AsRawFd as _, BorrowedFd};

use gpudirect_trace::{
    decode::{decode, Record},
    ebpf::{testrun::run_raw_tracepoint, Tracer, TracerOptions},
};
use gpudirect_trace_common::flags;

use crate::{
    inject::known_kernel_object,
    sg_walk::{lengths, Arena},
};

fn run_stats(tracer: &Tracer, program: &str) -> (u64, u64) {
    tracer
        .program_stats()
        .iter()
        .find(|s| s.program == program)
        .map_or((0, 0), |s| (s.run_count, s.run_time_ns))
}

const SIZES: [usize; 5] = [1, 16, 128, 1024, 4096];

#[test]
#[ignore = "benchmark: cargo xtask bench"]
fn bench_sg_walk() {
    let dev = known_kernel_object().addr;
    for (mode, stream) in [("streaming", true), ("aggregate-only,no-lifetimes", false)] {
        let mut tracer = Tracer::load(&TracerOptions {
            attach: false,
            stream,
            lifetimes: false,
            ring_bytes: 1 << 20,
            ..Default::default()
        })
        .expect("load");
        // One arena per list size (the lists are laid out from its start).
        let mut lists = vec![(0usize, 0u64, 0u64)];
        let mut arenas = Vec::new();
        for n in SIZES {
            let mut arena = Arena::new(tracer.offsets);
            let lens = lengths(n);
            let (sgl, _) = arena.chained(&lens, 128, 0);
            lists.push((n, sgl, lens.iter().map(|&l| u64::from(l)).sum()));
            arenas.push(arena);
        }
        let fd = tracer
            .program_fd("dma_map_sg")
            .expect("program")
            .as_raw_fd();
        let run = |sgl: u64, n: usize| {
            // SAFETY: the tracer owning the fd outlives every call.
            let fd = unsafe { BorrowedFd::borrow_raw(fd) };
            run_raw_tracepoint(fd, &[dev, sgl, n as u64, n as u64, 1, 0], None).expect("run");
        };
        // The walk must be whole: checked on the streamed record.
        if stream {
            for &(n, sgl, bytes) in &lists[1..] {
                run(sgl, n);
                let mut seen = None;
                tracer.drain(|b| {
                    if let Ok(Record::Sg(sg)) = decode(b) {
                        seen = Some((sg.event.size, sg.event.flags & flags::SG_TRUNCATED));
                    }
                });
                assert_eq!(seen, Some((bytes, 0)), "{n} entries walked whole");
            }
        }
        std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1").expect("bpf_stats");
        // Interleaved batches: drift on the shared host hits every size alike.
        let mut acc = vec![(0u64, 0u64); lists.len()];
        for _ in 0..10 {
            for (v, &(n, sgl, _)) in lists.iter().enumerate() {
                let before = run_stats(&tracer, "dma_map_sg");
                let reps = (20_000 / n.max(1)).clamp(200, 5_000);
                for _ in 0..reps {
                    run(sgl, n);
                }
                let after = run_stats(&tracer, "dma_map_sg");
                acc[v].0 += after.0 - before.0;
                acc[v].1 += after.1 - before.1;
                tracer.drain(|_| {});
            }
        }
        std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "0").expect("bpf_stats");
        let ns = |v: usize| acc[v].1 as f64 / acc[v].0.max(1) as f64;
        for (v, &(n, _, _)) in lists.iter().enumerate().skip(1) {
            println!(
                "BENCH sg_walk mode={mode} program=dma_map_sg entries={n} runs={} ns_per_hit={:.1} \
                 ns_no_list={:.1} ns_per_entry={:.2}",
                acc[v].0,
                ns(v),
                ns(0),
                (ns(v) - ns(0)) / n as f64
            );
        }
        drop(arenas);
    }
}
