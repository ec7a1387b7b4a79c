//! Any program's context as the raw pointer it is, for the helpers that
//! only pass it on to the kernel: a tail call (sg.rs), a stack id
//! (stacks.rs), a perf event output (debug_log.rs). Those helpers want an
//! `EbpfContext`; the walks and hooks that call them carry the pointer of
//! whichever kind of program runs them (raw tracepoint, fentry/fexit,
//! kprobe/kretprobe).

use core::ffi::c_void;

use aya_ebpf::EbpfContext;

pub struct AnyCtx(pub *mut c_void);

impl EbpfContext for AnyCtx {
    fn as_ptr(&self) -> *mut c_void {
        self.0
    }
}
