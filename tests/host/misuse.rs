//! The misuse checks on records the REAL programs make (BPF_PROG_TEST_RUN),
//! in the orders that matter: a handle mapped again before its old unmap
//! reached the ring, an unmap from another task (as from an interrupt or
//! another CPU), scatterlists whose map merged entries, and kernel stacks
//! taken by the real programs (`--stacks`).

use std::os::fd::AsFd as _;

use gpudirect_trace::{
    ebpf::{testrun::run_raw_tracepoint, Tracer, TracerOptions},
    model::misuse::{Check, CheckSetup},
};
use gpudirect_trace_common::aux_stack;

use crate::{inject::Injector, sg_walk::Arena};

fn checked(stacks: bool) -> Injector {
    checked_with(stacks, false, None)
}

/// `bpf_atomics`: Some(false) loads what a kernel without BPF atomics gets
/// (the hash form of the mapping table).
fn checked_with(stacks: bool, stacks_every_call: bool, bpf_atomics: Option<bool>) -> Injector {
    let tracer = Tracer::load(&TracerOptions {
        attach: false,
        ring_bytes: 1 << 20,
        stacks,
        stacks_every_call,
        bpf_atomics,
        ..Default::default()
    })
    .expect("load the eBPF object");
    let mut inj = Injector::new(tracer);
    let setup = CheckSetup {
        stacks,
        ..Default::default()
    };
    let name = inj.device.name.clone();
    inj.analysis
        .enable_checks(&setup, [(name.as_str(), Some("stand-in"))]);
    inj
}

/// The proven findings' checks, after a loss check with nothing lost.
fn proven(inj: &mut Injector) -> Vec<Check> {
    inj.drain_all();
    inj.analysis
        .confirm(0)
        .into_iter()
        .filter_map(|o| inj.analysis.ledger.get(o.id()))
        .filter_map(|i| i.misuse.as_ref().map(|m| m.check))
        .collect()
}

#[test]
fn a_remap_before_the_old_unmap_and_an_unmap_from_another_task_are_no_misuse() {
    crate::require_root();
    let mut inj = checked(false);
    let dev = inj.device.addr;
    let h = 0xfff0_0000u64;
    // CPU B maps the handle again before CPU A's unmap of its previous life
    // reached the ring (the tracepoints fire after the work).
    inj.run("dma_map", &[dev, 0x10_0000, h, 64, 1, 0]);
    inj.run("dma_map", &[dev, 0x20_0000, h, 128, 2, 0]);
    // The old unmap, from another task (a completion interrupt runs in
    // whatever task it interrupted).
    let fd = inj
        .tracer
        .program_fd("dma_unmap")
        .expect("dma_unmap")
        .try_clone_to_owned()
        .expect("fd");
    std::thread::spawn(move || {
        run_raw_tracepoint(fd.as_fd(), &[dev, h, 64, 1, 0], None).expect("test run")
    })
    .join()
    .expect("thread");
    inj.run("dma_unmap", &[dev, h, 128, 2, 0]);
    assert_eq!(proven(&mut inj), [], "correct use in a real order");
    // Now a real double unmap of that handle.
    inj.run("dma_unmap", &[dev, h, 128, 2, 0]);
    assert_eq!(proven(&mut inj), [Check::DoubleUnmap]);
    let st = &inj.analysis.checker.as_ref().expect("checker").stats;
    assert_eq!((st.unknown_unmaps, st.unproven), (0, 0));
}

#[test]
fn scatterlists_whose_map_merged_entries_are_checked_by_the_entries_handed_in() {
    crate::require_root();
    let mut inj = checked(false);
    let dev = inj.device.addr;
    let mut arena = Arena::new(inj.tracer.offsets);
    let (sgl, _) = arena.chained(&[4096, 4096, 4096, 4096, 4096], 128, 0);
    // The IOMMU merged 5 entries into 3: unmapping with the 5 handed in is
    // right (dma-debug's rule, the DMA API's too).
    inj.run("dma_map_sg", &[dev, sgl, 5, 3, 2, 0]);
    inj.run("dma_unmap_sg", &[dev, sgl, 5, 2, 0]);
    assert_eq!(proven(&mut inj), []);
    // Unmapping with the merged count is the classic mistake.
    inj.run("dma_map_sg", &[dev, sgl, 5, 3, 2, 0]);
    inj.run("dma_sync_sg_for_cpu", &[dev, sgl, 3, 2]);
    inj.run("dma_unmap_sg", &[dev, sgl, 3, 2, 0]);
    assert_eq!(proven(&mut inj), [Check::SyncSgCount, Check::SgUnmapCount]);
}

#[test]
fn the_real_programs_take_kernel_stacks_with_stacks_on_only() {
    crate::require_root();
    let mut off = checked(false);
    let dev = off.device.addr;
    off.run("dma_map", &[dev, 0x10_0000, 0xfff0_0000, 64, 1, 0x20]);
    let mut recs = Vec::new();
    off.tracer
        .drain(|b| recs.push(gpudirect_trace::decode::decode(b).expect("record")));
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].event().aux, 0x20, "no stack id without --stacks");

    let mut on = checked(true);
    let dev = on.device.addr;
    on.run("dma_map", &[dev, 0x10_0000, 0xfff0_0000, 64, 1, 0x20]);
    on.run("dma_unmap", &[dev, 0xfff0_0000, 32, 1, 0]);
    let mut recs = Vec::new();
    on.tracer
        .drain(|b| recs.push(gpudirect_trace::decode::decode(b).expect("record")));
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].event().aux & 0xffff_ffff, 0x20, "attributes kept");
    let id = aux_stack(recs[0].event().aux).expect("a stack id");
    let ips = on.tracer.stack(id).expect("the stack is in the map");
    let frames = gpudirect_trace::symbols::Symbolizer::live().frames(&ips);
    // BPF_PROG_TEST_RUN runs the program from the bpf() syscall.
    assert!(
        frames
            .iter()
            .any(|f| f.contains("bpf_prog_test_run") || f.contains("__sys_bpf")),
        "{frames:#?}"
    );
    // The finding carries both calls' stacks, symbolized.
    for r in &recs {
        let name = on.tracer.device_name(r.event().dev);
        on.analysis.record(r, &name);
    }
    let ids = on.analysis.confirm(0);
    assert_eq!(ids.len(), 1, "unmap-size");
    let missing = on.analysis.missing_stacks();
    assert!(!missing.is_empty());
    let list: Vec<_> = missing
        .iter()
        .map(|&id| gpudirect_trace::model::misuse::StackFrames {
            id,
            frames: gpudirect_trace::symbols::Symbolizer::live()
                .frames(&on.tracer.stack(id).expect("stack")),
        })
        .collect();
    on.analysis.add_stacks(&list);
    on.analysis.fill_stacks();
    let inc = on.analysis.ledger.get(ids[0].id()).expect("incident");
    let m = inc.misuse.as_ref().expect("misuse");
    assert_eq!(m.check, Check::UnmapSize);
    assert!(!m.call.stack.is_empty() && !m.map.as_ref().expect("map").stack.is_empty());
}

/// `--stacks` takes every map's stack, but an unmap's or a single sync's
/// only where the kernel's mapping table does not hold its mapping with the
/// same API, size and direction: exactly the calls that can be findings,
/// each of which still shows the code that misused. `--stacks-every-call`
/// takes every one. Both forms of the table (the slot table, and the hash of
/// kernels without BPF atomics). (Fails on a filter that drops a finding's
/// stack, and on one that lets every unmap through.)
#[test]
fn unmaps_and_syncs_that_cannot_be_findings_take_no_stack() {
    crate::require_root();
    const MMIO: u64 = gpudirect_trace_common::DMA_ATTR_MMIO;
    let (h1, h2, h3, h4, h5) = (
        0xa000_0000u64,
        0xb000_0000,
        0xc000_0000,
        0xd000_0000,
        0xe000_0000,
    );
    for (every_call, atomics) in [(false, None), (false, Some(false)), (true, None)] {
        let mut inj = checked_with(true, every_call, atomics);
        let dev = inj.device.addr;
        let mut arena = Arena::new(inj.tracer.offsets);
        let (sgl, _) = arena.chained(&[4096, 4096, 4096, 4096, 4096], 128, 0);
        // (program, arguments, whether it can be a finding)
        #[rustfmt::skip]
        let calls: [(&str, Vec<u64>, bool); 22] = [
            ("dma_map", vec![dev, 0x1000, h1, 4096, 1, 0], true),
            ("dma_sync_single_for_cpu", vec![dev, h1, 4096, 1], false),
            ("dma_sync_single_for_device", vec![dev, h1, 2048, 1], false),
            ("dma_unmap", vec![dev, h1, 4096, 1, 0], false),
            ("dma_unmap", vec![dev, h1, 4096, 1, 0], true), // double unmap
            ("dma_sync_single_for_cpu", vec![dev, h1, 4096, 1], true), // after unmap
            ("dma_map", vec![dev, 0x2000, h2, 4096, 2, 0], true),
            ("dma_sync_single_for_device", vec![dev, h2, 8192, 2], true), // outside
            ("dma_sync_single_for_cpu", vec![dev, h2, 4096, 1], true), // direction
            ("dma_unmap", vec![dev, h2, 2048, 2, 0], true), // size
            ("dma_map", vec![dev, 0x3000, h3, 4096, 0, 0], true),
            ("dma_sync_single_for_cpu", vec![dev, h3, 4096, 1], false), // bidirectional
            ("dma_unmap", vec![dev, h3, 4096, 1, 0], true), // direction
            ("dma_map", vec![dev, 0x4000, h4, 4096, 1, MMIO], true),
            ("dma_unmap", vec![dev, h4, 4096, 1, 0], true), // API (resource vs page)
            ("dma_map", vec![dev, 0x5000, h5, 4096, 1, MMIO], true),
            ("dma_unmap", vec![dev, h5, 4096, 1, MMIO], false),
            ("dma_unmap", vec![dev, 0xf000_0000, 4096, 1, 0], true), // mapped before tracing
            ("dma_map_sg", vec![dev, sgl, 5, 3, 2, 0], true),
            ("dma_unmap_sg", vec![dev, sgl, 5, 2, 0], false),
            ("dma_map_sg", vec![dev, sgl, 5, 3, 2, 0], true),
            ("dma_unmap_sg", vec![dev, sgl, 3, 2, 0], true), // the merged count
        ];
        for (program, args, _) in &calls {
            inj.run(program, args);
        }
        let mut recs = Vec::new();
        inj.tracer
            .drain(|b| recs.push(gpudirect_trace::decode::decode(b).expect("record")));
        assert_eq!(recs.len(), calls.len());
        for ((program, args, suspect), r) in calls.iter().zip(&recs) {
            let has = aux_stack(r.event().aux).is_some();
            assert_eq!(
                has,
                *suspect || every_call,
                "{program} {args:x?} (every call: {every_call}, atomics: {atomics:?})"
            );
        }
        for r in &recs {
            let name = inj.tracer.device_name(r.event().dev);
            inj.analysis.record(r, &name);
        }
        let ids = inj.analysis.confirm(0);
        let mut checks: Vec<Check> = ids
            .iter()
            .filter_map(|o| inj.analysis.ledger.get(o.id()))
            .filter_map(|i| i.misuse.as_ref().map(|m| m.check))
            .collect();
        checks.sort();
        assert_eq!(
            checks,
            [
                Check::DoubleUnmap,
                Check::UnmapSize,
                Check::UnmapDirection,
                Check::UnmapClass,
                Check::SgUnmapCount,
                Check::SyncUnmapped,
                Check::SyncOutside,
                Check::SyncDirection,
            ]
        );
        // Every finding names the misusing call's stack and its map's.
        let missing = inj.analysis.missing_stacks();
        let list: Vec<_> = missing
            .iter()
            .map(|&id| gpudirect_trace::model::misuse::StackFrames {
                id,
                frames: vec![format!("frame of stack {id}")],
            })
            .collect();
        inj.analysis.add_stacks(&list);
        inj.analysis.fill_stacks();
        for o in &ids {
            let m = inj
                .analysis
                .ledger
                .get(o.id())
                .and_then(|i| i.misuse.as_ref())
                .expect("misuse");
            assert!(
                !m.call.stack.is_empty(),
                "{:?} without its call's stack",
                m.check
            );
            assert!(
                m.map.as_ref().is_some_and(|c| !c.stack.is_empty()),
                "{:?} without its map's stack",
                m.check
            );
        }
    }
}

/// The cost of `--stacks` per hit: dma_map and dma_unmap through the real
/// programs with stacks off and on, from the kernel's own accounting
/// (bpf_stats). Each distinct stack is stored once; these runs all share
/// the test runner's stack, so this is the cost of the walk and the hash.
#[test]
#[ignore = "benchmark: cargo xtask bench"]
fn bench_stacks_cost() {
    use std::os::fd::{AsRawFd as _, BorrowedFd};
    crate::require_root();
    const RUNS: u64 = 50_000;
    for stacks in [false, true] {
        let inj = checked(stacks);
        let dev = inj.device.addr;
        let mut tracer = inj.tracer;
        std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "1").expect("bpf_stats (root)");
        let map = tracer.program_fd("dma_map").expect("dma_map").as_raw_fd();
        let unmap = tracer
            .program_fd("dma_unmap")
            .expect("dma_unmap")
            .as_raw_fd();
        for i in 0..RUNS {
            let a = 0x1000_0000 + (i % 4096) * 4096;
            // SAFETY: the tracer (owner of the fds) outlives this loop.
            let (m, u) = unsafe { (BorrowedFd::borrow_raw(map), BorrowedFd::borrow_raw(unmap)) };
            run_raw_tracepoint(m, &[dev, 0x1000, a, 4096, 1, 0], None).expect("run");
            run_raw_tracepoint(u, &[dev, a, 4096, 1, 0], None).expect("run");
            if i % 4096 == 0 {
                tracer.drain(|_| {});
            }
        }
        std::fs::write("/proc/sys/kernel/bpf_stats_enabled", "0").expect("bpf_stats");
        for s in tracer
            .program_stats()
            .iter()
            .filter(|s| s.program == "dma_map" || s.program == "dma_unmap")
        {
            println!(
                "BENCH stacks_cost stacks={} program={} runs={} ns_per_hit={:.1}",
                if stacks { "on" } else { "off" },
                s.program,
                s.run_count,
                s.ns_per_run
            );
        }
        assert_eq!(tracer.self_stats().stacks_lost, 0);
    }
}
