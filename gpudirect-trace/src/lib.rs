//! gpudirect-trace: eBPF tracing of the Linux DMA and IOMMU paths.
//!
//! Data flow (docs/architecture.md): kernel tracepoints -> eBPF programs
//! (`gpudirect-trace-ebpf`) -> BPF ring buffer + per-CPU maps -> [`ebpf`]
//! (load, attach, drain) -> [`decode`] -> [`aggregate`] -> sinks ([`live`], [`serve`]).

pub mod aggregate;
pub mod btf;
pub mod catalog;
pub mod cli;
pub mod decode;
pub mod doctor;
pub mod ebpf;
pub mod export;
pub mod faults;
pub mod kernel;
pub mod live;
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
pub mod tracefile;
