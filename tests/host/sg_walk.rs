//! The scatterlist walk of the REAL dma_map_sg / dma_unmap_sg programs over
//! real `struct scatterlist` chains in kernel memory.
//!
//! Userspace memory cannot stand in for a kernel scatterlist (the programs
//! read with bpf_probe_read_kernel, which refuses user addresses), so the
//! lists live in the values of a BPF array map: contiguous kernel memory
//! that userspace fills with BPF_MAP_UPDATE_ELEM. A test-only program of a
//! separate object (gpudirect-trace-ebpf/src/test_support.rs, never part of
//! the tool) reveals its kernel address. Entries are laid out at the
//! running kernel's BTF offsets (page_link, length, dma_address, stride),
//! arrays end in chain entries pointing at the next array (placed apart,
//! with junk between, so only a walk that follows chains is right), and the
//! last data entry carries the end mark in the middle of a page, followed
//! by junk that a walk past the mark would count.

use std::{os::fd::AsFd as _, time::Instant};

use aya::{
    maps::{Array, MapData},
    Ebpf,
};
use gpudirect_trace::{
    decode::{decode, Record},
    ebpf::{testrun::run_raw_tracepoint, Tracer, TracerOptions},
};
use gpudirect_trace_common::{flags, kind, KernelOffsets, SgEvent, SG_LENS};

use crate::{inject::Injector, test_support};

/// test_support.rs: bytes per arena element, elements.
const ELEM: usize = 32;
const ELEMS: usize = 131_072;

const SG_CHAIN: u64 = 1;
const SG_END: u64 = 2;

/// The arena: a kernel address and the image written into it.
pub struct Arena {
    _obj: Ebpf,
    map: Array<MapData, [u8; ELEM]>,
    base: u64,
    image: Vec<u8>,
    off: KernelOffsets,
}

impl Arena {
    pub fn new(off: KernelOffsets) -> Self {
        let mut obj = test_support::load(&["arena_addr"]);
        let fd = test_support::program(&obj, "arena_addr").fd().expect("fd");
        let ret = run_raw_tracepoint(fd.as_fd(), &[0], None).expect("test run arena_addr");
        assert_eq!(ret, 0, "arena_addr found its maps");
        let addr: Array<MapData, u64> =
            Array::try_from(obj.take_map("ARENA_ADDR").expect("ARENA_ADDR")).expect("array");
        let base = addr.get(&0, 0).expect("arena address");
        assert!(base >= 0xffff_8000_0000_0000, "a kernel address: {base:#x}");
        let map = Array::try_from(obj.take_map("SG_ARENA").expect("SG_ARENA")).expect("array");
        Self {
            _obj: obj,
            map,
            base,
            image: vec![0; ELEM * ELEMS],
            off,
        }
    }

    fn stride(&self) -> usize {
        self.off.sg_stride as usize
    }

    fn addr(&self, slot: usize) -> u64 {
        self.base + (slot * self.stride()) as u64
    }

    fn put(&mut self, slot: usize, page_link: u64, length: u32, dma: u64) {
        let at = slot * self.stride();
        let o = |f: u32| at + f as usize;
        self.image[o(self.off.sg_page_link)..o(self.off.sg_page_link) + 8]
            .copy_from_slice(&page_link.to_ne_bytes());
        self.image[o(self.off.sg_length)..o(self.off.sg_length) + 4]
            .copy_from_slice(&length.to_ne_bytes());
        self.image[o(self.off.sg_dma_address)..o(self.off.sg_dma_address) + 8]
            .copy_from_slice(&dma.to_ne_bytes());
    }

    /// Writes the image's first `slots` entries into the map.
    fn flush(&mut self, slots: usize) {
        let bytes = slots * self.stride();
        for (i, chunk) in self.image[..bytes.div_ceil(ELEM) * ELEM]
            .chunks(ELEM)
            .enumerate()
        {
            let v: [u8; ELEM] = chunk.try_into().expect("element");
            self.map.set(i as u32, v, 0).expect("write the arena");
        }
    }

    /// Lays out `lens` as a chained scatterlist: arrays of `per_array`
    /// entries (the last one a chain entry), `gap` junk entries between
    /// arrays, the end mark on the last data entry and junk after it.
    /// Returns the list's address and the end mark's slot.
    pub fn chained(&mut self, lens: &[u32], per_array: usize, gap: usize) -> (u64, usize) {
        assert!(per_array >= 2);
        let junk = |arena: &mut Arena, slot| arena.put(slot, 0x4000, 0x7777_0000, 0);
        let mut slot = 0;
        let mut i = 0;
        loop {
            for k in 0..per_array {
                let last_data = i == lens.len() - 1;
                if k == per_array - 1 && !last_data {
                    // Chain to the next array, `gap` junk entries further.
                    for g in 1..=gap {
                        junk(self, slot + g);
                    }
                    let next = self.addr(slot + 1 + gap);
                    self.put(slot, next | SG_CHAIN, 0, 0);
                    slot += 1 + gap;
                    break;
                }
                // A struct page pointer (low bits clear) and the length.
                let page = 0xffff_ea00_0000_0000 + (i as u64) * 64;
                let end = if last_data { SG_END } else { 0 };
                self.put(slot, page | end, lens[i], 0x1_0000_0000 + i as u64 * 0x1000);
                slot += 1;
                i += 1;
                if last_data {
                    // Junk past the end mark, up to the array's end.
                    let after = (per_array - 1 - k).max(4);
                    for j in 0..after {
                        junk(self, slot + j);
                    }
                    self.flush(slot + after);
                    return (self.addr(0), slot - 1);
                }
            }
        }
    }
}

/// The record a run of `program` streamed.
fn one_sg_record(inj: &mut Injector) -> SgEvent {
    let mut out = Vec::new();
    inj.tracer
        .drain(|b| out.push(decode(b).expect("decodable record")));
    let sgs: Vec<SgEvent> = out
        .iter()
        .filter_map(|r| match r {
            Record::Sg(s) => Some(*s),
            _ => None,
        })
        .collect();
    assert_eq!(sgs.len(), 1, "one sg record, got {out:?}");
    for r in &out {
        let dev = inj.tracer.device_name(r.event().dev);
        inj.analysis.agg.ingest(r, &dev);
    }
    sgs[0]
}

pub(crate) fn lengths(n: usize) -> Vec<u32> {
    (0..n).map(|i| 512 * (1 + (i as u32 * 7) % 23)).collect()
}

/// An injector whose dma_map_sg walk stops after `walk_max` entries, the
/// stand-in device it maps for, and an arena for its scatterlists.
fn walk_setup(walk_max: u32) -> (Injector, u64, Arena) {
    let inj = Injector::new(tracer(walk_max));
    let dev = inj.device.addr;
    let arena = Arena::new(inj.tracer.offsets);
    (inj, dev, arena)
}

fn tracer(walk_max: u32) -> Tracer {
    Tracer::load(&TracerOptions {
        attach: false,
        ring_bytes: 1 << 20,
        sg_walk_max: walk_max,
        ..Default::default()
    })
    .expect("load the eBPF object")
}

#[test]
fn a_long_chained_list_is_walked_to_its_end_mark() {
    crate::require_root();
    let (mut inj, dev, mut arena) = walk_setup(1 << 22);
    // 5000 entries in arrays of 128 (SG_MAX_SINGLE_ALLOC on 4 KiB pages),
    // 39 chain entries; the end mark must not sit on a page boundary.
    let mut n = 5000;
    let sgl = loop {
        let (sgl, end) = arena.chained(&lengths(n), 128, 3);
        let in_page = arena.addr(end) % 4096;
        if in_page != 0 && in_page + u64::from(arena.off.sg_stride) != 4096 {
            eprintln!("{n} entries, end mark at page offset {in_page}");
            break sgl;
        }
        n += 1;
    };
    let lens = lengths(n);
    let total: u64 = lens.iter().map(|&l| u64::from(l)).sum();
    // nents exact, past the end mark (the mark ends the walk), and a prefix
    // (a driver mapping the first 1000 entries: nents ends it, not cut).
    for (nents, want) in [
        (n as u64, total),
        (n as u64 + 100, total),
        (1000, lens[..1000].iter().map(|&l| u64::from(l)).sum()),
    ] {
        inj.run("dma_map_sg", &[dev, sgl, nents, nents, 2, 0]);
        let ev = one_sg_record(&mut inj);
        assert_eq!(ev.event.kind, kind::DMA_MAP_SG);
        assert_eq!(ev.event.flags & flags::SG_TRUNCATED, 0, "nents {nents}");
        assert_eq!(ev.event.size, want, "bytes of {nents} entries");
        assert_eq!(ev.event.addr, 0x1_0000_0000, "first entry's DMA address");
        assert_eq!(ev.n_lens as usize, SG_LENS);
        assert_eq!(&ev.lens[..], &lens[..SG_LENS]);
        inj.run("dma_unmap_sg", &[dev, sgl, nents, 2, 0]);
        let un = one_sg_record(&mut inj);
        assert_eq!((un.event.kind, un.event.size), (kind::DMA_UNMAP_SG, want));
    }
    let d = inj.device_row();
    assert_eq!((d.maps, d.unmaps, d.sg_truncated), (3, 3, 0));
    assert_eq!(d.bytes_mapped, d.bytes_unmapped);
    assert_eq!(d.outstanding_bytes, 0);
    assert_eq!(d.dma_source, "tracepoints");
}

/// The record's first lengths, whatever part of the walk found them (the
/// inline steps or the batched loop) and however the list is chained:
/// short lists, and chains inside the first `SG_LENS` entries (NVMe's
/// two inline entries then a chain; one data entry per array). Chain
/// entries may leave a 0, which userspace skips; the rest must be the
/// list's first lengths, in order, all of them up to `SG_LENS`.
#[test]
fn the_first_lengths_are_kept_for_short_and_early_chained_lists() {
    crate::require_root();
    let (mut inj, dev, mut arena) = walk_setup(1 << 22);
    for (n, per_array) in [
        (1, 128),
        (2, 128),
        (3, 128),
        (9, 128),
        (16, 128),
        (17, 128),
        (40, 3),
        (40, 2),
    ] {
        let lens = lengths(n);
        let (sgl, _) = arena.chained(&lens, per_array, 1);
        inj.run("dma_map_sg", &[dev, sgl, n as u64, n as u64, 1, 0]);
        let ev = one_sg_record(&mut inj);
        let what = format!("{n} entries, {per_array} a array");
        assert_eq!(ev.event.flags & flags::SG_TRUNCATED, 0, "{what}");
        let total: u64 = lens.iter().map(|&l| u64::from(l)).sum();
        assert_eq!(ev.event.size, total, "{what}");
        let kept: Vec<u32> = ev.lens[..ev.n_lens as usize]
            .iter()
            .copied()
            .filter(|&l| l != 0)
            .collect();
        let want = n.min(SG_LENS);
        assert!(kept.len() >= want.min(SG_LENS - 2), "{what}: kept {kept:?}");
        assert_eq!(&kept[..], &lens[..kept.len()], "{what}");
    }
}

#[test]
fn a_list_of_chain_entries_every_other_slot_is_walked_whole() {
    crate::require_root();
    let (mut inj, dev, mut arena) = walk_setup(1 << 22);
    // The worst case for the iteration budget: one data entry per array.
    let lens = lengths(3000);
    let (sgl, _) = arena.chained(&lens, 2, 1);
    inj.run("dma_map_sg", &[dev, sgl, 3000, 3000, 1, 0]);
    let ev = one_sg_record(&mut inj);
    assert_eq!(ev.event.flags & flags::SG_TRUNCATED, 0);
    assert_eq!(
        ev.event.size,
        lens.iter().map(|&l| u64::from(l)).sum::<u64>()
    );
}

#[test]
fn a_walk_cut_by_the_bound_is_counted_truncated_on_both_sides() {
    crate::require_root();
    let (mut inj, dev, mut arena) = walk_setup(1000);
    let lens = lengths(5000);
    let (sgl, _) = arena.chained(&lens, 128, 0);
    let walked: u64 = lens[..1000].iter().map(|&l| u64::from(l)).sum();
    inj.run("dma_map_sg", &[dev, sgl, 5000, 5000, 2, 0]);
    let ev = one_sg_record(&mut inj);
    assert_ne!(ev.event.flags & flags::SG_TRUNCATED, 0, "marked truncated");
    assert_eq!(ev.event.size, walked, "the walked part, a lower bound");
    inj.run("dma_unmap_sg", &[dev, sgl, 5000, 2, 0]);
    let un = one_sg_record(&mut inj);
    assert_ne!(un.event.flags & flags::SG_TRUNCATED, 0);
    assert_eq!(un.event.size, walked, "the unmap agrees with its map");
    let d = inj.device_row();
    // Counted per device (from the kernel's counters), and no drift.
    assert_eq!((d.sg_truncated, d.sg_unmap_truncated), (1, 1));
    assert_eq!((d.bytes_mapped, d.bytes_unmapped), (walked, walked));
    assert_eq!(d.outstanding_bytes, 0);
}

#[test]
fn a_100k_entry_list_is_exact_and_its_walk_cost_bounded() {
    crate::require_root();
    let (mut inj, dev, mut arena) = walk_setup(1 << 22);
    let n = 100_000;
    let lens = lengths(n);
    let total: u64 = lens.iter().map(|&l| u64::from(l)).sum();
    let (sgl, _) = arena.chained(&lens, 128, 0);
    let fd = inj.tracer.program_fd("dma_map_sg").expect("dma_map_sg");
    let runs = 20;
    let mut best = f64::MAX;
    for _ in 0..runs {
        let t = Instant::now();
        run_raw_tracepoint(fd, &[dev, sgl, n as u64, n as u64, 2, 0], None).expect("test run");
        best = best.min(t.elapsed().as_secs_f64());
    }
    let mut sizes = Vec::new();
    inj.tracer.drain(|b| {
        if let Ok(Record::Sg(s)) = decode(b) {
            sizes.push((s.event.size, s.event.flags & flags::SG_TRUNCATED));
        }
    });
    assert_eq!(sizes.len(), runs);
    assert!(
        sizes.iter().all(|&s| s == (total, 0)),
        "{sizes:?} vs {total}"
    );
    let ns_per_entry = best * 1e9 / n as f64;
    println!(
        "BENCH sg_walk entries={n} chain_every=128 best_of={runs} ms_per_map={:.2} ns_per_entry={ns_per_entry:.1}",
        best * 1e3
    );
}

/// An injector whose dma_map_sg program walks with the bounded loop of
/// kernels without bpf_loop() (`continued`: and its tail-called chunks).
fn bounded_walk_injector(continued: bool) -> Injector {
    let mut inj = Injector::new(tracer(1 << 22));
    inj.tracer
        .load_bounded_walk(continued)
        .expect("the bounded walk (and its continuation) passes this kernel's verifier");
    inj
}

/// One dma_map_sg of the `n`-entry list at `sgl` through the bounded walk:
/// its record, and the seconds the program took.
fn bounded_map(inj: &mut Injector, sgl: u64, n: usize) -> (SgEvent, f64) {
    let fd = inj.tracer.program_fd("bench_sg_bounded").expect("program");
    let dev = inj.device.addr;
    let t = Instant::now();
    run_raw_tracepoint(fd, &[dev, sgl, n as u64, n as u64, 2, 0], None).expect("test run");
    let secs = t.elapsed().as_secs_f64();
    (one_sg_record(inj), secs)
}

/// The walk of the programs for kernels without bpf_loop() (5.10 to 5.16):
/// exact up to its bound (SG_PREFIX + SG_BOUNDED_REST steps, chain entries
/// included), counted as truncated beyond; and what an entry costs there.
#[test]
fn the_bounded_walk_is_exact_to_its_bound_and_counts_the_rest() {
    use gpudirect_trace_common::{SG_BOUNDED_REST, SG_PREFIX};
    crate::require_root();
    let mut inj = bounded_walk_injector(false);
    let mut arena = Arena::new(inj.tracer.offsets);
    let steps = (SG_PREFIX + SG_BOUNDED_REST) as usize;
    // Arrays of 128: every 128th step is a chain entry.
    let fits = steps - steps / 128 - 1;
    for (n, whole) in [(fits, true), (fits + 500, false)] {
        let lens = lengths(n);
        let (sgl, _) = arena.chained(&lens, 128, 0);
        let (ev, secs) = bounded_map(&mut inj, sgl, n);
        let total: u64 = lens.iter().map(|&l| u64::from(l)).sum();
        if whole {
            assert_eq!(ev.event.flags & flags::SG_TRUNCATED, 0, "{n} entries fit");
            assert_eq!(ev.event.size, total);
            println!(
                "BENCH sg_walk_bounded entries={n} us_per_map={:.1} ns_per_entry={:.1}",
                secs * 1e6,
                secs * 1e9 / n as f64
            );
        } else {
            assert_ne!(
                ev.event.flags & flags::SG_TRUNCATED,
                0,
                "{n} entries do not"
            );
            assert!(ev.event.size < total && ev.event.size > 0);
        }
    }
}

/// The bounded walk continued in tail-called chunks (what the hooks do on
/// kernels without bpf_loop()): a 100,000-entry list is exact; the reach is
/// SG_PREFIX + SG_BOUNDED_REST * (1 + SG_TAIL_CALLS) steps.
#[test]
fn the_bounded_walk_continues_in_tail_calls_to_100k_entries() {
    use gpudirect_trace_common::{SG_BOUNDED_REST, SG_PREFIX, SG_TAIL_CALLS};
    crate::require_root();
    let mut inj = bounded_walk_injector(true);
    let mut arena = Arena::new(inj.tracer.offsets);
    let n = 100_000;
    assert!(n < (SG_PREFIX + SG_BOUNDED_REST * (1 + SG_TAIL_CALLS)) as usize);
    let lens = lengths(n);
    let total: u64 = lens.iter().map(|&l| u64::from(l)).sum();
    let (sgl, _) = arena.chained(&lens, 128, 0);
    let (ev, secs) = bounded_map(&mut inj, sgl, n);
    assert_eq!(ev.event.flags & flags::SG_TRUNCATED, 0, "walked to the end");
    assert_eq!(ev.event.size, total, "exact over {} chunks", n / 5000 + 1);
    println!(
        "BENCH sg_walk_tailcalls entries={n} ms_per_map={:.2} ns_per_entry={:.1}",
        secs * 1e3,
        secs * 1e9 / n as f64
    );
}
