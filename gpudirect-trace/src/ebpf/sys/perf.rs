//! perf_event_open() and the two ioctls that put a kprobe program on a
//! tracefs-made kprobe event (`kprobe_events`): what aya 0.13 does only for
//! the kprobe PMU, whose probes the kernel keeps no per-probe hit or miss
//! count of that userspace can read before Linux 6.7. One typed
//! `#[repr(C)]` attr, its size asserted.

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd, OwnedFd},
};

/// `struct perf_event_attr` as far as PERF_ATTR_SIZE_VER0 (64 bytes, every
/// kernel since 2.6.31): enough for a tracepoint event. The kernel zeroes
/// the rest of its own, larger struct.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PerfEventAttr {
    pub type_: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    /// The bitfield word: bit 0 `disabled`, the rest zero here.
    pub flags: u64,
    pub wakeup_events: u32,
    pub bp_type: u32,
    pub config1: u64,
}
const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 64);

/// `PERF_TYPE_TRACEPOINT`: `config` is a tracefs event id.
pub const PERF_TYPE_TRACEPOINT: u32 = 2;
const FLAG_DISABLED: u64 = 1;
pub const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// `_IOW('$', 8, __u32)`.
pub const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;
/// `_IO('$', 0)`.
pub const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;

/// A disabled perf event of tracefs event `id` on CPU 0 for every task: a
/// BPF program set on it runs wherever the event fires (the kernel keeps
/// the program on the event's `trace_event_call`, not on the CPU).
pub fn open_tracepoint(id: u64) -> io::Result<OwnedFd> {
    let attr = PerfEventAttr {
        type_: PERF_TYPE_TRACEPOINT,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: id,
        sample_period: 1,
        wakeup_events: 1,
        flags: FLAG_DISABLED,
        ..Default::default()
    };
    // SAFETY: `attr` is a live, plain-integer struct of the size it states;
    // pid -1, cpu 0, no group.
    unsafe {
        super::call(super::Syscall::PerfEventOpen {
            attr: &attr,
            pid: -1,
            cpu: 0,
            group_fd: -1,
            flags: PERF_FLAG_FD_CLOEXEC,
        })
    }
    .map(super::owned)
}

/// Runs BPF program `prog` (a kprobe program) on every hit of `event`,
/// then enables the event.
pub fn set_bpf_and_enable(event: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> io::Result<()> {
    for (request, arg) in [
        (PERF_EVENT_IOC_SET_BPF, prog.as_raw_fd() as libc::c_ulong),
        (PERF_EVENT_IOC_ENABLE, 0),
    ] {
        // SAFETY: both requests take an integer argument, not a pointer.
        unsafe {
            super::call(super::Syscall::Ioctl {
                fd: event.as_raw_fd(),
                request,
                arg,
            })
        }?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    use aya_obj::generated::perf_event_attr;

    use super::*;

    #[test]
    fn attr_prefix_matches_the_kernel_header() {
        // Field names, not values: offset_of! needs them at compile time.
        macro_rules! same_offset {
            ($ours:ident, $kernels:ident) => {
                assert_eq!(
                    offset_of!(PerfEventAttr, $ours),
                    offset_of!(perf_event_attr, $kernels),
                    stringify!($ours)
                )
            };
        }
        same_offset!(config, config);
        same_offset!(read_format, read_format);
        same_offset!(wakeup_events, __bindgen_anon_2);
        same_offset!(bp_type, bp_type);
        same_offset!(config1, __bindgen_anon_3);
        // PERF_ATTR_SIZE_VER0.
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 64);
    }

    #[test]
    fn a_bad_event_id_is_an_error_with_the_errno() {
        // No tracefs event has id u64::MAX: ENOENT/EINVAL, or EACCES/EPERM
        // for an unprivileged run; never a descriptor.
        let e = open_tracepoint(u64::MAX).expect_err("no such event");
        assert!(e.raw_os_error().is_some(), "{e}");
    }
}
