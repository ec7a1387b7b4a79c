//! `--stack-depth`: the loader rewrites the stack map's value size, and the
//! kernel then unwinds and keeps at most that many frames (the real
//! dma_map program through BPF_PROG_TEST_RUN, whose stack is the test
//! run's syscall path).

use std::os::fd::AsRawFd as _;

use gpudirect_trace::ebpf::{testrun::run_raw_tracepoint, Tracer, TracerOptions};
use gpudirect_trace_common::maps::STACKS_CAP;

use crate::inject::known_kernel_object;

/// The frames of the one stack the map holds after one dma_map.
fn one_stack(depth: u32) -> Vec<u64> {
    let tracer = Tracer::load(&TracerOptions {
        attach: false,
        stream: true,
        stacks: true,
        stack_depth: depth,
        ..Default::default()
    })
    .expect("load");
    let map = tracer.program_fd("dma_map").expect("dma_map").as_raw_fd();
    // SAFETY: the tracer, owner of the fd, outlives the call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(map) };
    let dev = known_kernel_object().addr;
    run_raw_tracepoint(fd, &[dev, 0x1000, 0x2000_0000, 4096, 1, 0], Some(0)).expect("test run");
    let stacks: Vec<Vec<u64>> = (0..STACKS_CAP).filter_map(|id| tracer.stack(id)).collect();
    assert_eq!(stacks.len(), 1, "one stack kept");
    stacks.into_iter().next().unwrap_or_default()
}

#[test]
fn stack_depth_bounds_the_frames_the_kernel_keeps() {
    crate::require_root();
    let full = one_stack(127);
    assert!(
        full.len() > 4,
        "the test run's stack: {} frames",
        full.len()
    );
    let short = one_stack(4);
    // (Frames themselves differ between loads: the innermost is the JIT'd
    // program, at another address each time.)
    assert_eq!(short.len(), 4, "four frames kept of {}", full.len());
}
