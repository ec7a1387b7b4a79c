//! The tracer's own counters (`STATS`, indexed by
//! `gpudirect_trace_common::stat`: losses, full maps, unreadable names,
//! kprobe runs), and the BPF atomic add that they and every other shared
//! counter use. Below everything else in the crate: what builds events
//! (emit.rs) and what names devices (device.rs) both count here.

use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::{macros::map, maps::PerCpuArray};
use gpudirect_trace_common::stat;

/// Self-metrics, indexed by `gpudirect_trace_common::stat`.
#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

/// Adds `v` to a counter in map memory with a BPF atomic add. Per-CPU is not
/// enough: a program interrupted by an IRQ whose tracepoint runs a program
/// touching the same slot would lose an increment in a read-modify-write
/// (seen on 6.12: 62 of 64 dma_map_sg counted, no recursion miss reported).
#[inline(always)]
pub fn atomic_add(slot: *mut u64, v: u64) {
    // Adding 0 is a no-op, and LLVM rewrites `atomicrmw add p, 0` into an
    // atomic OR, an instruction kernels before 5.12 reject ("BPF_STX uses
    // reserved fields"): skip it.
    if v == 0 {
        return;
    }
    // SAFETY: `slot` points into a map value, 8-byte aligned, valid for the
    // program run. (core's AtomicU64 has no fetch_add on the BPF target; the
    // intrinsic lowers to the BPF atomic add instruction.)
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(slot, v) };
}

#[inline(always)]
pub fn stat_inc(index: u32) {
    if let Some(slot) = STATS.get_ptr_mut(index) {
        atomic_add(slot, 1);
    }
}

/// First thing in every attached kprobe/kretprobe program: the runs the
/// loader compares with the kernel's hit count (`stat::KPROBE_RUNS`).
#[inline(always)]
pub fn kprobe_ran() {
    stat_inc(stat::KPROBE_RUNS);
}
