//! The loader's one system-call layer, for what aya 0.13 does not wrap:
//! bpf() commands (loading fentry/fexit against a module's BTF, finding a
//! module's BTF object, reading a program's run statistics,
//! BPF_PROG_TEST_RUN), perf_event_open() and its ioctls (kprobes made in
//! tracefs), and mmap() of the programs' arrays.
//!
//! Every bpf(), perf_event_open() and ioctl() goes through `call()`, as a
//! `Syscall` that says what the kernel receives; mmap.rs calls mmap() and
//! munmap() itself (a fake could not hand out the array's pages). Errors
//! are `io::Error`s with the kernel's errno;
//! `super::explain` says what they mean. In unit tests `fake::with` can
//! answer in the kernel's place (as aya's `sys/fake.rs` does), so what the
//! callers do with each answer (absence, a vanished object, a refused
//! ioctl) is tested without root or the objects it needs.

mod bpf;
#[cfg(test)]
pub mod fake;
mod mmap;
pub mod perf;

use std::{
    io,
    os::fd::{FromRawFd as _, OwnedFd, RawFd},
};

pub use bpf::{
    btf_fd_by_id, btf_next_id, insn, obj_info, prog_load, prog_load_insns, prog_test_run,
    raw_tracepoint_open, BtfInfo, Cmd, ObjInfo, ProgInfo, ProgLoadAttr, TestRunAttr,
};
#[cfg(test)]
pub use bpf::{IdAttr, ObjInfoAttr};
pub use mmap::{MapView, Mapping};

/// One system call as the kernel receives it.
#[derive(Debug)]
pub enum Syscall<'a> {
    /// bpf(cmd, attr, size).
    Bpf { cmd: Cmd, attr: *mut u8, size: u32 },
    /// perf_event_open(attr, pid, cpu, group_fd, flags).
    PerfEventOpen {
        attr: &'a perf::PerfEventAttr,
        pid: libc::pid_t,
        cpu: libc::c_int,
        group_fd: libc::c_int,
        flags: libc::c_ulong,
    },
    /// ioctl(fd, request, arg) with an integer argument.
    Ioctl {
        fd: RawFd,
        request: libc::c_ulong,
        arg: libc::c_ulong,
    },
}

/// Makes the call; the kernel's non-negative result, or its errno.
///
/// # Safety
/// Every address in the call (and in the structures it points at) must be
/// valid for the kernel to read or write as the call does, for its duration.
unsafe fn call(c: Syscall<'_>) -> io::Result<i64> {
    #[cfg(test)]
    if let Some(answer) = fake::answer(&c) {
        return answer;
    }
    // SAFETY: the caller vouches for the addresses; every other argument
    // is an integer.
    let ret = unsafe {
        match c {
            Syscall::Bpf { cmd, attr, size } => {
                libc::syscall(libc::SYS_bpf, cmd as libc::c_long, attr, size)
            }
            Syscall::PerfEventOpen {
                attr,
                pid,
                cpu,
                group_fd,
                flags,
            } => libc::syscall(
                libc::SYS_perf_event_open,
                attr as *const perf::PerfEventAttr,
                pid,
                cpu,
                group_fd,
                flags,
            ),
            Syscall::Ioctl { fd, request, arg } => i64::from(libc::ioctl(fd, request as _, arg)),
        }
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The descriptor a call just returned, owned (closed on drop).
fn owned(fd: i64) -> OwnedFd {
    // SAFETY: the kernel (or the test's fake, with a descriptor it opened)
    // just returned this new descriptor to us.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}
