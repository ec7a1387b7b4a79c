//! Test support for the host tests (tests/host/sg_walk.rs, bench.rs), built
//! as its own object and never loaded by gpudirect-trace itself.
//!
//! A host test cannot hand a kernel scatterlist to the programs from
//! userspace memory: bpf_probe_read_kernel refuses user addresses. The
//! values of a BPF array map are contiguous kernel memory, though (one
//! vmalloc area, elements `value_size` apart), which userspace can fill
//! with BPF_MAP_UPDATE_ELEM. `arena_addr` reveals where that memory is, so
//! the test can write `struct scatterlist` entries, chain pointers and end
//! marks into it at their kernel addresses and run the REAL dma_map_sg
//! program over them with BPF_PROG_TEST_RUN.
#![no_std]
#![no_main]

use aya_ebpf::EbpfContext as _;
use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_prandom_u32, bpf_jiffies64, bpf_ktime_get_ns,
        bpf_probe_read_kernel,
    },
    macros::{map, raw_tracepoint},
    maps::{Array, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::RawTracePointContext,
};
use gpudirect_trace_common::{Counter, CounterKey, Event, PREEMPT_IRQ_MASK};

/// Bytes per element: one `struct scatterlist` on x86_64 (the test lays
/// entries out at the kernel's own stride, across elements if it differs).
pub const ELEM: usize = 32;
/// 128 Ki elements: 4 MiB of kernel memory, room for 100,000 entries and
/// the gaps between chained arrays.
pub const ELEMS: u32 = 131_072;

#[map]
static SG_ARENA: Array<[u8; ELEM]> = Array::with_max_entries(ELEMS, 0);

/// Slot 0: the kernel address of `SG_ARENA`'s element 0.
#[map]
static ARENA_ADDR: Array<u64> = Array::with_max_entries(1, 0);

/// Does nothing: `cargo xtask bench` runs it to measure the floor of the
/// kernel's per-run accounting (the clock reads around every run), which
/// every program's ns/hit includes (tests/host/bench.rs). Here, not in the
/// tool's object: nothing the tool loads needs it.
#[raw_tracepoint]
pub fn bench_floor(_ctx: RawTracePointContext) -> i32 {
    0
}

/// Writes the address of the arena's first element into `ARENA_ADDR`.
#[raw_tracepoint]
pub fn arena_addr(_ctx: RawTracePointContext) -> i32 {
    let (Some(base), Some(out)) = (SG_ARENA.get_ptr(0), ARENA_ADDR.get_ptr_mut(0)) else {
        return 1;
    };
    // SAFETY: `out` is this map's value; storing a kernel address into it
    // is a pointer leak the verifier allows only to privileged loaders,
    // which a host test is (root).
    unsafe { *out = base as u64 };
    0
}

// The hot path's parts, one program each, for the per-hit benchmark
// (tests/host/bench_parts.rs): what each costs on the running kernel, from
// bpf_stats against `part_empty`. Own maps, shaped like the tool's.

#[map]
static PART_RING: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

#[map]
static PART_HASH: PerCpuHashMap<CounterKey, Counter> = PerCpuHashMap::with_max_entries(1024, 0);

#[map]
static PART_ARRAY: PerCpuArray<Counter> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn arg(ctx: &RawTracePointContext, i: usize) -> u64 {
    // SAFETY: raw tracepoint context is an array of u64 arguments; the
    // benchmark passes at least two.
    unsafe { *(ctx.as_ptr() as *const u64).add(i) }
}

/// Nothing: the floor of the accounting.
#[raw_tracepoint]
pub fn part_empty(_ctx: RawTracePointContext) -> i32 {
    0
}

/// A per-CPU array lookup and two adds (the hot path's CPU_STATE).
#[raw_tracepoint]
pub fn part_percpu_array(ctx: RawTracePointContext) -> i32 {
    if let Some(c) = PART_ARRAY.get_ptr_mut(0) {
        // SAFETY: this CPU's value.
        unsafe {
            (*c).count += 1;
            (*c).bytes += arg(&ctx, 1);
        }
    }
    0
}

/// A per-CPU hash lookup of a 16-byte key and two adds (the counter).
#[raw_tracepoint]
pub fn part_percpu_hash(ctx: RawTracePointContext) -> i32 {
    let key = CounterKey::new(arg(&ctx, 0), 1, 0, 1);
    let c = match PART_HASH.get_ptr_mut(&key) {
        Some(c) => c,
        None => {
            let _ = PART_HASH.insert(&key, &Counter::default(), 0);
            return 0;
        }
    };
    // SAFETY: this CPU's value.
    unsafe {
        (*c).count += 1;
        (*c).bytes += arg(&ctx, 1);
    }
    0
}

/// bpf_ktime_get_ns.
#[raw_tracepoint]
pub fn part_ktime(_ctx: RawTracePointContext) -> i32 {
    // SAFETY: helper without preconditions.
    let t = unsafe { bpf_ktime_get_ns() };
    (t & 1) as i32
}

/// bpf_jiffies64 (5.5+): the tick counter, no clocksource read.
#[raw_tracepoint]
pub fn part_jiffies(_ctx: RawTracePointContext) -> i32 {
    // SAFETY: helper without preconditions.
    let t = unsafe { bpf_jiffies64() };
    (t & 1) as i32
}

/// bpf_get_prandom_u32: a per-CPU pseudo-random number.
#[raw_tracepoint]
pub fn part_prandom(_ctx: RawTracePointContext) -> i32 {
    // SAFETY: helper without preconditions.
    let r = unsafe { bpf_get_prandom_u32() };
    (r & 1) as i32
}

/// bpf_get_current_pid_tgid.
#[raw_tracepoint]
pub fn part_pid_tgid(_ctx: RawTracePointContext) -> i32 {
    (bpf_get_current_pid_tgid() & 1) as i32
}

#[inline(always)]
fn event(ctx: &RawTracePointContext) -> Event {
    Event {
        kind: 1,
        dev: arg(ctx, 0),
        size: arg(ctx, 1),
        ..Default::default()
    }
}

/// A 64-byte record through bpf_ringbuf_reserve + submit (no wake-up).
#[raw_tracepoint]
pub fn part_reserve_submit(ctx: RawTracePointContext) -> i32 {
    let ev = event(&ctx);
    match PART_RING.reserve::<Event>(0) {
        Some(mut e) => {
            e.write(ev);
            e.submit(BPF_RB_NO_WAKEUP as u64);
            0
        }
        None => 1,
    }
}

/// The same record through bpf_ringbuf_output (one helper call).
#[raw_tracepoint]
pub fn part_output(ctx: RawTracePointContext) -> i32 {
    let ev = event(&ctx);
    i32::from(PART_RING.output(&ev, BPF_RB_NO_WAKEUP as u64).is_err())
}

/// The interrupt-context test of `emit::stamp` once its CPU's address is
/// cached: a per-CPU array lookup and one 4-byte kernel read (here of this
/// CPU's PART_ARRAY value; the benchmark's second argument is below 2^63,
/// so the offset added is 0 without the compiler knowing).
#[raw_tracepoint]
pub fn part_preempt_count(ctx: RawTracePointContext) -> i32 {
    let Some(p) = PART_ARRAY.get_ptr_mut(0) else {
        return 0;
    };
    let zero = arg(&ctx, 1) >> 63;
    // SAFETY: bpf_probe_read_kernel checks the address.
    match unsafe { bpf_probe_read_kernel((p as u64 + zero) as *const u32) } {
        Ok(pc) => (pc & PREEMPT_IRQ_MASK != 0) as i32,
        Err(_) => 1,
    }
}

/// bpf_ringbuf_query of the backlog (the wake-up check).
#[raw_tracepoint]
pub fn part_query(_ctx: RawTracePointContext) -> i32 {
    (PART_RING.query(BPF_RB_AVAIL_DATA as u64) & 1) as i32
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
