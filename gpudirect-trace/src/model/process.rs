//! Who did it: a process as the source that knows names it.
//!
//! Two sources name processes, and they are not equally trustworthy. A
//! driver's own report (`NVRM: Xid (...): 31, pid=619, name=xid, ...`) names
//! the process at fault. A tracepoint's current task is whatever ran when it
//! fired: for a DMA-API call that is the caller (or, from a completion
//! interrupt, whichever task was interrupted); for an Xid it is the driver's
//! worker or an interrupt, rarely the faulting process (seen on the H200:
//! the Xid 31 of pid 619 fired in pid 181). Every attribution says which.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcessOrigin {
    /// Named by the report itself (the driver's line or message).
    Reported,
    /// The task current when the tracepoint fired; may be unrelated to the
    /// event (an interrupt handler, a driver worker).
    CurrentTask,
    /// No process: the record was made in interrupt context (hard
    /// interrupt, softirq or NMI; `flags::IN_INTERRUPT`).
    Interrupt,
}

/// The pid under which records made in interrupt context are counted
/// (Linux pids stay below 2^22): never shown as a number.
pub const INTERRUPT_PID: u32 = u32::MAX - 1;

/// Who a record's work belongs to: its task, or `INTERRUPT_PID`.
pub fn task_of(ev: &gpudirect_trace_common::Event) -> u32 {
    if ev.flags & gpudirect_trace_common::flags::IN_INTERRUPT != 0 {
        INTERRUPT_PID
    } else {
        ev.pid
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Process {
    /// Thread-group id (what users call the pid); 0 where unknown.
    pub pid: u32,
    /// The process name where the source gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    pub from: ProcessOrigin,
}

impl Process {
    pub fn reported(pid: u32, comm: Option<String>) -> Self {
        Self {
            pid,
            comm,
            from: ProcessOrigin::Reported,
        }
    }

    pub fn current_task(pid: u32) -> Self {
        Self {
            pid,
            comm: None,
            from: ProcessOrigin::CurrentTask,
        }
    }

    pub fn interrupt() -> Self {
        Self {
            pid: 0,
            comm: None,
            from: ProcessOrigin::Interrupt,
        }
    }

    /// The process of a `task_of` value: None for 0 (unknown).
    pub fn of_task(pid: u32) -> Option<Self> {
        match pid {
            0 => None,
            INTERRUPT_PID => Some(Self::interrupt()),
            p => Some(Self::current_task(p)),
        }
    }
}

impl std::fmt::Display for Process {
    /// `pid 619 (xid)`, or `pid 181 [current task]` when only the
    /// tracepoint's current task is known.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.from == ProcessOrigin::Interrupt {
            return f.write_str("interrupt context");
        }
        match (&self.comm, self.pid) {
            (Some(c), 0) => write!(f, "{c}")?,
            (Some(c), p) => write!(f, "pid {p} ({c})")?,
            (None, p) => write!(f, "pid {p}")?,
        }
        if self.from == ProcessOrigin::CurrentTask {
            f.write_str(" [current task]")?;
        }
        Ok(())
    }
}
