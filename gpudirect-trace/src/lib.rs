//! gpudirect-trace: eBPF tracing of the Linux DMA and IOMMU paths.
//!
//! Data flow (docs/architecture.md): kernel tracepoints -> eBPF programs
//! (`gpudirect-trace-ebpf`) -> BPF ring buffer + per-CPU maps -> [`ebpf`]
//! (load, attach, drain) -> [`decode`] -> [`session`] (one driver) ->
//! [`analysis`] (the [`aggregate`] tables and the fault ledger, over the
//! [`model`]'s types) -> sinks: [`live`], [`record`] (trace files, read back
//! by [`report`] and [`export`] through the same analysis), [`flight`] (a
//! bounded ring of the same blocks, snapshots on triggers) and [`serve`].
//! [`commands`] is the CLI; nothing below it sees clap's types. Beside the
//! trace path: [`probes`] (what attaches here and why), [`doctor`] (host
//! checks from sysfs/procfs and NVML) and [`selftest`].

pub mod aggregate;
pub mod analysis;
pub mod btf;
pub mod catalog;
pub mod commands;
pub mod decode;
pub mod doctor;
pub mod ebpf;
pub mod export;
pub mod families;
pub mod faults;
pub mod flight;
pub mod ftrace;
pub mod gpu;
pub mod hosttree;
pub mod kernel;
pub mod live;
pub mod memory_budget;
pub mod metrics;
pub mod model;
pub mod outfile;
pub mod output;
pub mod probes;
pub mod record;
pub mod render;
pub mod report;
pub mod sanitize;
pub mod selftest;
pub mod serve;
pub mod session;
pub mod summary;
pub mod symbols;
pub mod tracefile;
pub mod version;

#[cfg(test)]
mod layering_tests;
