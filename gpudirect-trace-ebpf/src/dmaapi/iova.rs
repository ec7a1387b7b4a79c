//! Hooks on the IOVA API (include/linux/dma-mapping.h, 6.17+): how the
//! block layer (NVMe through blk_rq_dma_map_iter_start), RDMA ODP, HMM and
//! VFIO dma-buf map under an IOMMU. No dma:* tracepoint fires for it, so
//! these hooks are its only source, on every kernel that has it.
//!
//! A transaction is `dma_iova_try_alloc` (IOVA space for the whole
//! request), one `dma_iova_link` per physical range, one `dma_iova_sync`,
//! then `dma_iova_destroy` (unlink everything and free: what NVMe does) or
//! `dma_iova_unlink`s and `dma_iova_free`. Links are the device's maps and
//! unlinks its unmaps (`kind::DMA_MAP` / `DMA_UNMAP` with `flags::IOVA`), so
//! counters, lifetimes, sizes and misuse checks treat them like every other
//! mapping. A destroy ends every link of its state at once: `IOVA_STATES`
//! counts each state's links so that its unmap counts as that many.
//!
//! Each call is also a timed DMA-API call (level DMA_API, its device): the
//! iommu:map/unmap events of the links and unlinks inside it are attributed
//! to the device, as for dma_map_*.
//!
//! `struct dma_iova_state` is `{ dma_addr_t addr; u64 __size; }` with
//! DMA_IOVA_USE_SWIOTLB in `__size`'s top bit (6.17 to 7.1); the loader
//! checks that layout in BTF before it attaches these hooks.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{fentry, fexit, kprobe, kretprobe, map},
    maps::{HashMap, LruHashMap},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
    EbpfContext,
};
use gpudirect_trace_common::{
    flags, hook_ops, kind, maps, op, stat, Event, IovaState, DMA_ARGS, DMA_IOVA_USE_SWIOTLB,
};

use super::*;
use crate::{
    emit::{
        add_counter_atomic, add_counter_atomic_n, base_event, cfg_track_lifetimes, emit_hot_any,
        emit_rare_any, stream_hot_any,
    },
    timing::{enter_dma, exit_dma_timing, now, record_latency_n},
};

/// Live states, by `struct dma_iova_state *` (the driver's; stable for the
/// transaction, and reset by each dma_iova_try_alloc).
#[map]
static IOVA_STATES: HashMap<u64, IovaState> = HashMap::with_max_entries(maps::IOVA_STATES_CAP, 0);

/// dma_need_unmap()'s device argument, kept by its kprobe for the kretprobe.
#[map]
static NEED_UNMAP_ARGS: LruHashMap<u32, u64> =
    LruHashMap::with_max_entries(maps::NEED_UNMAP_ARGS_CAP, 0);

/// The state's base address, allocated size, and whether a link bounced.
#[inline(always)]
fn read_state(state: u64) -> (u64, u64, bool) {
    if state == 0 {
        return (0, 0, false);
    }
    let raw = read_u64(state + 8);
    (
        read_u64(state),
        raw & !DMA_IOVA_USE_SWIOTLB,
        raw & DMA_IOVA_USE_SWIOTLB != 0,
    )
}

/// The table's entry for `state`, made from the state itself when the
/// trace began after its dma_iova_try_alloc.
#[inline(always)]
fn tracked(state: u64, dev: u64) -> Option<*mut IovaState> {
    if let Some(p) = IOVA_STATES.get_ptr_mut(&state) {
        return Some(p);
    }
    let (addr, size, _) = read_state(state);
    if !insert(state, dev, addr, size) {
        return None;
    }
    IOVA_STATES.get_ptr_mut(&state)
}

/// A new entry for `state`, begun now; false (and counted) when the table
/// is full.
#[inline(always)]
fn insert(state: u64, dev: u64, addr: u64, size: u64) -> bool {
    let st = IovaState {
        dev,
        addr,
        size,
        ts_ns: now(),
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        ..IovaState::default()
    };
    if IOVA_STATES.insert(&state, &st, 0).is_err() {
        stat_inc(stat::IOVA_STATES_FULL);
        return false;
    }
    true
}

/// Flags of a link/unlink/sync at `offset` of `size` bytes into a state
/// of `alloc` bytes.
#[inline(always)]
fn range_flags(offset: u64, size: u64, alloc: u64, swiotlb: bool) -> u16 {
    let mut f = flags::IOVA | flags::FROM_HOOK;
    if offset.wrapping_add(size) > alloc || offset.wrapping_add(size) < offset {
        f |= flags::IOVA_OUT_OF_RANGE;
    }
    if swiotlb {
        f |= flags::IOVA_SWIOTLB;
    }
    f
}

/// The record of a link/unlink/sync of `size` bytes at `offset` into the
/// state at `base`, of `alloc` bytes.
#[inline(always)]
fn range_event(
    k: u16,
    dev: u64,
    base: u64,
    offset: u64,
    size: u64,
    alloc: u64,
    swiotlb: bool,
) -> Event {
    let mut ev = base_event(k, dev, range_flags(offset, size, alloc, swiotlb));
    ev.addr = base.wrapping_add(offset);
    ev.size = size;
    ev
}

/// The IOVA_FREE record of the state at `state` (base `base`, `alloc`
/// bytes); `extra`: IOVA_DESTROY when dma_iova_destroy freed it.
#[inline(always)]
fn free_event(dev: u64, state: u64, base: u64, alloc: u64, extra: u16, stack: u64) -> Event {
    let mut ev = base_event(kind::IOVA_FREE, dev, flags::IOVA | extra | flags::FROM_HOOK);
    ev.addr = base;
    ev.size = alloc;
    ev.aux = (state & 0xffff_ffff) | stack;
    ev
}

// ---- dma_iova_try_alloc(dev, state, phys, size) -> bool

#[inline(always)]
fn alloc_exit(dev: u64, state: u64, phys: u64, ret: u64, s: Src) {
    if !reports(hook_ops::IOVA) {
        return;
    }
    if ret & 1 == 0 {
        // Declined: the device does not use the IOMMU's DMA ops, and the
        // driver maps with dma_map_* instead. Counted, not streamed.
        add_counter_atomic(&base_event(kind::IOVA_DECLINED, dev, flags::FROM_HOOK));
        return;
    }
    let (addr, size, _) = read_state(state);
    if !insert(state, dev, addr, size) {
        odd!(
            s.ctx,
            "dma_iova_try_alloc: IOVA_STATES full, a state is not tracked: its destroy \
             will count no unmaps for its links"
        );
    }
    let mut ev = base_event(kind::IOVA_ALLOC, dev, flags::IOVA | flags::FROM_HOOK);
    ev.addr = addr;
    ev.size = size;
    ev.phys = phys;
    // The state's low half tells a second free of one state from the
    // free of another that got the same IOVA base since.
    ev.aux = (state & 0xffff_ffff) | s.stack();
    emit_hot_any(&mut ev);
}

#[fentry]
pub fn t_iova_alloc_in(ctx: FEntryContext) -> i32 {
    let a = btf_args::<4>(ctx.as_ptr());
    enter_dma(op::DMA_IOVA_ALLOC, a[0], None);
    0
}

#[fexit]
pub fn t_iova_alloc_out(ctx: FExitContext) -> i32 {
    exit_dma_timing(op::DMA_IOVA_ALLOC);
    let a = btf_args::<4>(ctx.as_ptr());
    alloc_exit(
        a[0],
        a[1],
        a[2],
        btf_ret::<4>(ctx.as_ptr()),
        Src::btf(ctx.as_ptr()),
    );
    0
}

#[kprobe]
pub fn k_iova_alloc_in(ctx: ProbeContext) -> i32 {
    kprobe_ran();
    let a = regs_args::<4>(&ctx);
    enter_dma(op::DMA_IOVA_ALLOC, a[0], Some(&rest(&a)));
    0
}

#[kretprobe]
pub fn k_iova_alloc_out(ctx: RetProbeContext) -> i32 {
    kprobe_ran();
    let ret: u64 = ctx.ret().unwrap_or(0);
    if let Some(a) = kept(op::DMA_IOVA_ALLOC, hook_ops::IOVA, ctx.as_ptr()) {
        alloc_exit(a[0], a[1], a[2], ret, Src::regs(ctx.as_ptr()));
    }
    0
}

// ---- dma_iova_link(dev, state, phys, offset, size, dir, attrs) -> int

/// A link's arguments after the device, as a kretprobe's entry keeps them
/// (`TaskState::args` has five slots: dir and attrs share one).
#[inline(always)]
fn link_args(a: &[u64; 6], attrs: u64) -> [u64; DMA_ARGS] {
    [a[1], a[2], a[3], a[4], (a[5] & 0xffff_ffff) | (attrs << 32)]
}

#[inline(always)]
fn link_entry(dev: u64, state: u64) {
    if !reports(hook_ops::IOVA) {
        return;
    }
    if let Some(st) = tracked(state, dev) {
        // SAFETY: map value pointer, valid for this program run.
        unsafe { (*st).linking = 1 };
    }
}

/// `k` = [state, phys, offset, size, dir | attrs << 32].
#[inline(always)]
fn link_exit(dev: u64, k: &[u64; DMA_ARGS], ret: u64, s: Src) {
    if !reports(hook_ops::IOVA) {
        return;
    }
    let [state, phys, offset, size, dir_attrs] = *k;
    let (dir, attrs) = (dir_attrs as u32, dir_attrs >> 32);
    let (base, alloc, swiotlb) = read_state(state);
    let st = IOVA_STATES.get_ptr_mut(&state);
    if let Some(st) = st {
        // SAFETY: map value pointer, valid for this program run.
        unsafe { (*st).linking = 0 };
    }
    let err = ret as u32 as i32;
    let k = if err != 0 {
        kind::DMA_MAP_ERR
    } else {
        kind::DMA_MAP
    };
    let mut ev = range_event(k, dev, base, offset, size, alloc, swiotlb);
    ev.phys = phys;
    ev.dir = dir;
    if err != 0 {
        ev.aux = u64::from(err as u32) | s.stack();
        emit_rare_any(&mut ev);
        return;
    }
    if let Some(st) = st {
        // SAFETY: as above; concurrent links of one state are the driver's
        // to serialise (the kernel's own state updates are not atomic).
        unsafe {
            (*st).links = (*st).links.wrapping_add(1);
            (*st).linked = (*st).linked.wrapping_add(size);
        }
    }
    ev.aux = (attrs & 0xffff_ffff) | s.stack();
    emit_hot_any(&mut ev);
}

#[fentry]
pub fn t_iova_link_in(ctx: FEntryContext) -> i32 {
    let a = btf_args::<6>(ctx.as_ptr());
    link_entry(a[0], a[1]);
    enter_dma(op::DMA_IOVA_LINK, a[0], None);
    0
}

#[fexit]
pub fn t_iova_link_out(ctx: FExitContext) -> i32 {
    exit_dma_timing(op::DMA_IOVA_LINK);
    let a = btf_args::<6>(ctx.as_ptr());
    // SAFETY: dma_iova_link has seven arguments; the return value follows.
    let attrs = unsafe { *(ctx.as_ptr() as *const u64).add(6) };
    let ret = btf_ret::<7>(ctx.as_ptr());
    link_exit(a[0], &link_args(&a, attrs), ret, Src::btf(ctx.as_ptr()));
    0
}

#[kprobe]
pub fn k_iova_link_in(ctx: ProbeContext) -> i32 {
    kprobe_ran();
    let a = regs_args::<6>(&ctx);
    // The seventh argument is on the stack (x86_64: above the return
    // address at function entry).
    // SAFETY: regs is the probe's pt_regs.
    let sp = unsafe { (*ctx.regs).rsp };
    let attrs = read_u64(sp + 8);
    link_entry(a[0], a[1]);
    enter_dma(op::DMA_IOVA_LINK, a[0], Some(&link_args(&a, attrs)));
    0
}

#[kretprobe]
pub fn k_iova_link_out(ctx: RetProbeContext) -> i32 {
    kprobe_ran();
    let ret: u64 = ctx.ret().unwrap_or(0);
    if let Some((dev, k)) = exit_dma(op::DMA_IOVA_LINK) {
        link_exit(dev, &k, ret, Src::regs(ctx.as_ptr()));
    } else if reports(hook_ops::IOVA) {
        args_missing(ctx.as_ptr(), op::DMA_IOVA_LINK);
    }
    0
}

// ---- dma_iova_unlink(dev, state, offset, size, dir, attrs)

#[inline(always)]
fn unlink_entry(a: &[u64; 6], s: Src) {
    if !reports(hook_ops::IOVA) {
        return;
    }
    let (dev, state, offset, size) = (a[0], a[1], a[2], a[3]);
    let (base, alloc, swiotlb) = read_state(state);
    let mut lifetime = None;
    if let Some(st) = IOVA_STATES.get_ptr_mut(&state) {
        // SAFETY: map value pointer, valid for this program run.
        unsafe {
            // A failed link undoes what it bounced: the kernel's clean-up
            // inside dma_iova_link, not an unlink of the driver's.
            if (*st).linking != 0 {
                return;
            }
            (*st).links = (*st).links.saturating_sub(1);
            (*st).linked = (*st).linked.saturating_sub(size);
            lifetime = Some((*st).ts_ns);
        }
    }
    let mut ev = range_event(kind::DMA_UNMAP, dev, base, offset, size, alloc, swiotlb);
    ev.dir = a[4] as u32;
    ev.aux = (a[5] & 0xffff_ffff) | s.stack();
    emit_hot_any(&mut ev);
    if let (Some(t), true) = (
        lifetime,
        cfg_track_lifetimes() != gpudirect_trace_common::lifetime::OFF,
    ) {
        record_latency_n(dev, op::LIFETIME, now().saturating_sub(t), 1);
    }
}

dma_hooks! {
    t_iova_unlink_in, t_iova_unlink_out, k_iova_unlink_in, k_iova_unlink_out:
    6, op::DMA_IOVA_UNLINK, hook_ops::IOVA, unlink_entry, nothing_after
}

// ---- dma_iova_destroy(dev, state, mapped_len, dir, attrs)

#[inline(always)]
fn destroy_entry(a: &[u64; 6], s: Src) {
    let (dev, state, mapped_len) = (a[0], a[1], a[2]);
    // With nothing mapped it calls dma_iova_free, whose hook reports it.
    if mapped_len == 0 || !reports(hook_ops::IOVA) {
        return;
    }
    let (base, alloc, swiotlb) = read_state(state);
    // SAFETY: the value is copied out before the entry is removed.
    let st = unsafe { IOVA_STATES.get(&state) }.copied();
    let _ = IOVA_STATES.remove(&state);
    let links = st.map_or(0, |v| u64::from(v.links));
    let stack = s.stack();
    let mut f = flags::IOVA | flags::IOVA_DESTROY | flags::FROM_HOOK;
    if swiotlb {
        f |= flags::IOVA_SWIOTLB;
    }
    if mapped_len > alloc {
        f |= flags::IOVA_OUT_OF_RANGE;
    }
    let mut ev = base_event(kind::DMA_UNMAP, dev, f);
    ev.addr = base;
    ev.size = mapped_len;
    ev.phys = links;
    ev.dir = a[3] as u32;
    ev.aux = (a[4] & 0xffff_ffff) | stack;
    add_counter_atomic_n(&ev, links);
    stream_hot_any(&mut ev);
    let mut free = free_event(dev, state, base, alloc, flags::IOVA_DESTROY, stack);
    emit_hot_any(&mut free);
    if let (Some(v), true) = (
        st,
        cfg_track_lifetimes() != gpudirect_trace_common::lifetime::OFF,
    ) {
        if links > 0 {
            record_latency_n(dev, op::LIFETIME, now().saturating_sub(v.ts_ns), links);
        }
    }
}

dma_hooks! {
    t_iova_destroy_in, t_iova_destroy_out, k_iova_destroy_in, k_iova_destroy_out:
    5, op::DMA_IOVA_DESTROY, hook_ops::IOVA, destroy_entry, nothing_after
}

// ---- dma_iova_free(dev, state)

#[inline(always)]
fn free_entry(a: &[u64; 6], s: Src) {
    if !reports(hook_ops::IOVA) {
        return;
    }
    let (dev, state) = (a[0], a[1]);
    let (base, alloc, _) = read_state(state);
    // SAFETY: the value is copied out before the entry is removed.
    let links = unsafe { IOVA_STATES.get(&state) }.map_or(0, |v| u64::from(v.links));
    let _ = IOVA_STATES.remove(&state);
    let mut ev = free_event(dev, state, base, alloc, 0, s.stack());
    ev.phys = links;
    emit_hot_any(&mut ev);
}

dma_hooks! {
    t_iova_free_in, t_iova_free_out, k_iova_free_in, k_iova_free_out:
    2, op::DMA_IOVA_FREE, hook_ops::IOVA, free_entry, nothing_after
}

// ---- dma_iova_sync(dev, state, offset, size) -> int

#[inline(always)]
fn sync_entry(a: &[u64; 6], s: Src) {
    if !reports(hook_ops::IOVA) {
        return;
    }
    let (dev, state, offset, size) = (a[0], a[1], a[2], a[3]);
    let (base, alloc, swiotlb) = read_state(state);
    let mut ev = range_event(kind::IOVA_SYNC, dev, base, offset, size, alloc, swiotlb);
    ev.aux = s.stack();
    emit_hot_any(&mut ev);
}

dma_hooks! {
    t_iova_sync_in, t_iova_sync_out, k_iova_sync_in, k_iova_sync_out:
    4, op::DMA_IOVA_SYNC, hook_ops::IOVA, sync_entry, nothing_after
}

// ---- dma_need_unmap(dev) -> bool (6.17+)

/// A `false` answer: the kernel's block layer then skips the unmaps of the
/// device's direct mappings (`kind::UNMAP_NOT_NEEDED`, counter-only).
#[inline(always)]
fn need_unmap_exit(dev: u64, ret: u64) {
    if ret & 1 == 0 && dev != 0 {
        add_counter_atomic(&base_event(kind::UNMAP_NOT_NEEDED, dev, flags::FROM_HOOK));
        crate::lifetime::unmaps_not_needed(dev);
    }
}

#[fentry]
pub fn t_need_unmap_in(_ctx: FEntryContext) -> i32 {
    0
}

#[fexit]
pub fn t_need_unmap_out(ctx: FExitContext) -> i32 {
    let a = btf_args::<1>(ctx.as_ptr());
    need_unmap_exit(a[0], btf_ret::<1>(ctx.as_ptr()));
    0
}

#[kprobe]
pub fn k_need_unmap_in(ctx: ProbeContext) -> i32 {
    kprobe_ran();
    let dev: u64 = ctx.arg(0).unwrap_or(0);
    let tid = bpf_get_current_pid_tgid() as u32;
    let _ = NEED_UNMAP_ARGS.insert(&tid, &dev, 0);
    0
}

#[kretprobe]
pub fn k_need_unmap_out(ctx: RetProbeContext) -> i32 {
    kprobe_ran();
    let tid = bpf_get_current_pid_tgid() as u32;
    // SAFETY: the value is copied out before the entry is removed.
    let dev = unsafe { NEED_UNMAP_ARGS.get(&tid) }.copied();
    let _ = NEED_UNMAP_ARGS.remove(&tid);
    if let Some(dev) = dev {
        need_unmap_exit(dev, ctx.ret().unwrap_or(1));
    }
    0
}
