//! The IOVA API's rules (dma_iova_*, 6.17+; include/linux/dma-mapping.h),
//! checked from the trace as dma-debug checks the older calls:
//! - a link, unlink or sync must stay inside the IOVA space
//!   dma_iova_try_alloc gave its state (the kernel does not check, and a
//!   link past the end maps over IOVA space that is not the state's);
//! - an unlink or sync must cover linked IOVA space only;
//! - dma_iova_free / dma_iova_destroy must not leave links behind (destroy
//!   unlinks `[0, mapped_len)`, which must be every link of the state);
//! - a state is freed once.
//!
//! As everywhere in the checker, only what the trace proves: a range in
//! IOVA space the trace never saw allocated or linked (allocated before
//! tracing) is unknown, never a finding. The kernel's own range check
//! (`flags::IOVA_OUT_OF_RANGE`, made against the state in the hook) needs
//! no history.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::Arc,
};

use gpudirect_trace_common::{aux_stack, flags, kind};

use super::{handles::SLOT_BYTES, Checker, DmaCall, Op};
use crate::{
    decode::Record,
    memory_budget::{self, Keeper},
    model::{
        misuse::{ApiClass, Check},
        task_of,
    },
};

/// Freed IOVA bases remembered per device, for double frees.
const FREED_KEPT: usize = 1 << 14;

/// An IOVA space the trace saw allocated.
#[derive(Clone, Debug)]
struct Alloc {
    size: u64,
    call: DmaCall,
}

/// One device's IOVA spaces, links and recent frees.
#[derive(Default)]
pub(super) struct DeviceIova {
    allocs: BTreeMap<u64, Alloc>,
    links: BTreeMap<u64, DmaCall>,
    freed: HashMap<u64, (u32, DmaCall)>,
    freed_order: VecDeque<u64>,
    /// What the entries were charged to the reader's memory budget.
    charged: usize,
}

impl Drop for DeviceIova {
    fn drop(&mut self) {
        memory_budget::give(Keeper::Handles, self.charged);
    }
}

impl DeviceIova {
    /// Whether one more entry fits the reader's memory budget (counted
    /// when not: the space, link or free is then not tracked).
    fn room(&mut self) -> bool {
        if !memory_budget::take_or_drop(Keeper::Handles, SLOT_BYTES) {
            return false;
        }
        self.charged += SLOT_BYTES;
        true
    }

    /// Gives back what entries no longer held were charged.
    fn settle(&mut self) {
        let held = (self.allocs.len() + self.links.len() + self.freed.len()) * SLOT_BYTES;
        if held < self.charged {
            memory_budget::give(Keeper::Handles, self.charged - held);
            self.charged = held;
        }
    }

    /// The allocation `addr` is in, if the trace saw it.
    fn alloc_of(&self, addr: u64) -> Option<(u64, &Alloc)> {
        let (&base, a) = self.allocs.range(..=addr).next_back()?;
        (addr < base.saturating_add(a.size.max(1))).then_some((base, a))
    }

    /// Bytes of `[addr, addr + size)` that live links cover.
    fn covered(&self, addr: u64, size: u64) -> u64 {
        let end = addr.saturating_add(size);
        let mut covered = 0u64;
        let first = self
            .links
            .range(..=addr)
            .next_back()
            .map_or(addr, |(&a, _)| a);
        for (&a, l) in self.links.range(first..end) {
            let lo = a.max(addr);
            let hi = a.saturating_add(l.size).min(end);
            covered = covered.saturating_add(hi.saturating_sub(lo));
        }
        covered
    }

    /// Ends the links starting in `[addr, addr + size)`.
    fn unlink(&mut self, addr: u64, size: u64) {
        let end = addr.saturating_add(size.max(1));
        let starts: Vec<u64> = self.links.range(addr..end).map(|(&a, _)| a).collect();
        for a in starts {
            self.links.remove(&a);
        }
    }

    fn links_in(&self, addr: u64, size: u64) -> Vec<&DmaCall> {
        let end = addr.saturating_add(size.max(1));
        self.links.range(addr..end).map(|(_, l)| l).collect()
    }

    fn remember_free(&mut self, base: u64, state: u32, call: DmaCall) {
        if self.freed_order.len() >= FREED_KEPT {
            if let Some(old) = self.freed_order.pop_front() {
                self.freed.remove(&old);
            }
        }
        if !self.freed.contains_key(&base) && !self.room() {
            return;
        }
        self.freed_order.push_back(base);
        self.freed.insert(base, (state, call));
    }

    /// Everything still linked (for a leak at unbind).
    pub(super) fn live_links(&self) -> impl Iterator<Item = &DmaCall> {
        self.links.values()
    }
}

/// The call a record of the IOVA API stands for, as findings show it.
fn call_of(r: &Record, stacks: bool) -> Option<(DmaCall, &'static str)> {
    let ev = r.event();
    let destroy = ev.flags & flags::IOVA_DESTROY != 0;
    let (op, api) = match ev.kind {
        kind::IOVA_ALLOC => (Op::Map, "dma_iova_try_alloc"),
        kind::DMA_MAP => (Op::Map, "dma_iova_link"),
        kind::DMA_MAP_ERR => (Op::MapFailed, "dma_iova_link"),
        kind::DMA_UNMAP if destroy => (Op::Unmap, "dma_iova_destroy"),
        kind::DMA_UNMAP => (Op::Unmap, "dma_iova_unlink"),
        kind::IOVA_SYNC => (Op::Sync { for_cpu: false }, "dma_iova_sync"),
        kind::IOVA_FREE if destroy => (Op::Unmap, "dma_iova_destroy"),
        kind::IOVA_FREE => (Op::Unmap, "dma_iova_free"),
        _ => return None,
    };
    let call = DmaCall {
        op,
        class: ApiClass::Iova,
        api,
        ts_ns: ev.ts_ns,
        pid: task_of(ev),
        tid: ev.tid,
        addr: ev.addr,
        phys: (ev.kind == kind::DMA_MAP).then_some(ev.phys),
        size: ev.size,
        dir: ev.dir,
        attrs: 0,
        entries: None,
        stack: if stacks { aux_stack(ev.aux) } else { None },
    };
    Some((call, api))
}

impl Checker {
    /// One record of the IOVA API (`flags::IOVA`).
    pub(super) fn iova_record(&mut self, r: &Record, device: &Arc<str>) {
        let Some((c, api)) = call_of(r, self.stacks) else {
            return;
        };
        let ev = *r.event();
        let outside = ev.flags & flags::IOVA_OUT_OF_RANGE != 0;
        let state = ev.aux as u32;
        match ev.kind {
            kind::IOVA_ALLOC => {
                let d = self.iova_dev(device);
                d.freed.remove(&c.addr);
                let a = Alloc {
                    size: c.size,
                    call: c.clone(),
                };
                if d.allocs.contains_key(&c.addr) || d.room() {
                    d.allocs.insert(c.addr, a);
                }
            }
            kind::DMA_MAP_ERR => self.iova_link_failed(device, c, api),
            kind::DMA_MAP => {
                let alloc = self
                    .iova_dev(device)
                    .alloc_of(c.addr)
                    .map(|(b, a)| (b, a.clone()));
                let past = alloc
                    .as_ref()
                    .is_some_and(|(b, a)| c.addr.saturating_add(c.size) > b.saturating_add(a.size));
                if outside || past {
                    let detail = self.iova_range_detail(&c, alloc.as_ref());
                    let map = alloc.map(|(_, a)| a.call);
                    self.report(Check::IovaOutside, device, map.as_ref(), &c, detail);
                }
                let d = self.iova_dev(device);
                if d.links.contains_key(&c.addr) || d.room() {
                    d.links.insert(c.addr, c);
                }
            }
            kind::DMA_UNMAP if ev.flags & flags::IOVA_DESTROY != 0 => {
                self.iova_destroy(device, c, ev.phys)
            }
            kind::DMA_UNMAP | kind::IOVA_SYNC => self.iova_range_call(device, c, outside),
            kind::IOVA_FREE => self.iova_free(device, c, ev.phys, state, ev.flags),
            _ => {}
        }
        if let Some(d) = self.iova.get_mut(device) {
            d.settle();
        }
    }

    fn iova_dev(&mut self, device: &Arc<str>) -> &mut DeviceIova {
        if !self.iova.contains_key(device) {
            self.iova.insert(device.clone(), DeviceIova::default());
        }
        self.iova.get_mut(device).expect("inserted above")
    }

    fn iova_link_failed(&mut self, device: &Arc<str>, c: DmaCall, api: &'static str) {
        self.map_failed(device, api, c.stack);
    }

    fn iova_range_detail(&self, c: &DmaCall, alloc: Option<&(u64, Alloc)>) -> String {
        match alloc {
            Some((base, a)) => format!(
                "[IOVA base={base:#x}] [allocated={} bytes] [{} offset={} size={} bytes]",
                a.size,
                c.api,
                c.addr.saturating_sub(*base),
                c.size
            ),
            None => format!(
                "[device address={:#018x}] [size={} bytes] [past the end of its IOVA state's \
                 allocation, per the state itself]",
                c.addr, c.size
            ),
        }
    }

    /// An unlink or sync: inside the allocation, and over linked space only.
    fn iova_range_call(&mut self, device: &Arc<str>, c: DmaCall, outside: bool) {
        let d = self.iova_dev(device);
        let alloc = d.alloc_of(c.addr).map(|(b, a)| (b, a.clone()));
        let covered = d.covered(c.addr, c.size);
        let unlink = matches!(c.op, Op::Unmap);
        if unlink {
            d.unlink(c.addr, c.size);
        }
        let (check, detail) = if outside {
            let check = if unlink {
                Check::IovaOutside
            } else {
                Check::IovaSyncUnlinked
            };
            (check, self.iova_range_detail(&c, alloc.as_ref()))
        } else if covered < c.size && alloc.is_some() {
            let check = if unlink {
                Check::IovaUnlinkUnlinked
            } else {
                Check::IovaSyncUnlinked
            };
            let detail = format!(
                "[device address={:#018x}] [size={} bytes] [linked={covered} bytes of it]",
                c.addr, c.size
            );
            (check, detail)
        } else {
            if covered < c.size {
                // IOVA space the trace never saw allocated: unknown.
                if unlink {
                    self.stats.unknown_unmaps += 1;
                } else {
                    self.stats.unknown_syncs += 1;
                }
            }
            return;
        };
        let map = alloc.map(|(_, a)| a.call);
        self.report(check, device, map.as_ref(), &c, detail);
    }

    /// dma_iova_destroy: unlinks `[base, base + mapped_len)`, which must be
    /// every link of the state (`links`: how many the kernel's table had).
    fn iova_destroy(&mut self, device: &Arc<str>, c: DmaCall, links: u64) {
        let d = self.iova_dev(device);
        d.unlink(c.addr, c.size);
        let Some((base, a)) = d.alloc_of(c.addr).map(|(b, a)| (b, a.clone())) else {
            return;
        };
        let left: Vec<DmaCall> = d.links_in(base, a.size).into_iter().cloned().collect();
        let Some(first) = left.first() else { return };
        let bytes: u64 = left.iter().map(|l| l.size).fold(0, u64::saturating_add);
        let detail = format!(
            "[IOVA base={base:#x}] [mapped_len={} bytes] [{} link(s) of {bytes} bytes left \
             linked past it] [the kernel counted {links} link(s)]",
            c.size,
            left.len()
        );
        let mut m = self.finding(Check::IovaFreeLinked, device, Some(first), &c, detail);
        m.count = left.len() as u64;
        self.push(device, m);
        self.iova_dev(device).unlink(base, a.size);
    }

    /// dma_iova_free, or the free inside dma_iova_destroy: once per state,
    /// and with nothing linked (`links`: what the kernel's table had).
    fn iova_free(&mut self, device: &Arc<str>, c: DmaCall, links: u64, state: u32, f: u16) {
        let d = self.iova_dev(device);
        if let Some((st, first)) = d.freed.get(&c.addr).cloned() {
            if st == state {
                let detail = format!(
                    "[IOVA base={:#x}] [size={} bytes] {}",
                    c.addr,
                    c.size,
                    self.earlier("already freed", first.api, first.ts_ns)
                );
                self.report(Check::IovaDoubleFree, device, Some(&first), &c, detail);
                return;
            }
        }
        let alloc = d.allocs.remove(&c.addr);
        let left: Vec<DmaCall> = d.links_in(c.addr, c.size).into_iter().cloned().collect();
        d.unlink(c.addr, c.size);
        d.remember_free(c.addr, state, c.clone());
        // The destroy checked its own links.
        if f & flags::IOVA_DESTROY != 0 {
            return;
        }
        let n = (left.len() as u64).max(links);
        if n == 0 {
            return;
        }
        let detail = format!(
            "[IOVA base={:#x}] [size={} bytes] [{n} link(s) still linked]",
            c.addr, c.size
        );
        let map = left.first().cloned().or(alloc.map(|a| a.call));
        let mut m = self.finding(Check::IovaFreeLinked, device, map.as_ref(), &c, detail);
        m.count = n;
        self.push(device, m);
    }
}
