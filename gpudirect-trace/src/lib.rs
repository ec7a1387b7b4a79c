//! gpudirect-trace: eBPF tracing of the Linux DMA and IOMMU paths.
//!
//! Data flow (docs/architecture.md): kernel tracepoints -> eBPF programs
//! (`gpudirect-trace-ebpf`) -> BPF ring buffer + per-CPU maps -> [`ebpf`]
//! (load, attach, drain) -> [`decode`] -> [`aggregate`] -> sinks ([`live`]).

pub mod cli;
pub mod faults;
