//! BPF_PROG_TEST_RUN for raw tracepoint programs: runs the REAL loaded
//! program once with synthetic TP_PROTO arguments, as if the tracepoint had
//! fired. Used by the host integration tests and `cargo xtask bench` to drive
//! events through the whole pipeline on a kernel where no device does DMA,
//! and by the loader to read jiffies (`ebpf/jiffies.rs`).
//! (aya 0.13 has no wrapper for it; the call is `sys::prog_test_run`.)

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd},
};

use super::sys::{self, TestRunAttr};

const BPF_F_TEST_RUN_ON_CPU: u32 = 1;

/// Runs a raw tracepoint program once with `args` as its arguments, on `cpu`
/// if given (raw tracepoint test runs support pinning to a CPU since 5.10).
/// Returns the program's return value.
pub fn run_raw_tracepoint(prog: BorrowedFd<'_>, args: &[u64], cpu: Option<u32>) -> io::Result<u32> {
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        ctx_size_in: std::mem::size_of_val(args) as u32,
        ctx_in: args.as_ptr() as u64,
        ..Default::default()
    };
    if let Some(cpu) = cpu {
        attr.flags = BPF_F_TEST_RUN_ON_CPU;
        attr.cpu = cpu;
    }
    sys::prog_test_run(&mut attr)?;
    Ok(attr.retval)
}
