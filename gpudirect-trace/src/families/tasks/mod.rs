//! The tasks family: process names kept at exit (sched:sched_process_exit)
//! for the processes that are gone before /proc is read (dd, insmod, a
//! reproducer). The records carry no device; the session keeps the names
//! (`session::names`) and hands them to the tables and trace files.

use crate::catalog::{tp, ProbeSpec};

pub const TRACEPOINTS: &[ProbeSpec] = &[tp(
    "sched:sched_process_exit",
    "sched_process_exit",
    1,
    "2.6.32+ (a second argument, group_dead, on the newest kernels; not read)",
    "/proc/PID/comm while the process runs (short-lived ones read as exited)",
    false,
)];

/// Its programs. Their skipped runs lose no DMA record (at worst a name,
/// counted in `processes_unnamed`), so they are not the losses that make
/// the misuse checks forget what they knew: 7.2's exit program was skipped
/// 3 times in the dma-misuse-module VM run (a preempted run on its CPU),
/// and each skip reset the checks.
pub const PROGRAMS: &[&str] = &["sched_process_exit"];

/// Tracepoint groups this family borrows one event of: their other events
/// (sched_switch, sched_wakeup, ...) are no DMA event the catalog lacks, so
/// `probes` does not list them as not used.
pub const BORROWED_GROUPS: &[&str] = &["sched"];

pub const FAMILY: super::Family = super::Family {
    name: "tasks",
    tracepoints: TRACEPOINTS,
    hooks: &[],
    metrics: &[],
};
