//! What the IOMMU's invalidations cost: the time of each submission to the
//! hardware's invalidation queue and its wait for completion, per IOMMU
//! unit, invalidation type and (where the kernel lets us know) device.
//!
//! - Intel VT-d: qi_submit_sync(iommu, desc, count, options), the one
//!   function every queued invalidation goes through (5.8+ signature; 5.10
//!   to 6.18 read). Classed by the first descriptor's type (`qw0 & 0xf`),
//!   as CONFIG_DMAR_PERF's dmar_latency_update does; 6.12+ batches up to 16
//!   descriptors per call (qi_batch_flush_descs), which the
//!   intel_iommu:qi_submit tracepoint counts one by one.
//! - AMD-Vi: iommu_completion_wait(iommu) (6.5+), else the per-domain
//!   flush completion (amd_iommu_domain_flush_complete in 6.1,
//!   domain_flush_complete in 5.10), whose unit is unknown.
//! - ARM SMMUv3: arm_smmu_cmdq_issue_cmdlist (every command batch, with or
//!   without its CMD_SYNC), classed by the first command's opcode.
//!
//! Attribution, best first: the endpoint of the device-TLB cache tag the
//! kernel flushed just before (intel_iommu:cache_tag_flush_*, 6.10+); the device of the
//! domain whose flush_iotlb_all is in flight (the flush queue's deferred
//! flushes in lazy mode: domain -> device learnt from DMA-API nesting); the
//! DMA-API / IOMMU call in flight on the task (strict unmaps, map-time
//! flushes under caching mode). Userspace adds the domain id the
//! descriptor carries (decode of `qw0`).

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::bpf_probe_read_kernel,
    macros::{fentry, fexit, kprobe, kretprobe, map, raw_tracepoint},
    maps::{LruHashMap, PerCpuHashMap},
    programs::{FEntryContext, FExitContext, ProbeContext, RawTracePointContext, RetProbeContext},
    EbpfContext,
};
use gpudirect_trace_common::{flags, inval, kind, maps, stat, InvalKey, LatHist};

use crate::{
    emit::{add_counter, base_event, cfg_stream, config, emit_hot_any},
    stats::{kprobe_ran, stat_inc},
    timing::{self, now, tid},
};

/// Per-task state: submissions in flight (two nesting slots, as the timing
/// hooks keep: an interrupt handler's submission on top of the task's own),
/// the device of the flush_iotlb_all in flight and of the last cache tag
/// flushed.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct InvalTask {
    ts: [u64; 2],
    /// The arguments the exit decodes: unit, descriptors, count.
    a0: [u64; 2],
    a1: [u64; 2],
    a2: [u64; 2],
    flush_dev: u64,
    flush_ts: u64,
    tag_dev: u64,
    tag_ts: u64,
}

const ZERO: InvalTask = InvalTask {
    ts: [0; 2],
    a0: [0; 2],
    a1: [0; 2],
    a2: [0; 2],
    flush_dev: 0,
    flush_ts: 0,
    tag_dev: 0,
    tag_ts: 0,
};

#[map]
static INVAL_TASKS: LruHashMap<u32, InvalTask> =
    LruHashMap::with_max_entries(maps::INVAL_TASKS_CAP, 0);

/// Per (device, class) log2 histograms, kept only in aggregate-only mode
/// (streamed submissions give userspace exact HdrHistograms).
#[map]
static INVAL_HIST: PerCpuHashMap<InvalKey, LatHist> =
    PerCpuHashMap::with_max_entries(maps::INVAL_HIST_CAP, 0);

/// A submission in flight longer than this lost its exit: its slot is free.
const STALE_NS: u64 = 10_000_000_000;
/// A cache tag's device names the submission that follows it within this
/// time on the same task (the flush builds its descriptors, then submits).
const TAG_FRESH_NS: u64 = 1_000_000;

#[inline(always)]
fn state(t: u32) -> Option<&'static mut InvalTask> {
    if INVAL_TASKS.get_ptr_mut(&t).is_none() {
        let _ = INVAL_TASKS.insert(&t, &ZERO, BPF_NOEXIST as u64);
    }
    // SAFETY: map value pointer, valid for this program run.
    INVAL_TASKS.get_ptr_mut(&t).map(|p| unsafe { &mut *p })
}

#[inline(always)]
fn read<T>(addr: u64) -> Option<T> {
    if addr == 0 {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel tolerates any address.
    unsafe { bpf_probe_read_kernel(addr as *const T) }.ok()
}

/// An `int` unit number at `base + off` (seq_id, index), or UNIT_UNKNOWN.
#[inline(always)]
fn unit_at(base: u64, off: u32) -> u32 {
    if base == 0 || off == u32::MAX {
        return inval::UNIT_UNKNOWN;
    }
    match read::<i32>(base + off as u64) {
        Some(v) if (0..inval::UNIT_UNKNOWN as i32).contains(&v) => v as u32,
        _ => inval::UNIT_UNKNOWN,
    }
}

/// Entry of a timed submission.
#[inline(always)]
fn enter(a0: u64, a1: u64, a2: u64) {
    let Some(st) = state(tid()) else { return };
    // Taken last: the lookups above are not the kernel's time.
    let t = now();
    let slot = if st.ts[0] == 0 || t.saturating_sub(st.ts[0]) > STALE_NS {
        0
    } else if st.ts[1] == 0 || t.saturating_sub(st.ts[1]) > STALE_NS {
        1
    } else {
        stat_inc(stat::TIMING_NEST_FULL);
        return;
    };
    st.ts[slot] = t;
    st.a0[slot] = a0;
    st.a1[slot] = a1;
    st.a2[slot] = a2;
}

/// Exit of a timed submission of `vendor` (`inval::VENDOR_*`), type `ty`
/// for vendors whose type is not in a descriptor.
#[inline(always)]
fn exit(vendor: u32, ty: u32) {
    let end = now();
    let Some(st) = INVAL_TASKS.get_ptr_mut(&tid()) else {
        return;
    };
    // SAFETY: map value pointer, valid for this program run.
    let st = unsafe { &mut *st };
    let slot = if st.ts[1] != 0 {
        1
    } else if st.ts[0] != 0 {
        0
    } else {
        return;
    };
    let ns = end.saturating_sub(st.ts[slot]);
    let (a0, a1, a2) = (st.a0[slot], st.a1[slot], st.a2[slot]);
    st.ts[slot] = 0;
    let (dev, via, nested) = attribution(st, end);
    st.tag_dev = 0;
    let off = config().offsets;
    let count = a2 as u32;
    let (class, w0, w1, seg) = match vendor {
        inval::VENDOR_INTEL => {
            let unit = unit_at(a0, off.intel_iommu_seq_id);
            let seg = if off.intel_iommu_segment == u32::MAX {
                0
            } else {
                read::<u16>(a0 + off.intel_iommu_segment as u64).unwrap_or(0)
            };
            // struct qi_desc { u64 qw0, qw1, qw2, qw3; }: the first two.
            let (w0, w1) = if count > 0 {
                read::<[u64; 2]>(a1).map_or((0, 0), |d| (d[0], d[1]))
            } else {
                (0, 0)
            };
            let t = if count == 0 {
                inval::QI_IWD
            } else {
                (w0 & 0xf) as u32
            };
            (inval::class(vendor, t, unit, nested), w0, w1, seg)
        }
        inval::VENDOR_AMD => {
            let unit = if ty == inval::AMD_COMPLETION_WAIT {
                unit_at(a0, off.amd_iommu_index)
            } else {
                inval::UNIT_UNKNOWN
            };
            (inval::class(vendor, ty, unit, nested), 0, 0, 0)
        }
        _ => {
            let (w0, w1) = read::<[u64; 2]>(a1).map_or((0, 0), |d| (d[0], d[1]));
            let t = (w0 & 0xff) as u32;
            (
                inval::class(vendor, t, inval::UNIT_UNKNOWN, nested),
                w0,
                w1,
                0,
            )
        }
    };
    if !cfg_stream() {
        record_hist(dev, class, ns);
    }
    let mut ev = base_event(kind::IOMMU_INVAL, dev, via);
    ev.dir = class;
    ev.size = ns;
    ev.phys = w0;
    ev.addr = w1;
    ev.aux = u64::from(count) | u64::from(seg) << 32;
    emit_hot_any(&mut ev);
}

/// Device, how it was found, and whether a timed IOMMU call encloses it.
///
/// Inside a flush_iotlb_all nothing encloses it: no timed IOMMU call
/// (iommu_map/unmap, iotlb_sync) calls that callback, so a timed call in
/// flight on the task is one the flush queue's timer interrupted (seen on
/// 6.1: one of 4 deferred flushes landed on top of an iommu_map).
#[inline(always)]
fn attribution(st: &InvalTask, now: u64) -> (u64, u16, bool) {
    let (dev, via, nested) = timing::inval_context();
    let in_flush_all = st.flush_ts != 0 && now.saturating_sub(st.flush_ts) < STALE_NS;
    let nested = nested && !in_flush_all;
    if st.tag_dev != 0 && now.saturating_sub(st.tag_ts) < TAG_FRESH_NS {
        return (st.tag_dev, flags::VIA_DOMAIN, nested);
    }
    if in_flush_all && st.flush_dev != 0 {
        return (st.flush_dev, flags::VIA_DOMAIN, nested);
    }
    (dev, via, nested)
}

#[inline(always)]
fn record_hist(dev: u64, class: u32, ns: u64) {
    let key = InvalKey {
        dev,
        class,
        _pad: 0,
    };
    timing::add_to_hist(&INVAL_HIST, &key, ns);
}

// ---- Intel: qi_submit_sync(struct intel_iommu *, struct qi_desc *, unsigned int count, unsigned long options)

#[fentry]
pub fn t_qi_submit_in(ctx: FEntryContext) -> i32 {
    // SAFETY: the function has four arguments.
    let (a0, a1, a2): (u64, u64, u64) = unsafe { (ctx.arg(0), ctx.arg(1), ctx.arg(2)) };
    enter(a0, a1, a2);
    0
}

#[fexit]
pub fn t_qi_submit_out(_ctx: FExitContext) -> i32 {
    exit(inval::VENDOR_INTEL, 0);
    0
}

#[kprobe]
pub fn k_qi_submit_in(ctx: ProbeContext) -> i32 {
    kprobe_ran();
    let a0: u64 = ctx.arg(0).unwrap_or(0);
    let a1: u64 = ctx.arg(1).unwrap_or(0);
    let a2: u64 = ctx.arg(2).unwrap_or(0);
    enter(a0, a1, a2);
    0
}

#[kretprobe]
pub fn k_qi_submit_out(_ctx: RetProbeContext) -> i32 {
    kprobe_ran();
    exit(inval::VENDOR_INTEL, 0);
    0
}

// ---- AMD: iommu_completion_wait(struct amd_iommu *) / the domain's flush completion

macro_rules! amd {
    ($fin:ident, $fout:ident, $kin:ident, $kout:ident, $ty:expr) => {
        #[fentry]
        pub fn $fin(ctx: FEntryContext) -> i32 {
            // SAFETY: the functions take one pointer argument.
            let a0: u64 = unsafe { ctx.arg(0) };
            enter(a0, 0, 0);
            0
        }

        #[fexit]
        pub fn $fout(_ctx: FExitContext) -> i32 {
            exit(inval::VENDOR_AMD, $ty);
            0
        }

        #[kprobe]
        pub fn $kin(ctx: ProbeContext) -> i32 {
            kprobe_ran();
            enter(ctx.arg(0).unwrap_or(0), 0, 0);
            0
        }

        #[kretprobe]
        pub fn $kout(_ctx: RetProbeContext) -> i32 {
            kprobe_ran();
            exit(inval::VENDOR_AMD, $ty);
            0
        }
    };
}

amd!(
    t_amd_wait_in,
    t_amd_wait_out,
    k_amd_wait_in,
    k_amd_wait_out,
    inval::AMD_COMPLETION_WAIT
);
amd!(
    t_amd_dwait_in,
    t_amd_dwait_out,
    k_amd_dwait_in,
    k_amd_dwait_out,
    inval::AMD_DOMAIN_FLUSH_COMPLETE
);

// ---- SMMUv3: arm_smmu_cmdq_issue_cmdlist(smmu, [cmdq,] u64 *cmds, int n, bool sync)

#[fentry]
pub fn t_smmu_cmdq_in(ctx: FEntryContext) -> i32 {
    // SAFETY: the function has four (before 6.12) or five arguments; the
    // loader sets smmu_cmds_arg from its BTF prototype, and the verifier
    // prunes the other branch (read-only data).
    let (cmds, n): (u64, u64) = unsafe {
        if config().offsets.smmu_cmds_arg == 2 {
            (ctx.arg(2), ctx.arg(3))
        } else {
            (ctx.arg(1), ctx.arg(2))
        }
    };
    // SAFETY: as above.
    let smmu: u64 = unsafe { ctx.arg(0) };
    enter(smmu, cmds, n);
    0
}

#[fexit]
pub fn t_smmu_cmdq_out(_ctx: FExitContext) -> i32 {
    exit(inval::VENDOR_SMMU, 0);
    0
}

#[kprobe]
pub fn k_smmu_cmdq_in(ctx: ProbeContext) -> i32 {
    kprobe_ran();
    let (cmds, n): (u64, u64) = if config().offsets.smmu_cmds_arg == 2 {
        (ctx.arg(2).unwrap_or(0), ctx.arg(3).unwrap_or(0))
    } else {
        (ctx.arg(1).unwrap_or(0), ctx.arg(2).unwrap_or(0))
    };
    enter(ctx.arg(0).unwrap_or(0), cmds, n);
    0
}

#[kretprobe]
pub fn k_smmu_cmdq_out(_ctx: RetProbeContext) -> i32 {
    kprobe_ran();
    exit(inval::VENDOR_SMMU, 0);
    0
}

// ---- flush_iotlb_all(struct iommu_domain *): whose deferred flush this is

#[inline(always)]
fn flush_enter(domain: u64) {
    let dev = timing::domain_device(domain);
    if let Some(st) = state(tid()) {
        st.flush_dev = dev;
        st.flush_ts = now();
    }
}

#[inline(always)]
fn flush_exit() {
    if let Some(st) = INVAL_TASKS.get_ptr_mut(&tid()) {
        // SAFETY: map value pointer, valid for this program run.
        unsafe {
            (*st).flush_dev = 0;
            (*st).flush_ts = 0;
        }
    }
}

#[fentry]
pub fn t_flush_all_in(ctx: FEntryContext) -> i32 {
    // SAFETY: the driver callbacks take one argument, the domain.
    flush_enter(unsafe { ctx.arg(0) });
    0
}

#[fexit]
pub fn t_flush_all_out(_ctx: FExitContext) -> i32 {
    flush_exit();
    0
}

#[kprobe]
pub fn k_flush_all_in(ctx: ProbeContext) -> i32 {
    kprobe_ran();
    flush_enter(ctx.arg(0).unwrap_or(0));
    0
}

#[kretprobe]
pub fn k_flush_all_out(_ctx: RetProbeContext) -> i32 {
    kprobe_ran();
    flush_exit();
    0
}

// ---- intel_iommu:* tracepoints (drivers/iommu/intel/trace.h)

#[inline(always)]
fn tp_arg(ctx: &RawTracePointContext, n: usize) -> u64 {
    // SAFETY: the ctx of a raw tracepoint is `u64 args[]`; the kernel checks
    // at attach time that `n` is below the tracepoint's argument count.
    unsafe { *(ctx.as_ptr() as *const u64).add(n) }
}

/// intel_iommu:qi_submit(struct intel_iommu *iommu, u64 qw0, u64 qw1, u64
/// qw2, u64 qw3) (5.8+): one per descriptor, batched ones included.
#[raw_tracepoint]
pub fn intel_qi_submit(ctx: RawTracePointContext) -> i32 {
    let unit = unit_at(tp_arg(&ctx, 0), config().offsets.intel_iommu_seq_id);
    let qw0 = tp_arg(&ctx, 1);
    let qw1 = tp_arg(&ctx, 2);
    let t = (qw0 & 0xf) as u32;
    let mut ev = base_event(kind::QI_DESCRIPTOR, 0, 0);
    ev.dir = inval::class(inval::VENDOR_INTEL, t, unit, false);
    // Page-selective IOTLB invalidations (granularity 3, bits 4..6) cover
    // 2^AM pages (qw1 bits 0..6).
    if (t == inval::QI_IOTLB || t == inval::QI_EIOTLB) && (qw0 >> 4) & 3 == 3 {
        ev.size = 1 << (qw1 & 0x3f);
    }
    add_counter(&ev);
    0
}

/// intel_iommu:cache_tag_flush_range / _range_np(struct cache_tag *tag,
/// unsigned long start, end, addr, pages, mask) and cache_tag_flush_all(tag)
/// (6.10+). A device-TLB tag's `dev` is the endpoint; an IOTLB tag's is the
/// IOMMU's own device (cache_tag_assign: the IOTLB is the unit's, shared by
/// the domain's devices; seen on 6.12: "dmar0"), so an IOTLB flush takes the
/// device of the call in flight, as the submission that follows does.
#[inline(always)]
fn cache_tag(tag: u64, which: u32, pages: u64) {
    let off = config().offsets;
    if off.cache_tag_dev == u32::MAX || tag == 0 {
        return;
    }
    let tag_type = if off.cache_tag_type == u32::MAX {
        0
    } else {
        read::<u32>(tag + off.cache_tag_type as u64).unwrap_or(0) & 0xf
    };
    // enum cache_tag_type: 1 CACHE_TAG_DEVTLB, 3 CACHE_TAG_NESTING_DEVTLB.
    let endpoint = tag_type & 1 == 1;
    let st = state(tid());
    let (dev, via) = if endpoint {
        let d = read::<u64>(tag + off.cache_tag_dev as u64).unwrap_or(0);
        (d, flags::VIA_DOMAIN)
    } else {
        match &st {
            Some(st) if st.flush_ts != 0 && st.flush_dev != 0 => (st.flush_dev, flags::VIA_DOMAIN),
            _ => {
                let (d, via, _) = timing::inval_context();
                (d, via)
            }
        }
    };
    let unit = if off.cache_tag_iommu == u32::MAX {
        inval::UNIT_UNKNOWN
    } else {
        let iommu = read::<u64>(tag + off.cache_tag_iommu as u64).unwrap_or(0);
        unit_at(iommu, off.intel_iommu_seq_id)
    };
    let mut ev = base_event(kind::CACHE_TAG_FLUSH, dev, via);
    ev.dir = inval::class(inval::VENDOR_INTEL, tag_type | which << 4, unit, false);
    ev.size = pages;
    add_counter(&ev);
    if endpoint && dev != 0 {
        if let Some(st) = st {
            st.tag_dev = dev;
            st.tag_ts = now();
        }
    }
}

#[raw_tracepoint]
pub fn intel_cache_tag_flush_range(ctx: RawTracePointContext) -> i32 {
    cache_tag(tp_arg(&ctx, 0), inval::TAG_FLUSH_RANGE, tp_arg(&ctx, 4));
    0
}

#[raw_tracepoint]
pub fn intel_cache_tag_flush_range_np(ctx: RawTracePointContext) -> i32 {
    cache_tag(tp_arg(&ctx, 0), inval::TAG_FLUSH_RANGE_NP, tp_arg(&ctx, 4));
    0
}

#[raw_tracepoint]
pub fn intel_cache_tag_flush_all(ctx: RawTracePointContext) -> i32 {
    cache_tag(tp_arg(&ctx, 0), inval::TAG_FLUSH_ALL, 0);
    0
}

/// Benchmark stand-in (`cargo xtask bench`): one submission's entry and
/// exit bodies back to back, as a raw tracepoint that BPF_PROG_TEST_RUN
/// can drive on a kernel without fentry or kprobes (the CI host). args:
/// (iommu, desc, count), as qi_submit_sync's. The fentry/fexit trampolines
/// add their own cost on top (docs/benchmarks.md).
#[raw_tracepoint]
pub fn bench_inval(ctx: RawTracePointContext) -> i32 {
    enter(tp_arg(&ctx, 0), tp_arg(&ctx, 1), tp_arg(&ctx, 2));
    exit(inval::VENDOR_INTEL, 0);
    0
}
