//! Timing of the DMA-API, IOMMU and flush/bounce paths, and the per-task
//! state that attributes IOMMU events to devices.
//!
//! Each timed function gets an entry hook and an exit hook: fentry/fexit
//! where the kernel has BTF and the function tracer (cheapest, typed), else
//! kprobe/kretprobe. fentry programs are bound to one function at load time,
//! so there is one program pair per slot (`slot!` in `timing_slots`); the
//! loader picks the function for each slot from the kernel's BTF/kallsyms.
//!
//! Three nesting levels are tracked per task (`level::*`): a dma_map_* call
//! (DMA API) may call iommu_map (IOMMU), which may flush the IOTLB (INNER).
//! The DMA-API entry records the device; nested IOMMU calls inherit it, and
//! learn domain -> device for later IOMMU calls made outside the DMA API
//! (VFIO, iommufd). The iommu:map/unmap tracepoints, which carry no device,
//! read the same state (`current_iommu_device`).

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuHashMap},
};
use gpudirect_trace_common::{
    flags, kind, level, maps, op, stat, LatHist, LatKey, TaskState, DMA_ARGS, LAT_BUCKETS,
};

use crate::{
    emit::{base_event, emit_hot_any},
    stats::{atomic_add, stat_inc},
};

#[map]
static TASKS: LruHashMap<u32, TaskState> = LruHashMap::with_max_entries(maps::TASKS_CAP, 0);

/// One all-zero TaskState, never written: the initial value of new tasks.
#[map]
static ZERO_TASK: Array<TaskState> = Array::with_max_entries(1, 0);

/// One all-zero LatHist, never written: the initial value of new histograms.
#[map]
pub static ZERO_HIST: Array<LatHist> = Array::with_max_entries(1, 0);

/// IOMMU domain -> device, learnt from attach calls and DMA-API nesting.
#[map]
static DOMAIN_DEVS: HashMap<u64, u64> = HashMap::with_max_entries(maps::DOMAIN_DEVS_CAP, 0);

/// In-kernel latency histograms (aggregate-only mode reads only these).
#[map]
static LAT_HIST: PerCpuHashMap<LatKey, LatHist> =
    PerCpuHashMap::with_max_entries(maps::LAT_HIST_CAP, 0);

/// The calling thread's id (the kernel's pid), which keys per-task state.
#[inline(always)]
pub(crate) fn tid() -> u32 {
    bpf_get_current_pid_tgid() as u32
}

#[inline(always)]
pub(crate) fn now() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// The innermost call in flight at `lvl`: the nesting slot an interrupt
/// handler's call took if there is one, else the task's own; None if idle.
#[inline(always)]
fn innermost(st: &TaskState, lvl: usize) -> Option<usize> {
    if st.ts[lvl][1] != 0 {
        Some(1)
    } else if st.ts[lvl][0] != 0 {
        Some(0)
    } else {
        None
    }
}

/// The device an IOMMU event of the current task belongs to, and how it was
/// found (`flags::VIA_*`); (0, 0) when unknown.
#[inline(always)]
pub fn current_iommu_device() -> (u64, u16) {
    let Some(st) = TASKS.get_ptr(&tid()) else {
        return (0, 0);
    };
    // SAFETY: map value pointer, valid for this program run.
    let st = unsafe { &*st };
    let dma = innermost(st, level::DMA_API);
    if let Some(i) = innermost(st, level::IOMMU) {
        let dev = st.dev[level::IOMMU][i];
        if dev != 0 {
            let via = if dma.is_some() {
                flags::VIA_DMA_API
            } else {
                flags::VIA_DOMAIN
            };
            return (dev, via);
        }
    }
    if let Some(i) = dma {
        let dev = st.dev[level::DMA_API][i];
        if dev != 0 {
            return (dev, flags::VIA_DMA_API);
        }
    }
    (0, 0)
}

/// What an IOMMU invalidation of the current task belongs to (inval.rs):
/// the device of the innermost call in flight (flush, IOMMU, DMA API), how
/// it was found, and whether a timed IOMMU-level call (iommu_map/unmap,
/// iotlb_sync) is in flight, whose time then already includes it.
#[inline(always)]
pub fn inval_context() -> (u64, u16, bool) {
    let Some(st) = TASKS.get_ptr(&tid()) else {
        return (0, 0, false);
    };
    // SAFETY: map value pointer, valid for this program run.
    let st = unsafe { &*st };
    let dma = innermost(st, level::DMA_API);
    let inner = innermost(st, level::INNER);
    let iommu = innermost(st, level::IOMMU);
    // Measured on 6.18 and 7.2 (flush-strict, VT-d caching mode): the IOVA
    // API's dma_iova_link/dma_iova_sync flush inside the DMA-API call with
    // no timed iommu_map/iotlb_sync around them: 2.8 of 4.7 ms were left
    // outside any IOMMU time before they counted as IOMMU work.
    let dma_work = dma.map_or(false, |i| st.iommu_work[i] != 0);
    let nested = inner.is_some() || iommu.is_some() || dma_work;
    let via = if dma.is_some() {
        flags::VIA_DMA_API
    } else {
        flags::VIA_DOMAIN
    };
    let candidates = [
        inner.map(|i| st.dev[level::INNER][i]),
        iommu.map(|i| st.dev[level::IOMMU][i]),
    ];
    for d in candidates.into_iter().flatten() {
        if d != 0 {
            return (d, via, nested);
        }
    }
    match dma.map(|i| st.dev[level::DMA_API][i]) {
        Some(d) if d != 0 => (d, flags::VIA_DMA_API, nested),
        _ => (0, 0, nested),
    }
}

/// The device learnt for IOMMU domain `domain` (0: unknown).
#[inline(always)]
pub fn domain_device(domain: u64) -> u64 {
    if domain == 0 {
        return 0;
    }
    // SAFETY: value copied out immediately.
    unsafe { DOMAIN_DEVS.get(&domain) }.copied().unwrap_or(0)
}

#[inline(always)]
fn state() -> Option<&'static mut TaskState> {
    let t = tid();
    if TASKS.get_ptr_mut(&t).is_none() {
        // A new task's zeroed state comes from a map value, not the stack:
        // TaskState (320 bytes) plus a scatterlist walk's frame would pass
        // the 512-byte stack limit.
        let zero = ZERO_TASK.get_ptr(0);
        if let Some(z) = zero {
            // SAFETY: map value pointer, valid for this program run.
            let _ = TASKS.insert(&t, unsafe { &*z }, BPF_NOEXIST as u64);
        }
    }
    // SAFETY: map value pointer, valid for this program run.
    TASKS.get_ptr_mut(&t).map(|p| unsafe { &mut *p })
}

/// A call in flight longer than this lost its exit (a missed fexit, or an
/// interrupt handler's call that never returned through us): its slot is
/// free again.
const STALE_NS: u64 = 10_000_000_000;

/// Entry of a timed function at level `lvl`. `dev` is its `struct device *`
/// argument (0 if it has none), `domain` its `struct iommu_domain *` (0 if none).
#[inline(always)]
pub fn enter(lvl: usize, dev: u64, domain: u64, addr: u64) {
    enter_args(lvl, dev, domain, addr, None, false);
}

/// A DMA-API call's entry; `args` (its arguments 1 to 5) are kept for the
/// kretprobe, which sees only the return value.
#[inline(always)]
pub fn enter_dma(o: u32, dev: u64, args: Option<&[u64; DMA_ARGS]>) {
    enter_args(level::DMA_API, dev, 0, 0, args, op::is_iommu_work(o));
}

#[inline(always)]
fn enter_args(
    lvl: usize,
    dev: u64,
    domain: u64,
    addr: u64,
    args: Option<&[u64; DMA_ARGS]>,
    iommu_work: bool,
) {
    if lvl >= level::COUNT {
        return;
    }
    let Some(st) = state() else { return };
    let t = now();
    // The task's own slot, or the nesting slot when an interrupt handler
    // calls in while the task is mid-call at the same level.
    let slot = if st.ts[lvl][0] == 0 || t.saturating_sub(st.ts[lvl][0]) > STALE_NS {
        0
    } else if st.ts[lvl][1] == 0 || t.saturating_sub(st.ts[lvl][1]) > STALE_NS {
        1
    } else {
        stat_inc(stat::TIMING_NEST_FULL);
        return;
    };
    let mut d = dev;
    if lvl == level::IOMMU {
        let outer = innermost(st, level::DMA_API).map_or(0, |i| st.dev[level::DMA_API][i]);
        if outer != 0 {
            d = outer;
            if domain != 0 {
                let _ = DOMAIN_DEVS.insert(&domain, &d, 0);
            }
        } else if domain != 0 {
            // SAFETY: value copied out immediately.
            d = unsafe { DOMAIN_DEVS.get(&domain) }.copied().unwrap_or(0);
        }
    } else if lvl == level::IRQ {
        // An interrupt handler belongs to no device of the interrupted task.
        d = 0;
    } else if lvl == level::INNER && d == 0 {
        d = match innermost(st, level::IOMMU) {
            Some(i) => st.dev[level::IOMMU][i],
            None => innermost(st, level::DMA_API).map_or(0, |i| st.dev[level::DMA_API][i]),
        };
    }
    st.ts[lvl][slot] = t;
    st.dev[lvl][slot] = d;
    st.addr[lvl][slot] = addr;
    if let Some(a) = args {
        st.args[slot] = *a;
    }
    if lvl == level::DMA_API {
        st.iommu_work[slot] = iommu_work as u64;
    }
}

/// Exit of a timed function: records its duration for (device, op).
#[inline(always)]
pub fn exit(lvl: usize, o: u32) {
    let _ = exit_args(lvl, o);
}

/// Exit of a DMA-API call: its device and the arguments its entry kept
/// (None when the entry was not seen or found no free nesting slot).
#[inline(always)]
pub fn exit_dma(o: u32) -> Option<(u64, [u64; DMA_ARGS])> {
    exit_args(level::DMA_API, o)
}

#[inline(always)]
fn exit_args(lvl: usize, o: u32) -> Option<(u64, [u64; DMA_ARGS])> {
    if lvl >= level::COUNT {
        return None;
    }
    let st = TASKS.get_ptr_mut(&tid())?;
    // SAFETY: map value pointer, valid for this program run.
    let st = unsafe { &mut *st };
    let slot = innermost(st, lvl)?;
    let start = st.ts[lvl][slot];
    let ns = now().saturating_sub(start);
    let dev = st.dev[lvl][slot];
    let addr = st.addr[lvl][slot];
    let args = if lvl == level::DMA_API {
        st.args[slot]
    } else {
        [0; DMA_ARGS]
    };
    st.ts[lvl][slot] = 0;
    st.dev[lvl][slot] = 0;
    record_latency(dev, o, ns);
    let mut ev = base_event(kind::LATENCY, dev, 0);
    ev.size = ns;
    ev.aux = o as u64;
    ev.addr = addr;
    emit_hot_any(&mut ev);
    Some((dev, args))
}

/// Exit of a DMA-API call timed by fexit (arguments in its context).
#[inline(always)]
pub fn exit_dma_timing(o: u32) {
    exit(level::DMA_API, o);
}

#[inline(always)]
pub fn log2(mut v: u64) -> u32 {
    let mut r = 0;
    if v >= 1 << 32 {
        v >>= 32;
        r += 32;
    }
    if v >= 1 << 16 {
        v >>= 16;
        r += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        r += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        r += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        r += 2;
    }
    if v >= 1 << 1 {
        r += 1;
    }
    r
}

#[inline(always)]
pub fn record_latency(dev: u64, o: u32, ns: u64) {
    record_latency_n(dev, o, ns, 1);
}

/// `n` samples of `ns` for (device, op): the links one dma_iova_destroy ends.
#[inline(always)]
pub fn record_latency_n(dev: u64, o: u32, ns: u64, n: u64) {
    let key = LatKey {
        dev,
        op: o,
        _pad: 0,
    };
    add_to_hist_n(&LAT_HIST, &key, ns, n);
}

/// `ns`'s log2 bucket, the last one holding everything above it.
#[inline(always)]
pub fn lat_bucket(ns: u64) -> usize {
    (log2(ns) as usize).min(LAT_BUCKETS - 1)
}

/// Adds `ns` to `key`'s log2 histogram in `map` (LAT_HIST, INVAL_HIST),
/// creating it empty first.
#[inline(always)]
pub fn add_to_hist<K>(map: &PerCpuHashMap<K, LatHist>, key: &K, ns: u64) {
    add_to_hist_n(map, key, ns, 1);
}

/// `add_to_hist` of `n` samples of `ns` at once.
#[inline(always)]
pub fn add_to_hist_n<K>(map: &PerCpuHashMap<K, LatHist>, key: &K, ns: u64, n: u64) {
    let b = lat_bucket(ns);
    if map.get_ptr_mut(key).is_none() {
        // The empty histogram (344 bytes) comes from a map value: on the
        // stack it pushed the scatterlist hooks past the 512-byte limit
        // (program + bpf_loop callback frames).
        if let Some(empty) = ZERO_HIST.get_ptr(0) {
            // SAFETY: map value pointer, valid for this program run.
            let _ = map.insert(key, unsafe { &*empty }, BPF_NOEXIST as u64);
        }
    }
    if let Some(h) = map.get_ptr_mut(key) {
        // SAFETY: this CPU's value; fentry programs may be preempted, hence
        // atomic adds.
        unsafe {
            atomic_add(core::ptr::addr_of_mut!((*h).count), n);
            atomic_add(core::ptr::addr_of_mut!((*h).sum_ns), ns.wrapping_mul(n));
            // A racing max may keep the smaller of two values: acceptable for
            // a maximum, unlike a lost count.
            if ns > (*h).max_ns {
                (*h).max_ns = ns;
            }
            if b < LAT_BUCKETS {
                atomic_add(core::ptr::addr_of_mut!((*h).buckets[b]), n);
            }
        }
    }
}

/// Learns domain -> device (`timing_slots`' attach programs).
#[inline(always)]
pub fn learn_domain(domain: u64, dev: u64) {
    if domain != 0 && dev != 0 {
        let _ = DOMAIN_DEVS.insert(&domain, &dev, 0);
    }
}
