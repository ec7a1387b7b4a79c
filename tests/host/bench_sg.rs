//! The scatter-gather walk's cost per entry (issue 17, item 3), from the
//! kernel's own accounting (kernel.bpf_stats_enabled).
//!
//! BPF_PROG_TEST_RUN cannot hand the program a scatterlist a driver built,
//! but the walk only needs kernel memory laid out as `struct scatterlist`
//! entries: the unused bottom of the boot CPU's idle stack (`init_stack`, a
//! real kernel region the program reads with bpf_probe_read_kernel as it
//! reads any list) is zeros, i.e. entries that are neither chained nor
//! last, so the walk reads all `SG_WALK_MAX` of them. The streamed record
//! proves it (SG_TRUNCATED set, 0 bytes); against the same program given no
//! list (sgl = NULL: no entry read) the difference is the walk.

use std::os::fd::{AsRawFd as _, BorrowedFd};

use gpudirect_trace::{
    decode::{decode, Record},
    ebpf::{testrun::run_raw_tracepoint, Tracer, TracerOptions},
    kernel,
};
use gpudirect_trace_common::{flags, SG_WALK_MAX};

use crate::inject::known_kernel_object;

/// A kernel address with `SG_WALK_MAX` zeroed 32-byte entries after it, if
/// the walk from there proves to read them all.
fn zeroed_entries(tracer: &mut Tracer, dev: u64) -> Option<u64> {
    let base = kernel::kallsyms_lookup("__start_init_stack")?;
    // Past STACK_END_MAGIC at the very bottom; the stack grows down from
    // the top, 16 KiB away.
    let sgl = base + 1024;
    let fd = tracer.program_fd("dma_map_sg").ok()?;
    run_raw_tracepoint(fd, &[dev, sgl, 1, 1, 1, 0], None).ok()?;
    let mut ok = false;
    tracer.drain(|b| {
        if let Ok(Record::Sg(sg)) = decode(b) {
            ok = sg.event.flags & flags::SG_TRUNCATED != 0 && sg.event.size == 0;
        }
    });
    ok.then_some(sgl)
}

fn run_stats(tracer: &Tracer, program: &str) -> (u64, u64) {
    tracer
        .program_stats()
        .iter()
        .find(|s| s.program == program)
        .map_or((0, 0), |s| (s.run_count, s.run_time_ns))
}

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
        // The check needs the streamed record: made in streaming mode, the
        // same kernel memory serves the aggregate-only run.
        let probe = if stream {
            zeroed_entries(&mut tracer, dev)
        } else {
            let mut t = Tracer::load(&TracerOptions {
                attach: false,
                ring_bytes: 1 << 20,
                ..Default::default()
            })
            .expect("load");
            zeroed_entries(&mut t, dev)
        };
        let Some(sgl) = probe else {
            println!("BENCH sg_walk mode={mode} skipped=no-zeroed-kernel-region");
            continue;
        };
        let fd = tracer
            .program_fd("dma_map_sg")
            .expect("program")
            .as_raw_fd();
        std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1").expect("bpf_stats");
        // Interleaved batches: drift on the shared host hits both alike.
        let mut acc = [(0u64, 0u64); 2];
        for _ in 0..20 {
            for (v, list) in [0, sgl].into_iter().enumerate() {
                let before = run_stats(&tracer, "dma_map_sg");
                for _ in 0..5_000 {
                    // SAFETY: the tracer owning the fd outlives the loop.
                    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
                    run_raw_tracepoint(fd, &[dev, list, 1, 1, 1, 0], None).expect("test run");
                }
                let after = run_stats(&tracer, "dma_map_sg");
                acc[v].0 += after.0 - before.0;
                acc[v].1 += after.1 - before.1;
                tracer.drain(|_| {});
            }
        }
        std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "0").expect("bpf_stats");
        let ns = |v: usize| acc[v].1 as f64 / acc[v].0.max(1) as f64;
        println!(
            "BENCH sg_walk mode={mode} program=dma_map_sg runs={} ns_no_list={:.1} \
             ns_{SG_WALK_MAX}_entries={:.1} ns_per_entry={:.2}",
            acc[0].0,
            ns(0),
            ns(1),
            (ns(1) - ns(0)) / f64::from(SG_WALK_MAX)
        );
    }
}
