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

use aya_ebpf::{
    macros::{map, raw_tracepoint},
    maps::Array,
    programs::RawTracePointContext,
};

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

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
