//! gpudirect-trace's eBPF programs.
//!
//! Every program is a raw tracepoint (BPF_PROG_TYPE_RAW_TRACEPOINT): the
//! cheapest kind of tracepoint program, typed by the kernel's TP_PROTO rather
//! than by the tracefs record, and runnable with BPF_PROG_TEST_RUN. A raw
//! tracepoint program sees the TP_PROTO arguments as an array of u64; the
//! kernel refuses to attach a program that reads past the tracepoint's last
//! argument, so each program reads only the arguments that every supported
//! kernel (5.10 to 6.18) has at that position. docs/probes.md lists them.
#![no_std]
#![no_main]
// Atomic adds on map memory (see stats::atomic_add).
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod ctx;
mod debug_log;
mod device;
mod dmaapi;
mod dmarec;
mod emit;
mod families;
mod inval;
mod lifetime;
mod runtime;
mod sg;
mod stacks;
mod stats;
mod timing;
mod timing_slots;

use aya_ebpf::{
    helpers::bpf_probe_read_kernel_str_bytes, macros::raw_tracepoint,
    programs::RawTracePointContext, EbpfContext,
};
use gpudirect_trace_common::{flags, kind, XidEvent, XID_MSG_LEN};

use crate::emit::{base_event, config, count, emit_hot, emit_rare, EVENTS};

/// The `n`th TP_PROTO argument of a raw tracepoint.
#[inline(always)]
fn arg(ctx: &RawTracePointContext, n: usize) -> u64 {
    // SAFETY: the ctx of a raw tracepoint is `u64 args[]`; the kernel checks at
    // attach time that `n` is below the tracepoint's argument count.
    unsafe { *(ctx.as_ptr() as *const u64).add(n) }
}

// ---- iommu:* (include/trace/events/iommu.h) ----

/// iommu:map(unsigned long iova, phys_addr_t paddr, size_t size)
#[raw_tracepoint]
pub fn iommu_map(ctx: RawTracePointContext) -> i32 {
    let (dev, via) = timing::current_iommu_device();
    let mut ev = base_event(kind::IOMMU_MAP, dev, via);
    ev.addr = arg(&ctx, 0);
    ev.phys = arg(&ctx, 1);
    ev.size = arg(&ctx, 2);
    emit_hot(&mut ev);
    0
}

/// iommu:unmap(unsigned long iova, size_t size, size_t unmapped_size)
#[raw_tracepoint]
pub fn iommu_unmap(ctx: RawTracePointContext) -> i32 {
    let (dev, via) = timing::current_iommu_device();
    let mut ev = base_event(kind::IOMMU_UNMAP, dev, via);
    ev.addr = arg(&ctx, 0);
    ev.size = arg(&ctx, 1);
    ev.aux = arg(&ctx, 2);
    emit_hot(&mut ev);
    0
}

/// iommu:io_page_fault(struct device *dev, unsigned long iova, int flags)
#[raw_tracepoint]
pub fn iommu_io_page_fault(ctx: RawTracePointContext) -> i32 {
    let dev = arg(&ctx, 0);
    let mut ev = base_event(kind::IO_PAGE_FAULT, dev, 0);
    ev.addr = arg(&ctx, 1);
    ev.aux = arg(&ctx, 2) as u32 as u64;
    emit_rare(&mut ev);
    0
}

/// iommu:add_device_to_group(int group_id, struct device *dev)
#[raw_tracepoint]
pub fn iommu_add_device_to_group(ctx: RawTracePointContext) -> i32 {
    group_event(&ctx, kind::GROUP_ADD_DEVICE)
}

/// iommu:remove_device_from_group(int group_id, struct device *dev)
#[raw_tracepoint]
pub fn iommu_remove_device_from_group(ctx: RawTracePointContext) -> i32 {
    group_event(&ctx, kind::GROUP_REMOVE_DEVICE)
}

#[inline(always)]
fn group_event(ctx: &RawTracePointContext, k: u16) -> i32 {
    let dev = arg(ctx, 1);
    let mut ev = base_event(k, dev, 0);
    ev.aux = arg(ctx, 0) as u32 as u64;
    emit_rare(&mut ev);
    0
}

/// iommu:attach_device_to_domain(struct device *dev)
#[raw_tracepoint]
pub fn iommu_attach_device_to_domain(ctx: RawTracePointContext) -> i32 {
    domain_event(&ctx, kind::DOMAIN_ATTACH)
}

/// iommu:detach_device_from_domain(struct device *dev) (kernels before 5.16)
#[raw_tracepoint]
pub fn iommu_detach_device_from_domain(ctx: RawTracePointContext) -> i32 {
    domain_event(&ctx, kind::DOMAIN_DETACH)
}

#[inline(always)]
fn domain_event(ctx: &RawTracePointContext, k: u16) -> i32 {
    let mut ev = base_event(k, arg(ctx, 0), 0);
    emit_rare(&mut ev);
    0
}

// ---- dma:* (include/trace/events/dma.h, 6.8+) ----

/// dma:dma_map_page / dma_map_phys (struct device *dev, phys_addr_t phys_addr,
/// dma_addr_t dma_addr, size_t size, enum dma_data_direction dir, unsigned long attrs)
#[raw_tracepoint]
pub fn dma_map(ctx: RawTracePointContext) -> i32 {
    dma_map_common(&ctx, 0)
}

/// dma:dma_map_resource, same TP_PROTO as dma_map_page: MMIO (peer BAR) mappings.
#[raw_tracepoint]
pub fn dma_map_resource(ctx: RawTracePointContext) -> i32 {
    dma_map_common(&ctx, flags::RESOURCE)
}

#[inline(always)]
fn dma_map_common(ctx: &RawTracePointContext, extra: u16) -> i32 {
    dmarec::map(
        arg(ctx, 0),
        arg(ctx, 1),
        arg(ctx, 2),
        arg(ctx, 3),
        arg(ctx, 4) as u32,
        arg(ctx, 5),
        extra,
        false,
        stacks::take(ctx.as_ptr()),
    );
    0
}

/// dma:dma_unmap_page / dma_unmap_phys (struct device *dev, dma_addr_t addr,
/// size_t size, enum dma_data_direction dir, unsigned long attrs)
#[raw_tracepoint]
pub fn dma_unmap(ctx: RawTracePointContext) -> i32 {
    dma_unmap_common(&ctx, 0)
}

/// dma:dma_unmap_resource, same TP_PROTO as dma_unmap_page.
#[raw_tracepoint]
pub fn dma_unmap_resource(ctx: RawTracePointContext) -> i32 {
    dma_unmap_common(&ctx, flags::RESOURCE)
}

#[inline(always)]
fn dma_unmap_common(ctx: &RawTracePointContext, extra: u16) -> i32 {
    dmarec::unmap(
        arg(ctx, 0),
        arg(ctx, 1),
        arg(ctx, 2),
        arg(ctx, 3) as u32,
        arg(ctx, 4),
        extra,
        false,
        stacks::Stack::From(ctx.as_ptr()),
    );
    0
}

/// dma:dma_map_sg(struct device *dev, struct scatterlist *sgl, int nents,
/// int ents, enum dma_data_direction dir, unsigned long attrs). 6.8+ only,
/// so bpf_loop() (5.17+) is always there.
#[raw_tracepoint]
pub fn dma_map_sg(ctx: RawTracePointContext) -> i32 {
    sg_tp::<true, true>(&ctx, sg::Tail::No)
}

/// dma:dma_unmap_sg(struct device *dev, struct scatterlist *sgl, int nents,
/// enum dma_data_direction dir, unsigned long attrs)
#[raw_tracepoint]
pub fn dma_unmap_sg(ctx: RawTracePointContext) -> i32 {
    sg_tp::<true, false>(&ctx, sg::Tail::No)
}

/// The two layouts differ only by dma_map_sg's `ents` (argument 3), which
/// moves dir and attrs up by one; `MAP` is constant, so each program keeps
/// the loads of its own layout only.
#[inline(always)]
fn sg_tp<const LOOP: bool, const MAP: bool>(ctx: &RawTracePointContext, tail: sg::Tail) -> i32 {
    let (slot, k, ents, at) = if MAP {
        (sg::scratch::TP_MAP, kind::DMA_MAP_SG, arg(ctx, 3) as u32, 4)
    } else {
        (sg::scratch::TP_UNMAP, kind::DMA_UNMAP_SG, 0, 3)
    };
    let (dev, sgl, nents) = (arg(ctx, 0), arg(ctx, 1), arg(ctx, 2) as u32);
    let (dir, attrs) = (arg(ctx, at) as u32, arg(ctx, at + 1));
    sg::sg_event::<LOOP>(
        ctx.as_ptr(),
        tail,
        slot,
        k,
        dev,
        sgl,
        nents,
        ents,
        dir,
        attrs,
        false,
        false,
    );
    0
}

/// dma:dma_map_sg_err(struct device *dev, struct scatterlist *sgl, int nents,
/// int err, enum dma_data_direction dir, unsigned long attrs)
#[raw_tracepoint]
pub fn dma_map_sg_err(ctx: RawTracePointContext) -> i32 {
    // It fires only for unexpected error codes; where the hooks see every
    // failure's return value, they report this one too.
    if runtime::reports(gpudirect_trace_common::hook_ops::MAP_SG_ERR) {
        return 0;
    }
    dmarec::map_sg_err(
        arg(&ctx, 0),
        arg(&ctx, 2) as u32,
        arg(&ctx, 3) as i32 as i64,
        arg(&ctx, 4) as u32,
        false,
        stacks::take(ctx.as_ptr()),
    );
    0
}

/// dma:dma_alloc / dma_alloc_pages (struct device *dev, void *virt_addr,
/// dma_addr_t dma_addr, size_t size, ...). Arguments after `size` changed in
/// 6.13 (dir added before gfp flags), so only the first four are read.
#[raw_tracepoint]
pub fn dma_alloc(ctx: RawTracePointContext) -> i32 {
    coherent_event(&ctx, kind::DMA_ALLOC)
}

/// dma:dma_free / dma_free_pages (struct device *dev, void *virt_addr,
/// dma_addr_t dma_addr, size_t size, ...).
#[raw_tracepoint]
pub fn dma_free(ctx: RawTracePointContext) -> i32 {
    coherent_event(&ctx, kind::DMA_FREE)
}

#[inline(always)]
fn coherent_event(ctx: &RawTracePointContext, k: u16) -> i32 {
    let stack = stacks::take(ctx.as_ptr());
    dmarec::coherent(
        k,
        arg(ctx, 0),
        arg(ctx, 1),
        arg(ctx, 2),
        arg(ctx, 3),
        0,
        false,
        stack,
    );
    0
}

/// dma:dma_alloc_sgt_err (6.18+; the dma_alloc TP_PROTO, virt NULL): a
/// dma_alloc_noncontiguous() that failed.
#[raw_tracepoint]
pub fn dma_alloc_sgt_err(ctx: RawTracePointContext) -> i32 {
    let stack = stacks::take(ctx.as_ptr());
    let (dev, size) = (arg(&ctx, 0), arg(&ctx, 3));
    dmarec::coherent(
        kind::DMA_ALLOC,
        dev,
        0,
        0,
        size,
        flags::NONCONTIG,
        false,
        stack,
    );
    0
}

/// dma:dma_alloc_sgt(struct device *dev, struct sg_table *sgt, size_t size,
/// enum dma_data_direction dir, gfp_t flags, unsigned long attrs) and
/// dma:dma_free_sgt(dev, sgt, size, dir) (6.18+): dma_alloc_noncontiguous()
/// memory, mapped as one range (the kernel sets `sgt->nents` to 1) at the
/// first entry's DMA address.
#[raw_tracepoint]
pub fn dma_alloc_sgt(ctx: RawTracePointContext) -> i32 {
    noncontig_event(&ctx, kind::DMA_ALLOC)
}

#[raw_tracepoint]
pub fn dma_free_sgt(ctx: RawTracePointContext) -> i32 {
    noncontig_event(&ctx, kind::DMA_FREE)
}

#[inline(always)]
fn noncontig_event(ctx: &RawTracePointContext, k: u16) -> i32 {
    let off = config().offsets;
    let (dev, sgt, size) = (arg(ctx, 0), arg(ctx, 1), arg(ctx, 2));
    let sgl = if sgt == 0 {
        0
    } else {
        dmaapi::read_u64(sgt + off.sgt_sgl as u64)
    };
    let addr = if sgl == 0 {
        0
    } else {
        dmaapi::read_u64(sgl + off.sg_dma_address as u64)
    };
    let stack = stacks::take(ctx.as_ptr());
    dmarec::coherent(k, dev, sgt, addr, size, flags::NONCONTIG, false, stack);
    0
}

/// dma:dma_sync_single_for_cpu / _for_device (struct device *dev,
/// dma_addr_t dma_addr, size_t size, enum dma_data_direction dir)
#[raw_tracepoint]
pub fn dma_sync_single_for_cpu(ctx: RawTracePointContext) -> i32 {
    sync_single(&ctx, false)
}

#[raw_tracepoint]
pub fn dma_sync_single_for_device(ctx: RawTracePointContext) -> i32 {
    sync_single(&ctx, true)
}

#[inline(always)]
fn sync_single(ctx: &RawTracePointContext, for_device: bool) -> i32 {
    let (dev, addr, size, dir) = (arg(ctx, 0), arg(ctx, 1), arg(ctx, 2), arg(ctx, 3) as u32);
    let stack = stacks::Stack::From(ctx.as_ptr());
    dmarec::sync(for_device, dev, addr, size, dir, None, true, false, stack);
    0
}

/// dma:dma_sync_sg_for_cpu / _for_device (struct device *dev, struct
/// scatterlist *sgl, int nents, enum dma_data_direction dir)
#[raw_tracepoint]
pub fn dma_sync_sg_for_cpu(ctx: RawTracePointContext) -> i32 {
    sync_sg(&ctx, false)
}

#[raw_tracepoint]
pub fn dma_sync_sg_for_device(ctx: RawTracePointContext) -> i32 {
    sync_sg(&ctx, true)
}

#[inline(always)]
fn sync_sg(ctx: &RawTracePointContext, for_device: bool) -> i32 {
    let slot = if for_device {
        sg::scratch::TP_SYNC_DEV
    } else {
        sg::scratch::TP_SYNC_CPU
    };
    let (dev, sgl, nents, dir) = (
        arg(ctx, 0),
        arg(ctx, 1),
        arg(ctx, 2) as u32,
        arg(ctx, 3) as u32,
    );
    sg::sync_sg::<true>(
        ctx.as_ptr(),
        sg::Tail::No,
        slot,
        for_device,
        dev,
        sgl,
        nents,
        dir,
        false,
        false,
    );
    0
}

// ---- swiotlb:swiotlb_bounced ----

/// swiotlb:swiotlb_bounced(struct device *dev, dma_addr_t dev_addr, size_t size
/// [, enum swiotlb_force swiotlb_force on kernels before 5.18])
#[raw_tracepoint]
pub fn swiotlb_bounced(ctx: RawTracePointContext) -> i32 {
    let mut ev = base_event(kind::SWIOTLB_BOUNCED, arg(&ctx, 0), 0);
    ev.addr = arg(&ctx, 1);
    ev.size = arg(&ctx, 2);
    emit_hot(&mut ev);
    0
}

// ---- nvidia:nvidia_dev_xid (NVIDIA kernel module, nv-tracepoint.h) ----

/// nvidia:nvidia_dev_xid(struct pci_dev *dev, NvU32 error_number, const char *msg)
#[raw_tracepoint]
pub fn nvidia_dev_xid(ctx: RawTracePointContext) -> i32 {
    let cfg = config();
    let pci_dev = arg(&ctx, 0);
    let dev = if pci_dev == 0 {
        0
    } else {
        pci_dev + cfg.offsets.pci_dev_device as u64
    };
    let mut ev = base_event(kind::NV_XID, dev, 0);
    if !device::remember_device(dev, &cfg.offsets) {
        ev.flags |= flags::NO_DEVICE;
    }
    emit::stamp(&mut ev);
    count(kind::NV_XID);
    let Some(mut entry) = EVENTS.reserve::<XidEvent>(0) else {
        emit::lost();
        return 0;
    };
    let out = entry.as_mut_ptr();
    // SAFETY: `out` points at a reserved, exclusively owned ring buffer record.
    unsafe {
        (*out).event = ev;
        (*out).xid = arg(&ctx, 1) as u32;
        (*out).msg_truncated = 0;
        (*out).msg[0] = 0;
        let msg = arg(&ctx, 2) as *const u8;
        if let Ok(s) = bpf_probe_read_kernel_str_bytes(msg, &mut (*out).msg) {
            if s.len() + 1 >= XID_MSG_LEN {
                (*out).msg_truncated = 1;
            }
        }
    }
    entry.submit(emit::rare_wake_flag(ev.ts_ns));
    0
}

// ---- benchmark support ----

/// dma_map_sg's record built by the bounded walk of the programs for
/// kernels without bpf_loop() (the `_nl` hooks), continued in tail calls
/// when `bench_sg_bounded_cont` is registered, as a raw tracepoint that the
/// host tests and benchmarks drive with BPF_PROG_TEST_RUN on any kernel;
/// never attached. Same arguments as dma_map_sg.
#[raw_tracepoint]
pub fn bench_sg_bounded(ctx: RawTracePointContext) -> i32 {
    sg_tp::<false, true>(&ctx, sg::Tail::RawTp)
}

/// The continuation of `bench_sg_bounded`'s walk (registered by the host
/// tests in SG_CONT_R, as the loader registers the hooks' continuations).
#[raw_tracepoint]
pub fn bench_sg_bounded_cont(ctx: RawTracePointContext) -> i32 {
    sg::cont(ctx.as_ptr(), sg::Tail::RawTp, sg::scratch::TP_MAP);
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
