//! `cargo xtask bench`'s cost of `--check` in userspace (an ignored test,
//! run in release mode): CPU per event of the analysis with the checks off
//! and on, over the same map/unmap stream (FROM_DEVICE single mappings with
//! physical addresses: every map and unmap also goes through the cacheline
//! index, the checks' most expensive path).

use std::sync::Arc;

use gpudirect_trace_common::{kind, Event};

use crate::{
    analysis::Analysis,
    decode::Record,
    kernel::thread_cpu_ns,
    model::{misuse::CheckSetup, TraceClock},
    tracefile::tests::Rng,
};

/// Maps and unmaps of 4 KiB FROM_DEVICE pages, up to 4096 live, IOVAs
/// recycled as an IOVA allocator does.
fn stream(n: u64) -> Vec<Record> {
    let mut rng = Rng::new(5);
    let mut live: Vec<u64> = Vec::new();
    let mut free: Vec<u64> = (0..8192u64).map(|i| 0xff00_0000 - (i << 12)).collect();
    (0..n)
        .map(|i| {
            let unmap = live.len() >= 4096 || (!live.is_empty() && rng.below(2) == 0);
            let (k, addr) = if unmap {
                let j = rng.below(live.len() as u64) as usize;
                let a = live.swap_remove(j);
                free.push(a);
                (kind::DMA_UNMAP, a)
            } else {
                let j = rng.below(free.len() as u64) as usize;
                let a = free.swap_remove(j);
                live.push(a);
                (kind::DMA_MAP, a)
            };
            Record::Event(Event {
                kind: k,
                dir: 2,
                ts_ns: 1_000 + i * 100,
                pid: 7,
                tid: 7,
                addr,
                phys: (addr & 0xffff_f000) << 4,
                size: 4096,
                ..Default::default()
            })
        })
        .collect()
}

fn run(records: &[Record], check: bool) -> (f64, u64) {
    let mut a = Analysis::new(TraceClock::new(0, 0));
    if check {
        a.enable_checks(&CheckSetup::default(), [("0000:00:04.0", Some("nvme"))]);
    }
    let dev: Arc<str> = Arc::from("0000:00:04.0");
    let t0 = thread_cpu_ns();
    for (i, r) in records.iter().enumerate() {
        a.record(r, &dev);
        if i % 100_000 == 99_999 {
            a.confirm(0);
        }
    }
    a.confirm(0);
    let ns = (thread_cpu_ns() - t0) as f64 / records.len() as f64;
    let found = a.checker.map_or(0, |c| c.stats.total());
    (ns, found)
}

#[test]
#[ignore = "benchmark: cargo xtask bench"]
fn bench_misuse_checks() {
    let records = stream(4_000_000);
    // Warm up the allocator and caches once, then measure each mode.
    run(&records[..200_000], true);
    let (off, _) = run(&records, false);
    let (on, found) = run(&records, true);
    assert_eq!(found, 0, "a correct stream gives no finding");
    println!(
        "BENCH misuse_checks events={} analysis_ns_per_event_off={off:.1} on={on:.1} \
         check_ns_per_event={:.1}",
        records.len(),
        on - off
    );
}
