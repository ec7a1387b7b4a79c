//! The DMA-API hooks that walk scatterlists: dma_map_sg, dma_unmap_sg,
//! dma_map_sgtable, dma_sync_sg_*, in two builds (with bpf_loop(), and
//! `_nl` without), and the continuations of the `_nl` builds' walks.

use aya_ebpf::{
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
    EbpfContext,
};
use gpudirect_trace_common::{hook_ops, kind, op};

use super::*;
use crate::{
    dmarec,
    emit::config,
    sg::{self, scratch},
    timing::{enter_dma, exit_dma_timing},
};

// ---- Scatter-gather: two builds of each program, with bpf_loop() (5.17+)
// and without (`_nl`: a bounded walk for 5.10 to 5.16); the loader takes
// the first that the kernel's verifier accepts.

/// __dma_map_sg_attrs / dma_map_sg_attrs(dev, sg, nents, dir, attrs) -> int:
/// the entries mapped (> 0), or 0 / a negative errno on failure.
#[inline(always)]
fn map_sg_exit<const LOOP: bool>(a: Option<&[u64; 6]>, ret: u64, s: Src) {
    let Some(a) = a else { return };
    let ents = ret as u32 as i32;
    if ents <= 0 {
        if reports(hook_ops::MAP_SG_ERR) {
            dmarec::map_sg_err(a[0], a[2] as u32, ents as i64, a[3] as u32, true, s.stack());
        }
        return;
    }
    if !reports(hook_ops::MAP_SG) {
        return;
    }
    sg::sg_event::<LOOP>(
        s.ctx,
        s.tail(),
        s.slot(scratch::FEXIT_MAP, scratch::KRET_MAP),
        kind::DMA_MAP_SG,
        a[0],
        a[1],
        a[2] as u32,
        ents as u32,
        a[3] as u32,
        a[4],
        true,
        false,
    );
}

/// dma_unmap_sg_attrs(dev, sg, nents, dir, attrs)
#[inline(always)]
fn unmap_sg_entry<const LOOP: bool>(a: &[u64; 6], s: Src) {
    if !reports(hook_ops::UNMAP_SG) {
        return;
    }
    sg::sg_event::<LOOP>(
        s.ctx,
        s.tail(),
        s.slot(scratch::FENTRY_UNMAP, scratch::KPROBE_UNMAP),
        kind::DMA_UNMAP_SG,
        a[0],
        a[1],
        a[2] as u32,
        0,
        a[3] as u32,
        a[4],
        true,
        true,
    );
}

/// dma_map_sgtable(dev, sgt, dir, attrs) -> 0 or a negative errno, hooked
/// only where it does not call a hooked __dma_map_sg_attrs.
#[inline(always)]
fn map_sgtable_exit<const LOOP: bool>(a: Option<&[u64; 6]>, ret: u64, s: Src) {
    let Some(a) = a else { return };
    let off = config().offsets;
    let sgt = a[1];
    let err = ret as u32 as i32;
    if err < 0 {
        if reports(hook_ops::MAP_SG_ERR) {
            let orig = read_u32(sgt + off.sgt_orig_nents as u64);
            dmarec::map_sg_err(a[0], orig, err as i64, a[2] as u32, true, s.stack());
        }
        return;
    }
    if !reports(hook_ops::MAP_SG) {
        return;
    }
    let sgl = read_u64(sgt + off.sgt_sgl as u64);
    let orig = read_u32(sgt + off.sgt_orig_nents as u64);
    let ents = read_u32(sgt + off.sgt_nents as u64);
    sg::sg_event::<LOOP>(
        s.ctx,
        s.tail(),
        s.slot(scratch::FEXIT_SGTABLE, scratch::KRET_SGTABLE),
        kind::DMA_MAP_SG,
        a[0],
        sgl,
        orig,
        ents,
        a[2] as u32,
        a[3],
        true,
        false,
    );
}

/// dma_sync_sg_for_{cpu,device}(dev, sg, nelems, dir)
#[inline(always)]
fn sync_sg_entry<const LOOP: bool, const DEV: bool>(a: &[u64; 6], s: Src) {
    if !reports(hook_ops::SYNC) {
        return;
    }
    let slot = if DEV {
        s.slot(scratch::BTF_SYNC_DEV, scratch::REGS_SYNC_DEV)
    } else {
        s.slot(scratch::BTF_SYNC_CPU, scratch::REGS_SYNC_CPU)
    };
    sg::sync_sg::<LOOP>(
        s.ctx,
        s.tail(),
        slot,
        DEV,
        a[0],
        a[1],
        a[2] as u32,
        a[3] as u32,
        true,
        true,
    );
}

macro_rules! sg_hooks {
    ($loop:literal, $ms:ident, $ms_o:ident, $kms:ident, $kms_o:ident,
     $us:ident, $us_o:ident, $kus:ident, $kus_o:ident,
     $mt:ident, $mt_o:ident, $kmt:ident, $kmt_o:ident,
     $sc:ident, $sc_o:ident, $ksc:ident, $ksc_o:ident,
     $sd:ident, $sd_o:ident, $ksd:ident, $ksd_o:ident) => {
        dma_hooks! {
            $ms, $ms_o, $kms, $kms_o:
            5, op::DMA_MAP_SG, hook_ops::MAP_SG, nothing, map_sg_exit::<$loop>
        }
        dma_hooks! {
            $us, $us_o, $kus, $kus_o:
            5, op::DMA_UNMAP_SG, hook_ops::UNMAP_SG, unmap_sg_entry::<$loop>, nothing_after
        }
        dma_hooks! {
            $mt, $mt_o, $kmt, $kmt_o:
            4, op::DMA_MAP_SGTABLE, hook_ops::MAP_SG, nothing, map_sgtable_exit::<$loop>
        }
        dma_hooks! {
            $sc, $sc_o, $ksc, $ksc_o:
            4, op::DMA_SYNC, hook_ops::SYNC, sync_sg_entry::<$loop, false>, nothing_after
        }
        dma_hooks! {
            $sd, $sd_o, $ksd, $ksd_o:
            4, op::DMA_SYNC, hook_ops::SYNC, sync_sg_entry::<$loop, true>, nothing_after
        }
    };
}

sg_hooks! {
    true,
    t_dma_map_sg_in, t_dma_map_sg_out, k_dma_map_sg_in, k_dma_map_sg_out,
    t_dma_unmap_sg_in, t_dma_unmap_sg_out, k_dma_unmap_sg_in, k_dma_unmap_sg_out,
    t_dma_map_sgt_in, t_dma_map_sgt_out, k_dma_map_sgt_in, k_dma_map_sgt_out,
    t_sync_sg_cpu_in, t_sync_sg_cpu_out, k_sync_sg_cpu_in, k_sync_sg_cpu_out,
    t_sync_sg_dev_in, t_sync_sg_dev_out, k_sync_sg_dev_in, k_sync_sg_dev_out
}

sg_hooks! {
    false,
    t_dma_map_sg_in_nl, t_dma_map_sg_out_nl, k_dma_map_sg_in_nl, k_dma_map_sg_out_nl,
    t_dma_unmap_sg_in_nl, t_dma_unmap_sg_out_nl, k_dma_unmap_sg_in_nl, k_dma_unmap_sg_out_nl,
    t_dma_map_sgt_in_nl, t_dma_map_sgt_out_nl, k_dma_map_sgt_in_nl, k_dma_map_sgt_out_nl,
    t_sync_sg_cpu_in_nl, t_sync_sg_cpu_out_nl, k_sync_sg_cpu_in_nl, k_sync_sg_cpu_out_nl,
    t_sync_sg_dev_in_nl, t_sync_sg_dev_out_nl, k_sync_sg_dev_in_nl, k_sync_sg_dev_out_nl
}

// ---- Continuations of the bounded walk (`_nl` builds only): the loader
// loads each against its program's function and puts it into SG_CONT_T /
// SG_CONT_K at its scratch slot; a walk that used up its steps tail-calls
// it (sg.rs). Same program types as the programs they continue.

macro_rules! continuations {
    ($($name:ident: $macro:ident, $ctx:ty, $tail:expr, $slot:expr;)*) => {$(
        #[$macro]
        pub fn $name(ctx: $ctx) -> i32 {
            sg::cont(ctx.as_ptr(), $tail, $slot);
            0
        }
    )*};
}

continuations! {
    t_dma_map_sg_cont: fexit, FExitContext, sg::Tail::Tracing, scratch::FEXIT_MAP;
    t_dma_unmap_sg_cont: fentry, FEntryContext, sg::Tail::Tracing, scratch::FENTRY_UNMAP;
    t_dma_map_sgt_cont: fexit, FExitContext, sg::Tail::Tracing, scratch::FEXIT_SGTABLE;
    t_sync_sg_cpu_cont: fentry, FEntryContext, sg::Tail::Tracing, scratch::BTF_SYNC_CPU;
    t_sync_sg_dev_cont: fentry, FEntryContext, sg::Tail::Tracing, scratch::BTF_SYNC_DEV;
    k_dma_map_sg_cont: kretprobe, RetProbeContext, sg::Tail::Kprobe, scratch::KRET_MAP;
    k_dma_unmap_sg_cont: kprobe, ProbeContext, sg::Tail::Kprobe, scratch::KPROBE_UNMAP;
    k_dma_map_sgt_cont: kretprobe, RetProbeContext, sg::Tail::Kprobe, scratch::KRET_SGTABLE;
    k_sync_sg_cpu_cont: kprobe, ProbeContext, sg::Tail::Kprobe, scratch::REGS_SYNC_CPU;
    k_sync_sg_dev_cont: kprobe, ProbeContext, sg::Tail::Kprobe, scratch::REGS_SYNC_DEV;
}
