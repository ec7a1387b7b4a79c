//! The IOVA API's rules (iova.rs) on record sequences shaped like the
//! hooks' records: NVMe's clean use, and each kind of misuse once (the VM
//! scenario dma-misuse-module makes them with real dma_iova_* calls).

use gpudirect_trace_common::{dir, flags, kind, Event};

use super::tests::T;
use crate::{decode::Record, model::misuse::Check};

const F: u16 = flags::IOVA | flags::FROM_HOOK;
const BASE: u64 = 0xffe0_0000;
const STATE: u64 = 0xffff_8880_1234_5678;

/// The IOVA hooks' records (tests.rs's checker, without a driver).
impl T {
    fn event(&mut self, k: u16, f: u16, addr: u64, size: u64, phys: u64, aux: u64) {
        let ev = Event {
            kind: k,
            flags: f,
            addr,
            size,
            phys,
            aux,
            dir: dir::FROM_DEVICE,
            ts_ns: self.next_ts(),
            pid: 7,
            tid: 7,
            ..Default::default()
        };
        self.c.record(&Record::Event(ev), &self.dev);
    }

    fn alloc(&mut self, base: u64, size: u64) {
        self.event(kind::IOVA_ALLOC, F, base, size, 0, STATE & 0xffff_ffff);
    }
    fn link(&mut self, addr: u64, size: u64, f: u16) {
        self.event(kind::DMA_MAP, F | f, addr, size, 0x4000_0000, 0);
    }
    fn unlink(&mut self, addr: u64, size: u64, f: u16) {
        self.event(kind::DMA_UNMAP, F | f, addr, size, 0, 0);
    }
    fn sync(&mut self, addr: u64, size: u64, f: u16) {
        self.event(kind::IOVA_SYNC, F | f, addr, size, 0, 0);
    }
    fn destroy(&mut self, base: u64, len: u64, links: u64, size: u64) {
        let d = F | flags::IOVA_DESTROY;
        self.event(kind::DMA_UNMAP, d, base, len, links, 0);
        self.event(kind::IOVA_FREE, d, base, size, 0, STATE & 0xffff_ffff);
    }
    fn free(&mut self, base: u64, size: u64, links: u64) {
        self.event(kind::IOVA_FREE, F, base, size, links, STATE & 0xffff_ffff);
    }
}

#[test]
fn nvme_reads_through_the_iova_api_give_nothing() {
    let mut t = T::without_driver();
    for r in 0..64u64 {
        let base = BASE - r * 0x2_0000;
        t.alloc(base, 128 << 10);
        for i in 0..32 {
            t.link(base + i * 4096, 4096, 0);
        }
        t.sync(base, 128 << 10, 0);
        t.destroy(base, 128 << 10, 32, 128 << 10);
    }
    // ODP-style: link and unlink page by page, then free.
    t.alloc(BASE, 16 << 10);
    for i in 0..4 {
        t.link(BASE + i * 4096, 4096, 0);
        t.sync(BASE + i * 4096, 4096, 0);
    }
    t.unlink(BASE, 8192, 0);
    t.unlink(BASE + 8192, 8192, 0);
    t.free(BASE, 16 << 10, 0);
    assert_eq!(t.checks(), Vec::<Check>::new());
    assert_eq!(t.c.stats.unknown_unmaps, 0);
}

#[test]
fn each_rule_of_the_iova_api_is_its_own_finding() {
    let mut t = T::without_driver();
    // A link past the allocation's end (the hook's own range check).
    t.alloc(BASE, 8192);
    t.link(BASE + 8192, 4096, flags::IOVA_OUT_OF_RANGE);
    assert_eq!(t.checks(), [Check::IovaOutside]);
    t.unlink(BASE + 8192, 4096, flags::IOVA_OUT_OF_RANGE);
    assert_eq!(t.checks(), [Check::IovaOutside]);
    // An unlink of what was never linked, inside the allocation.
    t.link(BASE, 4096, 0);
    t.unlink(BASE + 4096, 4096, 0);
    assert_eq!(t.checks(), [Check::IovaUnlinkUnlinked]);
    // A sync of unlinked space.
    t.sync(BASE, 8192, 0);
    assert_eq!(t.checks(), [Check::IovaSyncUnlinked]);
    // A free with a link left.
    t.free(BASE, 8192, 1);
    let found = t.c.confirm(0);
    assert_eq!(
        found.iter().map(|m| m.check).collect::<Vec<_>>(),
        [Check::IovaFreeLinked]
    );
    assert!(
        found[0]
            .text()
            .contains("frees IOVA space that is still linked"),
        "{}",
        found[0].text()
    );
    assert_eq!(found[0].call.api, "dma_iova_free");
    // The same state freed again.
    t.free(BASE, 8192, 0);
    assert_eq!(t.checks(), [Check::IovaDoubleFree]);
    // A destroy whose mapped_len leaves a link behind.
    t.alloc(BASE, 16384);
    t.link(BASE, 8192, 0);
    t.link(BASE + 8192, 8192, 0);
    t.destroy(BASE, 8192, 2, 16384);
    assert_eq!(t.checks(), [Check::IovaFreeLinked]);
}

#[test]
fn iova_space_allocated_before_tracing_is_unknown_not_a_finding() {
    let mut t = T::without_driver();
    t.unlink(BASE, 4096, 0);
    t.sync(BASE, 4096, 0);
    t.free(BASE, 4096, 0);
    assert_eq!(t.checks(), Vec::<Check>::new());
    assert_eq!((t.c.stats.unknown_unmaps, t.c.stats.unknown_syncs), (1, 1));
}

#[test]
fn links_left_at_unbind_are_a_leak() {
    let mut t = T::without_driver();
    t.alloc(BASE, 8192);
    t.link(BASE, 8192, 0);
    let dev = t.dev.clone();
    t.c.unbind(&dev, 99_000);
    let found = t.c.confirm(0);
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].check, found[0].count), (Check::LeakAtUnbind, 1));
    assert_eq!(found[0].call.api, "dma_iova_link");
}
