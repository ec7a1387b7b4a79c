//! DMA-API records, one builder per operation, shared by the two sources:
//! the dma:* tracepoint programs (main.rs, 6.8+) and the hooks on the
//! DMA-API functions (dmaapi.rs, every kernel). Both produce exactly the
//! same records, so everything downstream (counters, lifetimes, streaming,
//! userspace) is one path; hook records carry `flags::FROM_HOOK` and their
//! counters `COUNTER_FROM_HOOK`, which is how userspace names the source.
//!
//! `hook` false: a tracepoint program (preemption off: plain counter adds);
//! true: a hook program, which may be preempted (atomic adds).

use gpudirect_trace_common::{flags, kind, CpuState, Event, DMA_ATTR_MMIO, DMA_MAPPING_ERROR};

use crate::{
    emit::{base_event, cfg_stack_filter, emit_hot, emit_hot_any, emit_rare, emit_rare_any},
    lifetime,
    stacks::Stack,
};

#[inline(always)]
fn new(k: u16, dev: u64, extra: u16, hook: bool) -> Event {
    base_event(
        k,
        dev,
        if hook {
            extra | flags::FROM_HOOK
        } else {
            extra
        },
    )
}

#[inline(always)]
fn rare(ev: &mut Event, hook: bool) {
    if hook {
        emit_rare_any(ev);
    } else {
        emit_rare(ev);
    }
}

/// Counts and streams `ev`; this CPU's state, for the lifetime sampler.
#[inline(always)]
fn hot(ev: &mut Event, hook: bool) -> *mut CpuState {
    if hook {
        emit_hot_any(ev)
    } else {
        emit_hot(ev)
    }
}

/// A map's or unmap's record but for its range: the flags (6.18's
/// dma_map_phys maps MMIO, what dma_map_resource was, with DMA_ATTR_MMIO)
/// and the attrs/stack word.
#[inline(always)]
fn dma_event(k: u16, dev: u64, attrs: u64, extra: u16, hook: bool, stack: u64) -> Event {
    let extra = if attrs & DMA_ATTR_MMIO != 0 {
        extra | flags::RESOURCE
    } else {
        extra
    };
    let mut ev = new(k, dev, extra, hook);
    ev.aux = (attrs & 0xffff_ffff) | stack;
    ev
}

/// dma_map_page / dma_map_phys / dma_map_resource: a mapping of `size` bytes
/// at `phys` to DMA address `addr`, or a failed map (`DMA_MAPPING_ERROR`),
/// which is an error record, not a mapping.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn map(
    dev: u64,
    phys: u64,
    addr: u64,
    size: u64,
    dir: u32,
    attrs: u64,
    extra: u16,
    hook: bool,
    stack: u64,
) {
    let k = if addr == DMA_MAPPING_ERROR {
        kind::DMA_MAP_ERR
    } else {
        kind::DMA_MAP
    };
    let mut ev = dma_event(k, dev, attrs, extra, hook, stack);
    ev.phys = phys;
    ev.addr = addr;
    ev.size = size;
    ev.dir = dir;
    if k == kind::DMA_MAP_ERR {
        rare(&mut ev, hook);
        return;
    }
    let st = hot(&mut ev, hook);
    lifetime::mapped(&ev, st, 0);
}

/// dma_unmap_page / dma_unmap_phys / dma_unmap_resource. `stack`: the
/// call's kernel stack, not taken for an unmap of a mapping the table holds
/// as it should be (`stack_mode::SUSPECT`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn unmap(
    dev: u64,
    addr: u64,
    size: u64,
    dir: u32,
    attrs: u64,
    extra: u16,
    hook: bool,
    stack: Stack,
) {
    let mut ev = dma_event(kind::DMA_UNMAP, dev, attrs, extra, hook, 0);
    ev.addr = addr;
    ev.size = size;
    ev.dir = dir;
    if !lifetime::unmapped(&ev, hook, 0) || !cfg_stack_filter() {
        ev.aux |= stack.get();
    }
    hot(&mut ev, hook);
}

/// A failed scatter-gather map: `nents` entries, `err` the negative errno
/// (0 where the kernel's function returns 0 for every error).
#[inline(always)]
pub fn map_sg_err(dev: u64, nents: u32, err: i64, dir: u32, hook: bool, stack: u64) {
    let mut ev = new(kind::DMA_MAP_SG_ERR, dev, 0, hook);
    ev.size = nents as u64;
    // The error as an i32 in the low half (AUX_STACK_SHIFT).
    ev.aux = u64::from(err as i32 as u32) | stack;
    ev.dir = dir;
    rare(&mut ev, hook);
}

/// dma_alloc_attrs (`k` DMA_ALLOC) / dma_free_attrs (DMA_FREE): coherent
/// memory at kernel address `virt`, DMA address `addr` (`extra`:
/// `flags::NONCONTIG` for dma_alloc_noncontiguous, whose `virt` is its
/// `struct sg_table *`). An allocation that returned NULL is a map error.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn coherent(
    k: u16,
    dev: u64,
    virt: u64,
    addr: u64,
    size: u64,
    extra: u16,
    hook: bool,
    stack: u64,
) {
    if k == kind::DMA_ALLOC && virt == 0 {
        let mut ev = new(kind::DMA_MAP_ERR, dev, flags::COHERENT | extra, hook);
        ev.size = size;
        ev.aux = stack;
        rare(&mut ev, hook);
        return;
    }
    let mut ev = new(k, dev, flags::COHERENT | extra, hook);
    ev.phys = virt;
    ev.addr = addr;
    ev.size = size;
    ev.aux = stack;
    hot(&mut ev, hook);
}

/// dma_sync_single_* / dma_sync_sg_* (`sg`: entries in `aux`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn sync(
    for_device: bool,
    dev: u64,
    addr: u64,
    size: u64,
    dir: u32,
    sg: Option<u32>,
    complete: bool,
    hook: bool,
    stack: Stack,
) {
    let k = if for_device {
        kind::DMA_SYNC_DEVICE
    } else {
        kind::DMA_SYNC_CPU
    };
    let mut extra = if sg.is_some() { flags::SCATTERLIST } else { 0 };
    if !complete {
        extra |= flags::SG_TRUNCATED;
    }
    let mut ev = new(k, dev, extra, hook);
    ev.addr = addr;
    ev.size = size;
    ev.dir = dir;
    ev.aux = sg.unwrap_or(0) as u64;
    // A single sync of a mapping the table holds as it should be takes no
    // stack (`stack_mode::SUSPECT`); an sg sync is not looked up.
    if sg.is_some() || !cfg_stack_filter() || !lifetime::sync_fits(&ev) {
        ev.aux |= stack.get();
    }
    hot(&mut ev, hook);
}
