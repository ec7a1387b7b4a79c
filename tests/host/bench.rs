//! Benchmarks (not tests): `#[ignore]`d, run by `cargo xtask bench` in release
//! mode, which collects the `BENCH` lines they print into docs/benchmarks.md.
//! Nothing here asserts a timing; the only assertion is the loss accounting
//! identity, which must hold at any rate.

use std::{
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, RawFd},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use aya::Ebpf;
use gpudirect_trace::{
    aggregate::Aggregator,
    decode::decode,
    ebpf::{testrun::run_raw_tracepoint, Tracer, TracerOptions},
};
use gpudirect_trace_common::{kind, lifetime::DEFAULT_SAMPLE, maps::STACKS_CAP, Event};

use crate::{
    inject::{known_kernel_object, Injector},
    test_support,
};

pub(crate) fn set_bpf_stats(on: bool) {
    std::fs::write(
        "/proc/sys/kernel/bpf_stats_enabled",
        if on { "1" } else { "0" },
    )
    .expect("write kernel.bpf_stats_enabled (root)");
}

/// The accounting floor: `bench_floor` of the test-support object (not the
/// tool's), an empty program whose cost per run is what the kernel's
/// accounting adds to every program.
pub(crate) struct Floor(Ebpf);

impl Floor {
    pub(crate) fn load() -> Self {
        Self(test_support::load(&["bench_floor"]))
    }

    pub(crate) fn fd(&self) -> RawFd {
        let p = test_support::program(&self.0, "bench_floor");
        p.fd().expect("fd").as_fd().as_raw_fd()
    }

    /// ns per run so far (0 before any run).
    pub(crate) fn ns_per_run(&self) -> f64 {
        self.0
            .program("bench_floor")
            .and_then(|p| p.info().ok())
            .filter(|i| i.run_count() > 0)
            .map_or(0.0, |i| {
                i.run_time().as_nanos() as f64 / i.run_count() as f64
            })
    }
}

/// Runs of each program a cost benchmark times.
const RUNS: u64 = 100_000;

/// Runs the programs `RUNS` times in lockstep, each with the arguments its
/// function gives for run i, draining the ring every 5 000 runs so that
/// streaming never drops (as a reader keeping up would).
fn run_in_lockstep<A: Fn(u64) -> Vec<u64>>(tracer: &mut Tracer, progs: &[(RawFd, A)]) {
    for i in 0..RUNS {
        for (fd, args) in progs {
            // SAFETY: the tracer (owner of the fd) outlives this loop.
            let fd = unsafe { BorrowedFd::borrow_raw(*fd) };
            run_raw_tracepoint(fd, &args(i), None).expect("test run");
        }
        if i % 5_000 == 0 {
            tracer.drain(|_| {});
        }
    }
    tracer.drain(|_| {});
}

/// Stops the kernel's accounting and prints each program's cost per hit
/// (`BENCH <bench> mode=<mode> ...`), also net of the accounting floor,
/// which it returns.
fn report_program_costs(bench: &str, mode: &str, tracer: &Tracer, support: &Floor) -> f64 {
    set_bpf_stats(false);
    let floor = support.ns_per_run();
    for s in &tracer.program_stats() {
        println!(
            "BENCH {bench} mode={mode} program={} runs={} ns_per_hit={:.1} \
             net_of_floor={:.1}",
            s.program,
            s.run_count,
            s.ns_per_run,
            s.ns_per_run - floor
        );
    }
    floor
}

/// dma_map's arguments for run `i`: 64 mappings in flight at distinct
/// addresses, as a driver's ring would keep them.
pub(crate) fn map_args(dev: u64, i: u64) -> Vec<u64> {
    vec![dev, 0x1000, 0x1000_0000 + (i % 65_536) * 4096, 4096, 1, 0]
}

/// dma_unmap's arguments for run `i`: the mapping of run `i - 64`.
pub(crate) fn unmap_args(dev: u64, i: u64) -> Vec<u64> {
    let addr = 0x1000_0000 + (i.wrapping_sub(64) % 65_536) * 4096;
    vec![dev, addr, 4096, 1, 0]
}

/// Per-program cost per hit, from the kernel's own accounting, with events
/// driven through BPF_PROG_TEST_RUN.
#[test]
#[ignore = "benchmark: cargo xtask bench"]
fn bench_program_cost() {
    let dev = known_kernel_object().addr;
    // Programs run in lockstep groups: a map and its unmap alternate, 64
    // mappings in flight at distinct addresses (as a driver's ring would),
    // so in-kernel lifetime tracking pays for real inserts and deletes.
    type Args = fn(u64, u64) -> Vec<u64>;
    let groups: Vec<Vec<(&str, Args)>> = vec![
        // Does nothing: the floor of the kernel's accounting itself.
        vec![("bench_floor", |_, _| vec![0])],
        vec![("dma_map", map_args), ("dma_unmap", unmap_args)],
        vec![
            ("dma_map_sg", |dev, _| vec![dev, 0, 1, 1, 1, 0]),
            ("dma_unmap_sg", |dev, _| vec![dev, 0, 1, 1, 0]),
        ],
        vec![
            ("iommu_map", |_, _| vec![0xfff0_0000, 0x5000, 4096]),
            ("iommu_unmap", |_, _| vec![0xfff0_0000, 4096, 4096]),
        ],
        vec![("swiotlb_bounced", |dev, _| vec![dev, 0x2000, 512])],
    ];
    // aggregate-only: its default, one lifetime in 16 timed; every-lifetime:
    // `--lifetime-sample 1`, the clock read at every map and unmap.
    for (mode, stream, lifetimes, lifetime_sample) in [
        ("streaming", true, false, 1),
        ("aggregate-only", false, true, DEFAULT_SAMPLE),
        ("aggregate-only,every-lifetime", false, true, 1),
        ("aggregate-only,no-lifetimes", false, false, 1),
    ] {
        let mut tracer = Tracer::load(&TracerOptions {
            attach: false,
            stream,
            lifetimes,
            lifetime_sample,
            ..Default::default()
        })
        .expect("load");
        let support = Floor::load();
        let floor_fd = support.fd();
        set_bpf_stats(true);
        for group in &groups {
            let fds: Vec<_> = group
                .iter()
                .map(|(prog, args)| {
                    let fd = match *prog {
                        "bench_floor" => floor_fd,
                        _ => tracer.program_fd(prog).expect("program").as_raw_fd(),
                    };
                    (fd, move |i| args(dev, i))
                })
                .collect();
            run_in_lockstep(&mut tracer, &fds);
        }
        let floor = report_program_costs("program_cost", mode, &tracer, &support);
        println!("BENCH program_cost mode={mode} accounting_floor_ns={floor:.1}");
    }
}

/// What `--stacks` adds per DMA-API call (issue 28, item 3): streaming
/// dma_map and dma_unmap without stacks and with `--stack-depth` 127, 16
/// and 4. Under BPF_PROG_TEST_RUN the kernel unwinds the test run's own
/// syscall path (`frames=` says how deep): shallower than a driver's call
/// chain, so this is the cost's floor on this host, not a driver's.
#[test]
#[ignore = "benchmark: cargo xtask bench"]
fn bench_stack_cost() {
    let dev = known_kernel_object().addr;
    // `--stacks` leaves out the stacks of unmaps that match their map (all
    // but the first 64 here); every-call is `--stacks-every-call`.
    for (mode, stacks, stack_depth, stacks_every_call) in [
        ("no-stacks", false, 127, false),
        ("depth-127", true, 127, false),
        ("every-call", true, 127, true),
        ("depth-16", true, 16, false),
        ("depth-4", true, 4, false),
    ] {
        let mut tracer = Tracer::load(&TracerOptions {
            attach: false,
            stream: true,
            stacks,
            stacks_every_call,
            stack_depth,
            ..Default::default()
        })
        .expect("load");
        let support = Floor::load();
        let fd = |p: &str| tracer.program_fd(p).expect("program").as_raw_fd();
        let progs = [
            (
                fd("dma_map"),
                Box::new(move |i| map_args(dev, i)) as Box<dyn Fn(u64) -> Vec<u64>>,
            ),
            (fd("dma_unmap"), Box::new(move |i| unmap_args(dev, i))),
            (support.fd(), Box::new(|_| vec![0])),
        ];
        set_bpf_stats(true);
        run_in_lockstep(&mut tracer, &progs);
        report_program_costs("stack_cost", mode, &tracer, &support);
        let frames = (0..STACKS_CAP)
            .find_map(|id| tracer.stack(id))
            .map_or(0, |f| f.len());
        println!("BENCH stack_cost mode={mode} frames={frames}");
    }
}

/// End to end: injector threads at rising target rates, one reader draining
/// and aggregating; received + lost must equal injected at every rate.
#[test]
#[ignore = "benchmark: cargo xtask bench"]
fn bench_pipeline_rates() {
    let threads = 2;
    for rate in [50_000u64, 200_000, 800_000, u64::MAX] {
        let mut inj = Injector::new(
            Tracer::load(&TracerOptions {
                attach: false,
                ring_bytes: 1 << 20,
                ..Default::default()
            })
            .expect("load"),
        );
        let fd = inj
            .tracer
            .program_fd("dma_map")
            .expect("program")
            .as_raw_fd();
        let dev = inj.device.addr;
        let injected = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let duration = Duration::from_secs(2);
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (injected, stop) = (injected.clone(), stop.clone());
                std::thread::spawn(move || {
                    let per_thread = rate / threads;
                    let start = Instant::now();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if per_thread != u64::MAX / threads {
                            let due = (start.elapsed().as_secs_f64() * per_thread as f64) as u64;
                            if n >= due {
                                std::hint::spin_loop();
                                continue;
                            }
                        }
                        // SAFETY: the tracer owning the fd outlives the workers.
                        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
                        run_raw_tracepoint(fd, &[dev, n << 12, n << 12, 4096, 2, 0], None)
                            .expect("test run");
                        n += 1;
                    }
                    injected.fetch_add(n, Ordering::Relaxed);
                })
            })
            .collect();
        let start = Instant::now();
        let mut received = 0u64;
        while start.elapsed() < duration {
            received += inj.drain_all() as u64;
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().expect("worker");
        }
        received += inj.drain_all() as u64;
        let elapsed = start.elapsed().as_secs_f64();
        let injected = injected.load(Ordering::Relaxed);
        let lost = inj.tracer.self_stats().lost_events;
        assert_eq!(received + lost, injected, "loss accounting at rate {rate}");
        let target = if rate == u64::MAX {
            "max".to_owned()
        } else {
            rate.to_string()
        };
        println!(
            "BENCH pipeline target_rate={target} injected_per_s={:.0} received_per_s={:.0} lost={lost} injected={injected}",
            injected as f64 / elapsed,
            received as f64 / elapsed
        );
    }
}

/// Userspace decode + aggregate throughput on one core.
#[test]
#[ignore = "benchmark: cargo xtask bench"]
fn bench_decode_aggregate() {
    let n = 2_000_000u64;
    let records: Vec<[u8; 64]> = (0..n)
        .map(|i| {
            let ev = Event {
                kind: if i % 2 == 0 {
                    kind::DMA_MAP
                } else {
                    kind::DMA_UNMAP
                },
                dir: 2,
                ts_ns: i * 300,
                dev: 0xffff_8880_0000_0000 + (i % 4) * 0x1000,
                addr: 0xf000_0000 + ((i / 2) % 4096) * 0x1000,
                size: 4096 << (i % 5),
                ..Default::default()
            };
            // SAFETY: Event is repr(C) plain data of exactly 64 bytes.
            unsafe { std::mem::transmute::<Event, [u8; 64]>(ev) }
        })
        .collect();
    let names: Vec<Arc<str>> = (0..4)
        .map(|i| Arc::from(format!("0000:00:0{i}.0")))
        .collect();
    let mut agg = Aggregator::new();
    let start = Instant::now();
    for r in &records {
        let rec = decode(r).expect("decode");
        let dev = (rec.event().dev & 0xffff) as usize / 0x1000;
        agg.ingest(&rec, &names[dev]);
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(agg.events, n);
    println!(
        "BENCH decode_aggregate events={n} events_per_s={:.0}",
        n as f64 / secs
    );
}

/// The invalidation hook's cost per submission: its entry and exit bodies
/// (bench_inval, the same code as t_qi_submit_in/out) and the
/// intel_iommu:qi_submit program, per hit, from the kernel's accounting.
/// The fentry/fexit trampolines are not in it: the CI host has no function
/// tracer (docs/benchmarks.md adds the published trampoline cost).
#[test]
#[ignore = "benchmark: cargo xtask bench"]
fn bench_invalidation_hook() {
    let desc = known_kernel_object().addr;
    for (mode, stream) in [("streaming", true), ("aggregate-only", false)] {
        let mut tracer = Tracer::load(&TracerOptions {
            attach: false,
            stream,
            ..Default::default()
        })
        .expect("load");
        tracer
            .load_unattached("bench_inval")
            .expect("load bench program");
        let support = Floor::load();
        let floor_fd = support.fd();
        set_bpf_stats(true);
        let progs: [(&str, Vec<u64>); 3] = [
            ("bench_floor", vec![0]),
            ("bench_inval", vec![0, desc, 1]),
            ("intel_qi_submit", vec![0, 0x32 | 7 << 16, 0x1000, 0, 0]),
        ];
        for (prog, args) in &progs {
            let fd = match *prog {
                "bench_floor" => floor_fd,
                _ => tracer.program_fd(prog).expect("program").as_raw_fd(),
            };
            run_in_lockstep(&mut tracer, &[(fd, |_| args.clone())]);
        }
        report_program_costs("invalidation_hook", mode, &tracer, &support);
    }
}

/// What the translation budget and the invalidation rows cost userspace:
/// per device and refresh (live interval, scrape), with every timed
/// operation and three invalidation classes recorded.
#[test]
#[ignore = "benchmark: cargo xtask bench"]
fn bench_budget() {
    use gpudirect_trace::{aggregate::budget, decode::Record};
    use gpudirect_trace_common::{inval, op};
    let mut agg = Aggregator::new();
    let devices: Vec<Arc<str>> = (0..8)
        .map(|i| Arc::from(format!("0000:00:0{i}.0")))
        .collect();
    for (i, dev) in devices.iter().enumerate() {
        for n in 0..10_000u64 {
            let ts = n * 1_000 + i as u64;
            for o in 0..op::COUNT {
                let lat = Event {
                    kind: kind::LATENCY,
                    ts_ns: ts,
                    size: 500 + (n * 37 + u64::from(o)) % 50_000,
                    aux: u64::from(o),
                    ..Default::default()
                };
                agg.ingest(&Record::Event(lat), dev);
            }
            for t in [inval::QI_IOTLB, inval::QI_DIOTLB, inval::QI_IEC] {
                let ev = Event {
                    kind: kind::IOMMU_INVAL,
                    ts_ns: ts,
                    dir: inval::class(inval::VENDOR_INTEL, t, 0, n % 2 == 0),
                    phys: u64::from(t) | 3 << 16,
                    size: 1_000 + n % 9_000,
                    aux: 1,
                    ..Default::default()
                };
                agg.ingest(&Record::Event(ev), dev);
            }
        }
    }
    let runs = 200;
    let start = Instant::now();
    let mut kept = 0.0;
    for _ in 0..runs {
        for d in agg.devices.values() {
            kept += budget::of_device(d).map_or(0.0, |b| b.iommu_ms_per_s);
        }
    }
    let per_device = start.elapsed().as_secs_f64() / (runs * agg.devices.len()) as f64;
    let start = Instant::now();
    let mut rows = 0;
    for _ in 0..runs {
        rows += agg.unit_rows().len();
        for d in agg.devices.values() {
            rows += d.inval.rows().len();
        }
    }
    let per_refresh = start.elapsed().as_secs_f64() / runs as f64;
    assert!(kept > 0.0 && rows > 0);
    println!(
        "BENCH budget per_device_us={:.1} ops={} invalidation_rows_per_refresh_us={:.1} devices={}",
        per_device * 1e6,
        op::COUNT,
        per_refresh * 1e6,
        agg.devices.len()
    );
}
