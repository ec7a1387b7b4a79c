//! The tasks family: what the tracer needs to name the processes it saw.
//!
//! sched:sched_process_exit fires in do_exit() with the exiting task as
//! current, before its /proc entry goes (that happens when it is reaped):
//! the one moment a short-lived process's name (dd, insmod, a CUDA test
//! binary) is certainly still there. The loader looks names up in /proc on
//! its tick; by then such a process is gone (`"comm": null` before this,
//! measured with dd in the 6.12 and 6.18 VMs and insmod on 6.1).

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use gpudirect_trace_common::kind;

use crate::emit::{base_event, cfg_stream, emit_hot};

/// sched:sched_process_exit(struct task_struct *p[, bool group_dead]):
/// `p` is current; only the thread-group leader's exit names the process
/// (its pid is the one records carry).
#[raw_tracepoint]
pub fn sched_process_exit(_ctx: RawTracePointContext) -> i32 {
    // Aggregate-only keeps no per-process rows: nothing to name.
    if !cfg_stream() {
        return 0;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    if (pid_tgid >> 32) as u32 != pid_tgid as u32 {
        return 0;
    }
    let Ok(comm) = bpf_get_current_comm() else {
        return 0;
    };
    let mut ev = base_event(kind::PROC_EXIT, 0, 0);
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&comm[i..i + 8]);
        u64::from_le_bytes(w)
    };
    ev.addr = word(0);
    ev.phys = word(8);
    // Its cgroup (v2 id: the directory's inode), for its container.
    // SAFETY: helper without preconditions (4.18+).
    ev.size = unsafe { aya_ebpf::helpers::bpf_get_current_cgroup_id() };
    // Streamed as the DMA records are, without forcing a wake-up: the name
    // can wait for the reader's next drain (its timer or the backlog), and
    // a forced wake-up is an irq_work on the exiting CPU and a reader
    // wake-up per process, thousands a second on a host that forks a lot.
    emit_hot(&mut ev);
    0
}
