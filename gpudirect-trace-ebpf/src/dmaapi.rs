//! Hooks on the DMA-API functions: timing (level DMA_API) on every kernel,
//! and the DMA-API record source where the dma:* tracepoints are missing
//! (kernels before 6.8) or `--dma-source hooks` asks for them.
//!
//! Each function gets fentry/fexit programs (BTF and the function tracer)
//! and kprobe/kretprobe programs (elsewhere); the loader attaches one pair.
//! Records come from the same builders as the tracepoints' (dmarec.rs,
//! sg.rs), so they are the same records; which operations the hooks report
//! is the `RUNTIME[HOOK_OPS]` bit set (runtime.rs), written by the loader after
//! it knows which tracepoints attached.
//!
//! Unmaps, frees and syncs are reported at entry, before the call (as the
//! tracepoints do, and while the arguments are at hand); maps at exit, when
//! the return value (DMA address, entry count, error) exists. fexit sees
//! the arguments too; a kretprobe does not, so the kprobe entry keeps them
//! in the task's state (`TaskState::args`). Records are built before the
//! entry's timestamp and after the exit's, so a long scatterlist walk is
//! not counted as time spent in the DMA API.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::bpf_probe_read_kernel,
    macros::{fentry, fexit, kprobe, kretprobe},
    programs::{FEntryContext, FExitContext, ProbeContext, RetProbeContext},
    EbpfContext,
};
use gpudirect_trace_common::{flags, hook_ops, kind, op, stat, DMA_ARGS};

use crate::{
    debug_log::odd,
    dmarec,
    emit::config,
    runtime::reports,
    sg,
    stats::{kprobe_ran, stat_inc},
    timing::{enter_dma, exit_dma, exit_dma_timing},
};

/// The first `N` arguments of an fentry/fexit program (its ctx is `u64
/// args[]`, `N` the function's argument count, fixed per program). Read
/// with one bpf_probe_read_kernel() rather than loaded: a load gives a
/// pointer argument its BTF type, and the verifier then refuses arithmetic
/// on it (page_to_phys: "math between ptr_ pointer and register with
/// unbounded min value", 6.1); read this way every argument is a number.
#[inline(always)]
fn btf_args<const N: usize>(ctx: *mut core::ffi::c_void) -> [u64; 6] {
    let mut a = [0u64; 6];
    // SAFETY: ctx holds at least N u64 arguments; the helper tolerates
    // any address anyway.
    if let Ok(v) = unsafe { bpf_probe_read_kernel(ctx as *const [u64; N]) } {
        for (i, x) in v.iter().enumerate() {
            if i < 6 {
                a[i] = *x;
            }
        }
    }
    a
}

/// fexit's return value: after the `N` arguments.
#[inline(always)]
fn btf_ret<const N: usize>(ctx: *mut core::ffi::c_void) -> u64 {
    // SAFETY: fexit's ctx holds the return value at index N.
    unsafe { *(ctx as *const u64).add(N) }
}

#[inline(always)]
fn regs_args<const N: usize>(ctx: &ProbeContext) -> [u64; 6] {
    let mut a = [0u64; 6];
    for (i, v) in a.iter_mut().enumerate() {
        if i < N {
            *v = ctx.arg(i).unwrap_or(0);
        }
    }
    a
}

#[inline(always)]
fn rest(a: &[u64; 6]) -> [u64; DMA_ARGS] {
    [a[1], a[2], a[3], a[4], a[5]]
}

/// The arguments a kretprobe's entry kept, as an argument array; `ctx` is
/// the kretprobe's.
#[inline(always)]
fn kept(o: u32, bit: u32, ctx: *mut c_void) -> Option<[u64; 6]> {
    match exit_dma(o) {
        Some((dev, r)) => Some([dev, r[0], r[1], r[2], r[3], r[4]]),
        None => {
            if reports(bit) {
                args_missing(ctx, o);
            }
            None
        }
    }
}

/// A kretprobe that should report its call found no arguments kept by its
/// entry: counted, and told when the loader asked.
#[inline(always)]
fn args_missing(ctx: *mut c_void, o: u32) {
    stat_inc(stat::HOOK_ARGS_MISSING);
    odd!(
        ctx,
        "kretprobe of DMA-API operation {} (gpudirect_trace_common::op): its kprobe entry kept no arguments (both \
         nesting slots busy, or the entry missed); not reported, counted in hook_args_missing",
        o
    );
}

#[inline(always)]
pub(crate) fn read_u64(addr: u64) -> u64 {
    // SAFETY: bpf_probe_read_kernel tolerates any address.
    unsafe { bpf_probe_read_kernel(addr as *const u64) }.unwrap_or(0)
}

#[inline(always)]
fn read_u32(addr: u64) -> u32 {
    // SAFETY: as above.
    unsafe { bpf_probe_read_kernel(addr as *const u32) }.unwrap_or(0)
}

/// page_to_phys(page) with CONFIG_SPARSEMEM_VMEMMAP (every x86_64 distro
/// kernel): (page - vmemmap) / sizeof(struct page) << PAGE_SHIFT. 0 where
/// the loader found no `vmemmap_base` (then the record says phys 0).
#[inline(always)]
fn page_to_phys(page: u64) -> u64 {
    let cfg = config();
    if cfg.vmemmap_base_ptr == 0 || cfg.offsets.page_size == 0 || page == 0 {
        return 0;
    }
    let base = read_u64(cfg.vmemmap_base_ptr);
    if base == 0 || page < base {
        return 0;
    }
    ((page - base) / cfg.offsets.page_size as u64) << (cfg.page_shift & 63)
}

/// Four programs for one function of `$n` arguments: `$entry(&args)` runs
/// at entry (before the timestamp), `$exit(&args, ret, src)` at exit (after
/// it; None: a kretprobe whose entry kept nothing). Written
/// `dma_hooks! { fentry, fexit, kprobe, kretprobe: n, op, bit, entry, exit }`
/// so that each function's four names and its roles read as one line.
macro_rules! dma_hooks {
    ($fin:ident, $fout:ident, $kin:ident, $kout:ident: $n:literal, $op:expr, $bit:expr,
     $entry:expr, nothing_after) => {
        dma_hooks!(@ $fin, $fout, $kin, $kout, $n, $op, $bit, $entry, nothing_after, false);
    };
    ($fin:ident, $fout:ident, $kin:ident, $kout:ident: $n:literal, $op:expr, $bit:expr,
     $entry:expr, $exit:expr) => {
        dma_hooks!(@ $fin, $fout, $kin, $kout, $n, $op, $bit, $entry, $exit, true);
    };
    (@ $fin:ident, $fout:ident, $kin:ident, $kout:ident, $n:literal, $op:expr, $bit:expr,
     $entry:expr, $exit:expr, $stash:literal) => {
        #[fentry]
        pub fn $fin(ctx: FEntryContext) -> i32 {
            let a = btf_args::<$n>(ctx.as_ptr());
            $entry(&a, Src::btf(ctx.as_ptr()));
            enter_dma($op, a[0], None);
            0
        }

        #[fexit]
        pub fn $fout(ctx: FExitContext) -> i32 {
            exit_dma_timing($op);
            let a = btf_args::<$n>(ctx.as_ptr());
            $exit(
                Some(&a),
                btf_ret::<$n>(ctx.as_ptr()),
                Src::btf(ctx.as_ptr()),
            );
            0
        }

        #[kprobe]
        pub fn $kin(ctx: ProbeContext) -> i32 {
            kprobe_ran();
            let a = regs_args::<$n>(&ctx);
            $entry(&a, Src::regs(ctx.as_ptr()));
            // Only maps need their arguments at exit.
            let kept = rest(&a);
            enter_dma($op, a[0], if $stash { Some(&kept) } else { None });
            0
        }

        #[kretprobe]
        pub fn $kout(ctx: RetProbeContext) -> i32 {
            kprobe_ran();
            let ret: u64 = ctx.ret().unwrap_or(0);
            let a = kept($op, $bit, ctx.as_ptr());
            $exit(a.as_ref(), ret, Src::regs(ctx.as_ptr()));
            0
        }
    };
}

/// Which kind of program runs a body (for the scatter-gather scratch slot
/// and continuation), and its context.
#[derive(Clone, Copy)]
struct Src {
    kprobe: bool,
    ctx: *mut c_void,
}

impl Src {
    /// The call's kernel stack, for its record (`--stacks`).
    #[inline(always)]
    fn stack(&self) -> u64 {
        crate::stacks::take(self.ctx)
    }

    /// The call's kernel stack, taken only if the record needs one.
    #[inline(always)]
    fn lazy_stack(&self) -> crate::stacks::Stack {
        crate::stacks::Stack::From(self.ctx)
    }

    fn btf(ctx: *mut c_void) -> Self {
        Self { kprobe: false, ctx }
    }

    fn regs(ctx: *mut c_void) -> Self {
        Self { kprobe: true, ctx }
    }

    /// The scratch slot: `btf` for fentry/fexit, `regs` for kprobes.
    fn slot(&self, btf: u32, regs: u32) -> u32 {
        if self.kprobe {
            regs
        } else {
            btf
        }
    }

    fn tail(&self) -> sg::Tail {
        if self.kprobe {
            sg::Tail::Kprobe
        } else {
            sg::Tail::Tracing
        }
    }
}

#[inline(always)]
fn nothing(_a: &[u64; 6], _s: Src) {}

#[inline(always)]
fn nothing_after(_a: Option<&[u64; 6]>, _ret: u64, _s: Src) {}

// ---- dma_map_page_attrs(dev, page, offset, size, dir, attrs) -> dma_addr_t

#[inline(always)]
fn map_page_exit(a: Option<&[u64; 6]>, ret: u64, s: Src) {
    let Some(a) = a else { return };
    if reports(hook_ops::MAP) {
        let phys = match page_to_phys(a[1]) {
            0 => 0,
            p => p + a[2],
        };
        dmarec::map(a[0], phys, ret, a[3], a[4] as u32, a[5], 0, true, s.stack());
    }
}

dma_hooks! {
    t_dma_map_in, t_dma_map_out, k_dma_map_in, k_dma_map_out:
    6, op::DMA_MAP, hook_ops::MAP, nothing, map_page_exit
}

// ---- dma_map_phys(dev, phys, size, dir, attrs) -> dma_addr_t (6.18+)

/// dma_map_phys and dma_map_resource take the same arguments; which
/// operation bit reports them and the record's flag tell them apart.
#[inline(always)]
fn map_phys_exit<const BIT: u32, const EXTRA: u16>(a: Option<&[u64; 6]>, ret: u64, s: Src) {
    let Some(a) = a else { return };
    if reports(BIT) {
        dmarec::map(
            a[0],
            a[1],
            ret,
            a[2],
            a[3] as u32,
            a[4],
            EXTRA,
            true,
            s.stack(),
        );
    }
}

dma_hooks! {
    t_dma_map_phys_in, t_dma_map_phys_out, k_dma_map_phys_in, k_dma_map_phys_out:
    5, op::DMA_MAP, hook_ops::MAP, nothing, map_phys_exit::<{ hook_ops::MAP }, 0>
}

// ---- dma_unmap_page_attrs / dma_unmap_phys(dev, addr, size, dir, attrs),
// and dma_unmap_resource, the same arguments

#[inline(always)]
fn unmap_entry<const BIT: u32, const EXTRA: u16>(a: &[u64; 6], s: Src) {
    if reports(BIT) {
        let (dev, addr, size, dir, attrs) = (a[0], a[1], a[2], a[3] as u32, a[4]);
        dmarec::unmap(dev, addr, size, dir, attrs, EXTRA, true, s.lazy_stack());
    }
}

dma_hooks! {
    t_dma_unmap_in, t_dma_unmap_out, k_dma_unmap_in, k_dma_unmap_out:
    5, op::DMA_UNMAP, hook_ops::UNMAP, unmap_entry::<{ hook_ops::UNMAP }, 0>, nothing_after
}

// ---- dma_map_resource(dev, phys, size, dir, attrs) -> dma_addr_t

dma_hooks! {
    t_dma_map_res_in, t_dma_map_res_out, k_dma_map_res_in, k_dma_map_res_out:
    5, op::DMA_MAP_RESOURCE, hook_ops::RESOURCE, nothing,
    map_phys_exit::<{ hook_ops::RESOURCE }, { flags::RESOURCE }>
}

// ---- dma_unmap_resource(dev, addr, size, dir, attrs)

dma_hooks! {
    t_dma_unmap_res_in, t_dma_unmap_res_out, k_dma_unmap_res_in, k_dma_unmap_res_out:
    5, op::DMA_UNMAP_RESOURCE, hook_ops::RESOURCE,
    unmap_entry::<{ hook_ops::RESOURCE }, { flags::RESOURCE }>, nothing_after
}

// ---- dma_alloc_attrs(dev, size, dma_addr_t *handle, gfp, attrs) -> void *

#[inline(always)]
fn alloc_exit(a: Option<&[u64; 6]>, ret: u64, s: Src) {
    let Some(a) = a else { return };
    if reports(hook_ops::COHERENT) {
        let handle = if ret != 0 && a[2] != 0 {
            read_u64(a[2])
        } else {
            0
        };
        dmarec::coherent(kind::DMA_ALLOC, a[0], ret, handle, a[1], 0, true, s.stack());
    }
}

dma_hooks! {
    t_dma_alloc_in, t_dma_alloc_out, k_dma_alloc_in, k_dma_alloc_out:
    5, op::DMA_ALLOC, hook_ops::COHERENT, nothing, alloc_exit
}

// ---- dma_free_attrs(dev, size, cpu_addr, dma_handle, attrs)

#[inline(always)]
fn free_entry(a: &[u64; 6], s: Src) {
    // dma_free_attrs returns early for a NULL cpu_addr: nothing was freed.
    if a[2] != 0 && reports(hook_ops::COHERENT) {
        dmarec::coherent(kind::DMA_FREE, a[0], a[2], a[3], a[1], 0, true, s.stack());
    }
}

dma_hooks! {
    t_dma_free_in, t_dma_free_out, k_dma_free_in, k_dma_free_out:
    5, op::DMA_FREE, hook_ops::COHERENT, free_entry, nothing_after
}

// ---- dma_sync_single_for_{cpu,device}(dev, addr, size, dir)
// (6.12+: __dma_sync_single_*, called by the inline wrappers for devices
// that need syncing; where the tracepoints fire too.)

#[inline(always)]
fn sync_entry<const FOR_DEVICE: bool>(a: &[u64; 6], s: Src) {
    if reports(hook_ops::SYNC) {
        dmarec::sync(
            FOR_DEVICE,
            a[0],
            a[1],
            a[2],
            a[3] as u32,
            None,
            true,
            true,
            s.lazy_stack(),
        );
    }
}

dma_hooks! {
    t_sync_cpu_in, t_sync_cpu_out, k_sync_cpu_in, k_sync_cpu_out:
    4, op::DMA_SYNC, hook_ops::SYNC, sync_entry::<false>, nothing_after
}

dma_hooks! {
    t_sync_dev_in, t_sync_dev_out, k_sync_dev_in, k_sync_dev_out:
    4, op::DMA_SYNC, hook_ops::SYNC, sync_entry::<true>, nothing_after
}

// The scatterlist hooks and their continuations.
mod sg_hooks;

// The IOVA API (6.17+) and dma_need_unmap.
mod iova;
