//! Unit tests' stand-in for the kernel: `with(answer, body)` runs `body`
//! with every `call()` of this thread answered by `answer` instead of the
//! kernel. Cleared on return and on panic.

use std::{cell::RefCell, fs::File, io, os::fd::IntoRawFd as _};

use super::Syscall;

type Answer = Box<dyn FnMut(&Syscall<'_>) -> io::Result<i64>>;

thread_local! {
    static FAKE: RefCell<Option<Answer>> = const { RefCell::new(None) };
}

pub(super) fn answer(c: &Syscall<'_>) -> Option<io::Result<i64>> {
    FAKE.with(|f| f.borrow_mut().as_mut().map(|answer| answer(c)))
}

/// Runs `body` with the kernel replaced by `answer`.
pub fn with<R>(
    answer: impl FnMut(&Syscall<'_>) -> io::Result<i64> + 'static,
    body: impl FnOnce() -> R,
) -> R {
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            FAKE.with(|f| f.borrow_mut().take());
        }
    }
    FAKE.with(|f| *f.borrow_mut() = Some(Box::new(answer)));
    let _clear = Clear;
    body()
}

/// A real descriptor (of /dev/null) for a fake to return where the kernel
/// would return a new one: the caller owns and closes it.
pub fn descriptor() -> io::Result<i64> {
    Ok(i64::from(File::open("/dev/null")?.into_raw_fd()))
}

/// The kernel's refusal with `errno`.
pub fn errno(errno: i32) -> io::Result<i64> {
    Err(io::Error::from_raw_os_error(errno))
}

#[cfg(test)]
mod tests {
    use std::{
        cell::RefCell,
        os::fd::{AsFd as _, AsRawFd as _},
        rc::Rc,
    };

    use super::{super::*, *};

    #[test]
    fn absence_is_none_and_other_errors_are_errors() {
        // BPF_BTF_GET_NEXT_ID past the last object, BPF_BTF_GET_FD_BY_ID of
        // an object unloaded meanwhile: ENOENT, which means "none".
        let none = with(
            |_| errno(libc::ENOENT),
            || {
                (
                    btf_next_id(7).expect("present"),
                    btf_fd_by_id(7).expect("present").is_none(),
                )
            },
        );
        assert_eq!(none, (None, true));
        let refused = with(|_| errno(libc::EPERM), || btf_next_id(0)).expect_err("an error");
        assert_eq!(refused.raw_os_error(), Some(libc::EPERM));
    }

    #[test]
    fn next_id_passes_the_start_and_reads_the_kernels_answer() {
        let seen = with(
            |c| match *c {
                Syscall::Bpf { cmd, attr, size } => {
                    assert_eq!((cmd, size), (Cmd::BtfGetNextId, 12));
                    // SAFETY: BPF_BTF_GET_NEXT_ID's attr is an IdAttr.
                    let a = unsafe { &mut *attr.cast::<IdAttr>() };
                    a.next_id = a.id + 5;
                    Ok(0)
                }
                _ => panic!("{c:?}"),
            },
            || btf_next_id(10),
        );
        assert_eq!(seen.expect("present"), Some(15));
    }

    #[test]
    fn a_tracepoint_event_is_opened_disabled_for_every_task_then_enabled() {
        let calls = Rc::new(RefCell::new(Vec::new()));
        let log = calls.clone();
        let prog = File::open("/dev/null").expect("present");
        let prog_fd = prog.as_raw_fd() as libc::c_ulong;
        let event = with(
            move |c| {
                match *c {
                    Syscall::PerfEventOpen { attr, .. } => {
                        assert_eq!(
                            (attr.type_, attr.size, attr.config, attr.flags),
                            (perf::PERF_TYPE_TRACEPOINT, 64, 4242, 1),
                            "a disabled tracepoint event of id 4242"
                        );
                        // Every task, CPU 0, no group, close-on-exec.
                        let every_task = matches!(
                            *c,
                            Syscall::PerfEventOpen {
                                pid: -1,
                                cpu: 0,
                                group_fd: -1,
                                flags: perf::PERF_FLAG_FD_CLOEXEC,
                                ..
                            }
                        );
                        assert!(every_task, "{c:?}");
                        log.borrow_mut().push("open".to_string());
                        return descriptor();
                    }
                    Syscall::Ioctl { request, arg, .. } => {
                        log.borrow_mut().push(format!("{request:#x} {arg}"));
                    }
                    Syscall::Bpf { .. } => panic!("{c:?}"),
                }
                Ok(0)
            },
            || {
                let event = perf::open_tracepoint(4242)?;
                perf::set_bpf_and_enable(event.as_fd(), prog.as_fd())?;
                io::Result::Ok(event)
            },
        );
        assert!(event.is_ok(), "{event:?}");
        assert_eq!(
            *calls.borrow(),
            [
                "open".to_string(),
                format!("{:#x} {prog_fd}", perf::PERF_EVENT_IOC_SET_BPF),
                format!("{:#x} 0", perf::PERF_EVENT_IOC_ENABLE),
            ]
        );
    }

    #[test]
    fn a_refused_program_leaves_the_event_disabled() {
        // PERF_EVENT_IOC_SET_BPF refused (EINVAL: not a kprobe program):
        // the event must not be enabled, and the errno comes back.
        let requests = Rc::new(RefCell::new(Vec::new()));
        let log = requests.clone();
        let dev_null = File::open("/dev/null").expect("present");
        let e = with(
            move |c| match *c {
                Syscall::Ioctl { request, .. } => {
                    log.borrow_mut().push(request);
                    errno(libc::EINVAL)
                }
                _ => panic!("{c:?}"),
            },
            || perf::set_bpf_and_enable(dev_null.as_fd(), dev_null.as_fd()),
        )
        .expect_err("an error");
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
        assert_eq!(*requests.borrow(), [perf::PERF_EVENT_IOC_SET_BPF]);
    }

    #[test]
    fn the_fake_is_gone_after_its_body() {
        with(|_| errno(libc::EPERM), || ());
        assert!(answer(&Syscall::Ioctl {
            fd: -1,
            request: 0,
            arg: 0
        })
        .is_none());
    }
}
