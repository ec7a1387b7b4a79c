//! The in-kernel counters stay exact through the per-CPU counter cache
//! (`gpudirect_trace_common::COUNTER_CACHE`): more keys than the cache has
//! slots, interleaved, so keys keep taking slots from each other and their
//! counts move into DEV_COUNTERS; what userspace reads (cache + hash) must
//! be every event and every byte, per key.

use std::collections::BTreeMap;

use gpudirect_trace_common::{kind, COUNTER_CACHE};

use crate::inject::Injector;

#[test]
fn counters_are_exact_when_keys_outnumber_the_cache() {
    let mut inj = Injector::as_root();
    let real = inj.device.addr;
    // Two devices (the second a pointer no name can be read from: it is
    // counted all the same) x map/unmap x 4 directions = 16 keys.
    let devs = [real, real + 0x1000];
    let mut want: BTreeMap<(u64, u16, u32), (u64, u64)> = BTreeMap::new();
    let mut x = 12345u64;
    for i in 0..20_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let dev = devs[(x % 2) as usize];
        let dir = ((x >> 8) % 4) as u32;
        let size = 4096 * (1 + (x >> 16) % 8);
        let addr = 0x1000_0000 + (i % 4096) * 4096;
        let k = if (x >> 4) % 2 == 0 {
            inj.run("dma_map", &[dev, 0x2000, addr, size, u64::from(dir), 0]);
            kind::DMA_MAP
        } else {
            inj.run("dma_unmap", &[dev, addr, size, u64::from(dir), 0]);
            kind::DMA_UNMAP
        };
        let e = want.entry((dev, k, dir)).or_default();
        e.0 += 1;
        e.1 += size;
        if i % 4096 == 0 {
            inj.tracer.drain(|_| {});
        }
    }
    assert!(want.len() > COUNTER_CACHE, "more keys than cache slots");
    let got: BTreeMap<(u64, u16, u32), (u64, u64)> = inj
        .tracer
        .kernel_counters()
        .into_iter()
        .map(|(_, k, c)| ((k.dev, k.event_kind(), k.dir), (c.count, c.bytes)))
        .collect();
    assert_eq!(got, want);
    let stats = inj.tracer.self_stats();
    assert_eq!(
        stats.hits[kind::DMA_MAP as usize] + stats.hits[kind::DMA_UNMAP as usize],
        20_000
    );
}
