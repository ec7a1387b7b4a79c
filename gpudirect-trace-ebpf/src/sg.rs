//! Scatter-gather mappings: walk the scatterlist for the byte total and the
//! per-entry lengths, following chained lists (sg_next() semantics).
//!
//! The walk ends at the entry marked SG_END (sg_mark_end()) or after
//! `nents` data entries, whichever comes first (for_each_sg() stops at
//! `nents`; a driver may map only a prefix of its table). With bpf_loop()
//! (5.17+) two steps run inline and the loop reads eight entries at once,
//! up to `--sg-walk-max` entries, keeping the first `SG_LENS` lengths on
//! the way (~12 ns per entry in a 16-entry list, ~9 in lists of 1024 and
//! more on the CI host, see docs/benchmarks.md). In the programs built
//! for older kernels the first `SG_PREFIX` steps run inline and record
//! the first `SG_LENS` lengths, and the rest only sums in a jump-free
//! bounded loop of `SG_BOUNDED_REST` steps continued in tail-called chunks
//! (~28 ns per entry, 165,032 steps at most). The walk itself is in `walk`. A walk that stops anywhere else marks the record
//! `SG_TRUNCATED` and counts it per device (`kind::SG_TRUNCATED`), so a
//! short total is never silent.

use core::ffi::c_void;

use aya_ebpf::{
    macros::map,
    maps::{PerCpuArray, ProgramArray},
};
use gpudirect_trace_common::{flags, kind, op, Event, SgEvent};

use crate::{
    ctx::AnyCtx,
    debug_log::odd,
    dmarec,
    emit::{
        add_counter, add_counter_atomic, base_event, cfg_stack_filter, cfg_stream, config,
        output_hot, stamp,
    },
    lifetime,
    timing::enter_dma,
};

mod walk;
use walk::{read_u64, walk, walk_bounded, Cursor};

/// The record is built in a per-CPU map value, not on the stack: the
/// verifier tracks each stack slot's type (zero vs. written) per path, and a
/// 16-entry array written on some paths only gives it 2^16 states to explore.
/// One slot per program (`scratch::*`): dma_unmap_sg runs from the
/// completion interrupt and can interrupt dma_map_sg's program on the same
/// CPU mid-record (seen on 6.12: a map counted as an unmap). The kernel
/// never runs a program inside itself on one CPU (it counts a recursion
/// miss instead), so a slot per program is never shared.
///
/// The walk's cursor lives there too, not on the stack: the verifier checks
/// a bpf_loop() callback again for every iteration until its state repeats
/// (within ranges), and a total or a countdown on the stack changes bounds
/// every step, so it never would ("the sequence of 8193 jumps is too
/// complex", 6.18); values read from map memory are unknown to it, and the
/// callback's context (a pointer to the cursor) stays the same.
#[map]
static SG_SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(scratch::COUNT, 0);

#[repr(C)]
pub struct Scratch {
    ev: SgEvent,
    cur: Cursor,
    fin: Finish,
}

pub use gpudirect_trace_common::sg_scratch as scratch;

/// Continuations of the bounded walk (kernels without bpf_loop()), by
/// scratch slot: a walk that used up its steps tail-calls the continuation
/// of its program, which walks on with the same cursor, up to
/// `SG_TAIL_CALLS` times. One array per program type (a program array takes
/// programs of one type): tracing (fentry/fexit) and kprobe.
#[map]
static SG_CONT_T: ProgramArray = ProgramArray::with_max_entries(scratch::COUNT, 0);
#[map]
static SG_CONT_K: ProgramArray = ProgramArray::with_max_entries(scratch::COUNT, 0);
/// Raw tracepoint programs: only the host tests' `bench_sg_bounded`.
#[map]
static SG_CONT_R: ProgramArray = ProgramArray::with_max_entries(scratch::COUNT, 0);

/// Which continuation array a walk may tail-call into.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// None: a raw tracepoint (the bpf_loop() build never needs one).
    No,
    Tracing,
    Kprobe,
    /// The host tests' raw tracepoint build of the bounded walk.
    RawTp,
}

/// What to do once the walk is over, kept in the scratch slot across tail
/// calls: build the sg record, or a sync record; and whether the program was
/// an entry hook whose timing entry must still be taken (the continuation
/// does it when the walk ended there).
#[repr(C)]
pub struct Finish {
    what: u64,
    then_enter: u64,
    dev: u64,
    addr: u64,
    dir: u64,
    nents: u64,
    /// The sync's kernel stack (`stacks::take`), for its record.
    stack: u64,
}

const FINISH_SG: u64 = 0;
const FINISH_SYNC_CPU: u64 = 1;
const FINISH_SYNC_DEV: u64 = 2;

/// Tail-calls the continuation of slot `slot`; returns only if there is
/// none (not loaded, or the kernel's tail-call limit reached).
#[inline(always)]
fn tail_call(ctx: *mut c_void, tail: Tail, slot: u32) {
    let c = AnyCtx(ctx);
    // SAFETY: the context is the running program's own.
    let _ = unsafe {
        match tail {
            Tail::Tracing => SG_CONT_T.tail_call(&c, slot),
            Tail::Kprobe => SG_CONT_K.tail_call(&c, slot),
            Tail::RawTp => SG_CONT_R.tail_call(&c, slot),
            Tail::No => return,
        }
    };
}

/// A continuation program's body: walk on from the slot's cursor, then go
/// on again or finish.
#[inline(always)]
pub fn cont(ctx: *mut c_void, tail: Tail, slot: u32) {
    let Some(scratch) = SG_SCRATCH.get_ptr_mut(slot) else {
        return;
    };
    // SAFETY: this CPU's slot; the program that tail-called us is still
    // this same program run, so nothing else uses it.
    let sc = unsafe { &mut *scratch };
    if walk_bounded(&mut sc.cur) {
        tail_call(ctx, tail, slot);
    }
    finish(ctx, sc);
}

#[inline(always)]
fn finish(ctx: *mut c_void, sc: &mut Scratch) {
    let hook = sc.ev.event.flags & flags::FROM_HOOK != 0;
    if sc.fin.what == FINISH_SG {
        sg_record(ctx, &mut sc.ev, &sc.cur, hook);
    } else {
        if sc.cur.ended == 0 {
            odd!(
                ctx,
                "dma_sync_sg: scatterlist walk cut short: {} entries, {} bytes walked \
                 (--sg-walk-max, or the tail-call limit without bpf_loop)",
                sc.fin.nents,
                sc.cur.total
            );
        }
        dmarec::sync(
            sc.fin.what == FINISH_SYNC_DEV,
            sc.fin.dev,
            sc.fin.addr,
            sc.cur.total,
            sc.fin.dir as u32,
            Some(sc.fin.nents as u32),
            sc.cur.ended != 0,
            hook,
            // Taken at the sync's start (`fin`), for an sg sync always.
            crate::stacks::Stack::Taken(sc.fin.stack),
        );
    }
    if sc.fin.then_enter != 0 {
        // A scatterlist call (map or unmap): never IOMMU work itself.
        enter_dma(op::DMA_MAP_SG, sc.fin.dev, None);
    }
}

/// A dma_map_sg / dma_unmap_sg record from a tracepoint (`hook` false, a
/// program that runs with preemption off) or a DMA-API hook. `tail`: where a
/// bounded walk may continue; `then_enter`: the caller is an entry hook that
/// takes its timing entry after this returns (a continuation takes it where
/// the walk ends in one).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn sg_event<const LOOP: bool>(
    ctx: *mut c_void,
    tail: Tail,
    slot: u32,
    k: u16,
    dev: u64,
    sgl: u64,
    nents: u32,
    ents: u32,
    dir: u32,
    attrs: u64,
    hook: bool,
    then_enter: bool,
) {
    let off = config().offsets;
    let Some(scratch) = SG_SCRATCH.get_ptr_mut(slot) else {
        return;
    };
    // SAFETY: this CPU's slot, used only for the duration of this program.
    let sc = unsafe { &mut *scratch };
    let ev = &mut sc.ev;
    ev.event = base_event(k, dev, if hook { flags::FROM_HOOK } else { 0 });
    ev.nents = nents;
    ev.ents = ents;
    ev.n_lens = 0;
    ev.event.dir = dir;
    // An unmap's stack waits for the mapping table's word (`sg_record`).
    let stack = if k == kind::DMA_UNMAP_SG && cfg_stack_filter() {
        0
    } else {
        crate::stacks::take(ctx)
    };
    ev.event.aux = (attrs & 0xffff_ffff) | stack;
    if let Some(a) = read_u64(sgl + off.sg_dma_address as u64) {
        ev.event.addr = a;
    }
    let (n_lens, more) = walk::<LOOP>(&mut sc.cur, sgl, nents, Some(&mut ev.lens));
    ev.n_lens = n_lens;
    if more {
        sc.fin.what = FINISH_SG;
        sc.fin.then_enter = u64::from(then_enter);
        sc.fin.dev = dev;
        tail_call(ctx, tail, slot);
        // No continuation: the walk stops here, counted as truncated.
        sc.fin.then_enter = 0;
    }
    sg_record(ctx, &mut sc.ev, &sc.cur, hook);
}

/// The record of a finished walk: its total, truncation, counters,
/// lifetime, stream.
#[inline(always)]
fn sg_record(ctx: *mut c_void, ev: &mut SgEvent, cur: &Cursor, hook: bool) {
    let k = ev.event.kind;
    let truncated = cur.ended == 0;
    if truncated {
        ev.event.flags |= flags::SG_TRUNCATED;
        odd!(
            ctx,
            "dma_map_sg/dma_unmap_sg: scatterlist walk cut short: {} entries, {} bytes walked \
             (--sg-walk-max, or the tail-call limit without bpf_loop); counted as truncated",
            ev.nents,
            cur.total
        );
    }
    ev.event.size = cur.total;
    count(&ev.event, hook);
    if truncated {
        // The walked part, counted per device: userspace shows the device's
        // bytes as a lower bound. (The kind is swapped in place: a copy of
        // the event would not fit the stack of the kprobe programs.)
        ev.event.kind = if k == kind::DMA_MAP_SG {
            kind::SG_TRUNCATED
        } else {
            kind::SG_UNMAP_TRUNCATED
        };
        count(&ev.event, hook);
        ev.event.kind = k;
    }
    if k == kind::DMA_MAP_SG {
        lifetime::mapped(&ev.event, core::ptr::null_mut(), ev.nents);
    } else if !lifetime::unmapped(&ev.event, hook, ev.nents) && cfg_stack_filter() {
        // Not unmapped as it was mapped: it may be a finding (`sg_event`
        // left its stack to here).
        ev.event.aux |= crate::stacks::take(ctx);
    }
    if cfg_stream() {
        stamp(&mut ev.event);
        output_hot(ev);
    }
}

/// The DMA address of a list's first entry.
#[inline(always)]
pub fn first_dma_address(sgl: u64) -> u64 {
    read_u64(sgl + config().offsets.sg_dma_address as u64).unwrap_or(0)
}

/// A dma_sync_sg_* record: the list's byte total from the walk (`slot` is
/// the program's scratch slot; `tail`, `then_enter` as for `sg_event`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn sync_sg<const LOOP: bool>(
    ctx: *mut c_void,
    tail: Tail,
    slot: u32,
    for_device: bool,
    dev: u64,
    sgl: u64,
    nents: u32,
    dir: u32,
    hook: bool,
    then_enter: bool,
) {
    let Some(scratch) = SG_SCRATCH.get_ptr_mut(slot) else {
        return;
    };
    // SAFETY: this CPU's slot, used only for the duration of this program.
    let sc = unsafe { &mut *scratch };
    sc.ev.event.flags = if hook { flags::FROM_HOOK } else { 0 };
    sc.fin.what = if for_device {
        FINISH_SYNC_DEV
    } else {
        FINISH_SYNC_CPU
    };
    sc.fin.then_enter = 0;
    sc.fin.dev = dev;
    sc.fin.addr = first_dma_address(sgl);
    sc.fin.dir = dir as u64;
    sc.fin.nents = nents as u64;
    sc.fin.stack = crate::stacks::take(ctx);
    let (_, more) = walk::<LOOP>(&mut sc.cur, sgl, nents, None);
    if more {
        sc.fin.then_enter = u64::from(then_enter);
        tail_call(ctx, tail, slot);
        sc.fin.then_enter = 0;
    }
    finish(ctx, sc);
}

#[inline(always)]
fn count(ev: &Event, hook: bool) {
    if hook {
        add_counter_atomic(ev);
    } else {
        add_counter(ev);
    }
}
