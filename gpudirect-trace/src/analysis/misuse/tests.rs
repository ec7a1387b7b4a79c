//! The checks on call sequences shaped like tests/vm/gdt-misuse's commands
//! (the VM scenario dma-misuse-module proves them on real kernels).

use std::sync::Arc;

use gpudirect_trace_common::dir;

use super::*;
use crate::model::misuse::ImageRange;

const DEV: &str = "0000:00:03.0";

fn call(op: Op, class: ApiClass, addr: u64, size: u64, d: u32) -> DmaCall {
    DmaCall {
        op,
        class,
        api: match (op, class) {
            (Op::Map, ApiClass::Single) => "dma_map_page",
            (Op::Unmap, ApiClass::Single) => "dma_unmap_page",
            (Op::Map, ApiClass::Resource) => "dma_map_resource",
            (Op::Unmap, ApiClass::Resource) => "dma_unmap_resource",
            (Op::Map, ApiClass::Coherent) => "dma_alloc_attrs",
            (Op::Unmap, ApiClass::Coherent) => "dma_free_attrs",
            (Op::Map, ApiClass::ScatterGather) => "dma_map_sg",
            (Op::Unmap, ApiClass::ScatterGather) => "dma_unmap_sg",
            (Op::Sync { for_cpu: true }, _) => "dma_sync_single_for_cpu",
            (Op::Sync { for_cpu: false }, _) => "dma_sync_single_for_device",
            _ => "x",
        },
        ts_ns: 0,
        pid: 42,
        tid: 42,
        addr,
        phys: (class == ApiClass::Single).then_some(0x10_0000 + (addr & 0xffff)),
        size,
        dir: d,
        attrs: 0,
        entries: (class == ApiClass::ScatterGather).then_some(4),
        stack: None,
    }
}

/// The two directions of a sync: for the CPU, for the device.
const SYNC_CPU: Op = Op::Sync { for_cpu: true };
const SYNC_DEVICE: Op = Op::Sync { for_cpu: false };

/// A call on one mapping (dma_map_page and its kin), the class most checks
/// are about.
fn single(op: Op, addr: u64, size: u64, d: u32) -> DmaCall {
    call(op, ApiClass::Single, addr, size, d)
}

/// A call on a scatterlist (dma_map_sg and its kin): four entries unless
/// the test says otherwise.
fn sg(op: Op, addr: u64, size: u64, d: u32) -> DmaCall {
    call(op, ApiClass::ScatterGather, addr, size, d)
}

/// A checker fed one device's calls 1 µs apart (tests_iova.rs adds its
/// own ways of feeding it).
pub(super) struct T {
    pub(super) c: Checker,
    pub(super) dev: Arc<str>,
    ts: u64,
}

impl T {
    /// The device bound to gdt-misuse, as in the VM scenario.
    fn new() -> Self {
        let mut t = Self::without_driver();
        t.c.set_driver(DEV, Some("gdt-misuse"));
        t
    }
    pub(super) fn without_driver() -> Self {
        Self {
            c: Checker::new(TraceClock::new(0, 0), Vec::new()),
            dev: Arc::from(DEV),
            ts: 0,
        }
    }
    /// The next call's time.
    pub(super) fn next_ts(&mut self) -> u64 {
        self.ts += 1000;
        self.ts
    }
    fn go(&mut self, mut call: DmaCall) {
        call.ts_ns = self.next_ts();
        self.c.call(call, &self.dev);
    }
    fn map(&mut self, addr: u64, size: u64, d: u32) {
        self.go(single(Op::Map, addr, size, d));
    }
    fn unmap(&mut self, addr: u64, size: u64, d: u32) {
        self.go(single(Op::Unmap, addr, size, d));
    }
    pub(super) fn checks(&mut self) -> Vec<Check> {
        self.c.confirm(0).iter().map(|m| m.check).collect()
    }
}

#[test]
fn correct_use_gives_nothing() {
    let mut t = T::new();
    t.map(0xa000, 64, dir::TO_DEVICE);
    t.go(single(SYNC_CPU, 0xa000, 64, dir::TO_DEVICE));
    t.go(single(SYNC_DEVICE, 0xa000, 64, dir::TO_DEVICE));
    t.unmap(0xa000, 64, dir::TO_DEVICE);
    t.map(0xb000, 256, dir::BIDIRECTIONAL);
    t.go(single(SYNC_CPU, 0xb080, 128, dir::FROM_DEVICE));
    t.unmap(0xb000, 256, dir::BIDIRECTIONAL);
    t.go(sg(Op::Map, 0xc000, 16384, dir::FROM_DEVICE));
    t.go(sg(Op::Unmap, 0xc000, 16384, dir::FROM_DEVICE));
    t.go(call(
        Op::Map,
        ApiClass::Coherent,
        0xd000,
        4096,
        dir::BIDIRECTIONAL,
    ));
    t.go(call(
        Op::Unmap,
        ApiClass::Coherent,
        0xd000,
        4096,
        dir::FROM_DEVICE,
    ));
    // A handle reused after its unmap is a new mapping.
    t.map(0xa000, 64, dir::TO_DEVICE);
    t.unmap(0xa000, 64, dir::TO_DEVICE);
    assert_eq!(t.checks(), []);
    assert_eq!(t.c.stats.total(), 0);
}

#[test]
fn unmaps_of_handles_never_seen_are_unknown_never_findings() {
    let mut t = T::new();
    t.unmap(0xa000, 64, dir::TO_DEVICE);
    t.go(single(SYNC_CPU, 0xe000, 64, dir::TO_DEVICE));
    assert_eq!(t.checks(), []);
    assert_eq!((t.c.stats.unknown_unmaps, t.c.stats.unknown_syncs), (1, 1));
}

#[test]
fn double_unmap_is_reported_once_with_both_calls() {
    let mut t = T::new();
    t.map(0xa000, 64, dir::TO_DEVICE);
    t.unmap(0xa000, 64, dir::TO_DEVICE);
    t.unmap(0xa000, 64, dir::TO_DEVICE);
    let f = t.c.confirm(0);
    assert_eq!(f.len(), 1);
    let m = &f[0];
    assert_eq!(m.check, Check::DoubleUnmap);
    assert_eq!(m.driver.as_deref(), Some("gdt-misuse"));
    assert_eq!(m.map.as_ref().map(|c| c.api.as_str()), Some("dma_map_page"));
    assert_eq!(m.call.at.mono_ns, 3000);
    assert!(m
        .text()
        .contains("device driver tries to free DMA memory it has not allocated"));
    assert!(
        m.detail.contains("already unmapped by dma_unmap_page"),
        "{}",
        m.detail
    );
    assert_eq!(t.c.stats.findings[DEV][&Check::DoubleUnmap], 1);
}

#[test]
fn unmap_mismatches_each_name_their_check() {
    let mut t = T::new();
    t.map(0xa000, 256, dir::TO_DEVICE);
    t.unmap(0xa000, 128, dir::TO_DEVICE);
    assert_eq!(t.checks(), [Check::UnmapSize]);
    t.map(0xa000, 256, dir::TO_DEVICE);
    t.unmap(0xa000, 256, dir::FROM_DEVICE);
    assert_eq!(t.checks(), [Check::UnmapDirection]);
    t.go(call(
        Op::Map,
        ApiClass::Resource,
        0xf000,
        4096,
        dir::BIDIRECTIONAL,
    ));
    t.unmap(0xf000, 4096, dir::BIDIRECTIONAL);
    assert_eq!(t.checks(), [Check::UnmapClass]);
    t.map(0x1_0000, 4096, dir::BIDIRECTIONAL);
    t.go(call(
        Op::Unmap,
        ApiClass::Coherent,
        0x1_0000,
        4096,
        dir::BIDIRECTIONAL,
    ));
    assert_eq!(t.checks(), [Check::UnmapClass]);
    let mut unmap = sg(Op::Unmap, 0x2_0000, 16384, dir::FROM_DEVICE);
    t.go(sg(Op::Map, 0x2_0000, 16384, dir::FROM_DEVICE));
    unmap.entries = Some(5);
    t.go(unmap);
    assert_eq!(t.checks(), [Check::SgUnmapCount]);
}

#[test]
fn sync_checks() {
    let mut t = T::new();
    // After unmap.
    t.map(0xa000, 256, dir::FROM_DEVICE);
    t.unmap(0xa000, 256, dir::FROM_DEVICE);
    t.go(single(SYNC_CPU, 0xa000, 256, dir::FROM_DEVICE));
    assert_eq!(t.checks(), [Check::SyncUnmapped]);
    // Outside: 128 bytes in, 256 long, of a 256-byte mapping.
    t.map(0xb000, 256, dir::FROM_DEVICE);
    t.go(single(SYNC_CPU, 0xb080, 256, dir::FROM_DEVICE));
    let f = t.c.confirm(0);
    assert_eq!(
        f.iter().map(|m| m.check).collect::<Vec<_>>(),
        [Check::SyncOutside]
    );
    assert!(
        f[0].detail.contains("[sync offset+size=384]"),
        "{}",
        f[0].detail
    );
    // For the CPU, of a TO_DEVICE mapping, as FROM_DEVICE: one finding.
    t.map(0xc000, 64, dir::TO_DEVICE);
    t.go(single(SYNC_CPU, 0xc000, 64, dir::FROM_DEVICE));
    let f = t.c.confirm(0);
    assert_eq!(
        f.iter().map(|m| m.check).collect::<Vec<_>>(),
        [Check::SyncDirection]
    );
    assert!(f[0].detail.contains("read-only"), "{}", f[0].detail);
    // sg: count and after-unmap.
    t.go(sg(Op::Map, 0xd000, 16384, dir::FROM_DEVICE));
    let mut s = sg(SYNC_CPU, 0xd000, 16384, dir::FROM_DEVICE);
    s.entries = Some(5);
    t.go(s.clone());
    assert_eq!(t.checks(), [Check::SyncSgCount]);
    t.go(sg(Op::Unmap, 0xd000, 16384, dir::FROM_DEVICE));
    s.entries = Some(4);
    t.go(s);
    assert_eq!(t.checks(), [Check::SyncUnmapped]);
}

#[test]
fn overlapping_cachelines_of_device_writable_mappings() {
    let mut t = T::new();
    // The same page mapped twice FROM_DEVICE, 32 bytes apart: one line.
    let mut a = single(Op::Map, 0xa000, 64, dir::FROM_DEVICE);
    a.phys = Some(0x10_0000);
    let mut b = single(Op::Map, 0xb000, 64, dir::FROM_DEVICE);
    b.phys = Some(0x10_0020);
    t.go(a.clone());
    t.go(b.clone());
    let f = t.c.confirm(0);
    assert_eq!(
        f.iter().map(|m| m.check).collect::<Vec<_>>(),
        [Check::CachelineOverlap]
    );
    assert_eq!(f[0].map.as_ref().and_then(|c| c.address), Some(0xa000));
    // 512 bytes into a page mapping: a later cacheline (dma-debug's first-
    // line check misses it).
    let mut p = single(Op::Map, 0xc000, 4096, dir::BIDIRECTIONAL);
    p.phys = Some(0x20_0000);
    let mut q = single(Op::Map, 0xd000, 64, dir::FROM_DEVICE);
    q.phys = Some(0x20_0200);
    t.go(p);
    t.go(q.clone());
    assert_eq!(t.checks(), [Check::CachelineOverlap]);
    // Exempt: SKIP_CPU_SYNC, and TO_DEVICE on either side.
    let mut r = q.clone();
    r.addr = 0xe000;
    r.attrs = DMA_ATTR_SKIP_CPU_SYNC;
    t.go(r);
    let mut to = q.clone();
    to.addr = 0xf000;
    to.dir = dir::TO_DEVICE;
    t.go(to);
    assert_eq!(t.checks(), []);
    // After the unmaps the lines are free again.
    t.unmap(0xa000, 64, dir::FROM_DEVICE);
    t.unmap(0xb000, 64, dir::FROM_DEVICE);
    let mut again = single(Op::Map, 0x1_a000, 64, dir::FROM_DEVICE);
    again.phys = Some(0x10_0000);
    t.go(again);
    assert_eq!(t.checks(), []);
}

#[test]
fn leaks_at_unbind_are_one_finding_with_their_count() {
    let mut t = T::new();
    t.map(0xa000, 4096, dir::TO_DEVICE);
    t.go(call(
        Op::Map,
        ApiClass::Coherent,
        0xb000,
        8192,
        dir::BIDIRECTIONAL,
    ));
    t.map(0xc000, 64, dir::TO_DEVICE);
    t.unmap(0xc000, 64, dir::TO_DEVICE);
    let dev = t.dev.clone();
    t.c.unbind(&dev, 10_000);
    let f = t.c.confirm(0);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].check, Check::LeakAtUnbind);
    assert_eq!(f[0].count, 2);
    assert!(
        f[0].detail.starts_with("[count=2] [bytes=12288]"),
        "{}",
        f[0].detail
    );
    // Released after the unbind: no finding for those unmaps.
    t.unmap(0xa000, 4096, dir::TO_DEVICE);
    t.go(call(
        Op::Unmap,
        ApiClass::Coherent,
        0xb000,
        8192,
        dir::BIDIRECTIONAL,
    ));
    assert_eq!(t.checks(), []);
}

#[test]
fn reordered_unmap_and_remap_of_one_handle_is_no_finding() {
    // CPU A unmaps 0xa000 and CPU B maps it again; B's map event reaches
    // the ring first (both tracepoints fire after the work is done).
    let mut t = T::new();
    t.map(0xa000, 64, dir::TO_DEVICE);
    t.map(0xa000, 128, dir::FROM_DEVICE);
    t.unmap(0xa000, 64, dir::TO_DEVICE);
    t.unmap(0xa000, 128, dir::FROM_DEVICE);
    assert_eq!(t.checks(), []);
}

#[test]
fn a_loss_drops_unproven_findings_and_forgets_what_it_knew() {
    let mut t = T::new();
    t.map(0xa000, 64, dir::TO_DEVICE);
    t.unmap(0xa000, 64, dir::TO_DEVICE);
    t.unmap(0xa000, 64, dir::TO_DEVICE);
    assert!(t.c.confirm(3).is_empty(), "3 events lost: not proven");
    assert_eq!((t.c.stats.unproven, t.c.stats.resets), (1, 1));
    // After the loss the handle is unknown again.
    t.unmap(0xa000, 64, dir::TO_DEVICE);
    assert!(t.c.confirm(3).is_empty());
    assert_eq!(t.c.stats.unknown_unmaps, 1);
    assert_eq!(t.c.stats.total(), 0);
}

#[test]
fn kernel_image_maps_and_map_failures() {
    let iomem = "00000000-00000fff : Reserved\n\
                 100000000-1ffffffff : System RAM\n  \
                 1a2000000-1a2e01797 : Kernel code\n  \
                 1a3000000-1a335bfff : Kernel rodata\n  \
                 1a3400000-1a36fffff : Kernel data\n";
    let image = kernel_image(iomem);
    assert_eq!(
        image,
        [
            ImageRange {
                name: "Kernel code".into(),
                start: 0x1_a200_0000,
                end: 0x1_a2e0_1797
            },
            ImageRange {
                name: "Kernel rodata".into(),
                start: 0x1_a300_0000,
                end: 0x1_a335_bfff
            },
        ]
    );
    assert!(
        kernel_image("00000000-00000000 : Kernel code\n").is_empty(),
        "unprivileged view"
    );
    let mut t = T::new();
    t.c = Checker::new(TraceClock::new(0, 0), image);
    let mut m = single(Op::Map, 0xa000, 64, dir::TO_DEVICE);
    m.phys = Some(0x1_a300_1000);
    t.go(m);
    let f = t.c.confirm(0);
    assert_eq!(
        f.iter().map(|m| m.check).collect::<Vec<_>>(),
        [Check::KernelImage]
    );
    assert!(f[0].detail.contains("[in Kernel rodata]"));
    t.go(single(Op::MapFailed, DMA_MAPPING_ERROR, 64, dir::TO_DEVICE));
    t.go(single(Op::MapFailed, DMA_MAPPING_ERROR, 64, dir::TO_DEVICE));
    assert_eq!(t.checks(), []);
    let failures = &t.c.stats.map_failures[DEV];
    assert_eq!(failures.iter().map(|r| r.count).sum::<u64>(), 2);
    assert_eq!(failures.len(), 1, "one caller");
}
