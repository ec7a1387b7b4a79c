//! BPF_PROG_TEST_RUN for raw tracepoint programs: runs the REAL loaded
//! program once with synthetic TP_PROTO arguments, as if the tracepoint had
//! fired. Used by the host integration tests and `cargo xtask bench` to drive
//! events through the whole pipeline on a kernel where no device does DMA.
//! (aya 0.13 has no wrapper for it; the syscall is small.)

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd},
};

const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_F_TEST_RUN_ON_CPU: u32 = 1;

/// The `test` member of `union bpf_attr` (include/uapi/linux/bpf.h).
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

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
    // SAFETY: `attr` is a valid bpf_attr prefix; `args` outlives the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &mut attr as *mut TestRunAttr,
            std::mem::size_of::<TestRunAttr>() as u32,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr.retval)
}
