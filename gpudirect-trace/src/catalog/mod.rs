//! The probe catalog: every probe point gpudirect-trace knows, as data.
//!
//! Like kunai's per-probe kernel ranges, each entry says which kernels or
//! drivers have the probe point and what covers for it where it is missing.
//! At start-up the loader checks each entry against the running kernel
//! (BTF, tracefs) and attaches what exists; `gpudirect-trace probes` prints
//! the outcome. Argument positions are those of the kernel's TP_PROTO; the
//! programs read only arguments that every listed kernel has (see
//! `args_read`), and the loader compares that with the prototype in BTF.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeKind {
    /// BPF_PROG_TYPE_RAW_TRACEPOINT on a kernel or module tracepoint.
    RawTracepoint,
}

impl ProbeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::RawTracepoint => "raw_tracepoint",
        }
    }
}

/// Where a probe point lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    Kernel,
    /// A kernel module that must be loaded (e.g. "nvidia").
    Module(&'static str),
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct ProbeSpec {
    /// `group:event`, as in tracefs.
    pub name: &'static str,
    pub kind: ProbeKind,
    /// The eBPF program attached there.
    pub program: &'static str,
    pub provider: Provider,
    /// How many TP_PROTO arguments the program reads (highest index + 1).
    pub args_read: usize,
    /// Kernels or drivers that have it, as documentation.
    pub available: &'static str,
    /// What covers the same events where this one is missing.
    pub fallback: &'static str,
    /// High rate: counted in maps, streamed only when not aggregate-only.
    pub hot: bool,
}

impl ProbeSpec {
    pub fn group(&self) -> &'static str {
        self.name.split_once(':').map_or("", |(g, _)| g)
    }

    pub fn event(&self) -> &'static str {
        self.name.split_once(':').map_or(self.name, |(_, e)| e)
    }
}

pub const fn tp(
    name: &'static str,
    program: &'static str,
    args_read: usize,
    available: &'static str,
    fallback: &'static str,
    hot: bool,
) -> ProbeSpec {
    ProbeSpec {
        name,
        kind: ProbeKind::RawTracepoint,
        program,
        provider: Provider::Kernel,
        args_read,
        available,
        fallback,
        hot,
    }
}

/// A timed kernel function: entry + exit hooks, fentry/fexit where the kernel
/// has BTF and the function tracer, else kprobe/kretprobe.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct TimingSpec {
    /// `time:<op>` as shown by `probes`.
    pub name: &'static str,
    /// Program base name in the eBPF object: `t_<slot>_in/out` (fentry/fexit),
    /// `k_<slot>_in/out` (kprobe/kretprobe).
    pub slot: &'static str,
    /// Functions that implement the operation, by preference; the first one
    /// this kernel has is used.
    pub candidates: &'static [&'static str],
    pub available: &'static str,
    /// The loadable module that has the functions (None: the kernel itself).
    /// fentry on a module function goes through the module's BTF.
    pub module: Option<&'static str>,
    /// Candidates whose signature needs programs of their own: (function,
    /// slot). The others use `slot`.
    pub programs: &'static [(&'static str, &'static str)],
    /// Not attached where one of these functions exists (it calls, or is
    /// called by, a hooked function that already covers the operation).
    pub unless: &'static [&'static str],
    /// The programs walk scatterlists: a `_nl` build without bpf_loop()
    /// exists for kernels before 5.17.
    pub sg_walk: bool,
    /// The DMA-API operations (`gpudirect_trace_common::hook_ops`) these
    /// hooks report when no dma:* tracepoint does; 0: timing only.
    pub dma_ops: u32,
    /// Candidates that belong to one IOMMU vendor's driver: (function,
    /// /sys/class/iommu unit-name prefix). Such a function is attached only
    /// where a unit of that vendor exists (x86 kernels build several
    /// drivers in; only one runs).
    pub units: &'static [(&'static str, &'static str)],
    /// Kernel structure members the programs read at fixed offsets:
    /// (struct, member, offset). Where BTF says otherwise, the hooks are
    /// not attached.
    pub layout: &'static [(&'static str, &'static str, u32)],
}

impl TimingSpec {
    /// A timing-only spec of the kernel's own functions (struct update base).
    pub const BASE: Self = Self {
        name: "",
        slot: "",
        candidates: &[],
        available: "",
        module: None,
        programs: &[],
        unless: &[],
        sg_walk: false,
        dma_ops: 0,
        units: &[],
        layout: &[],
    };

    /// The slot (program base name) for `func`.
    pub fn slot_for(&self, func: &str) -> &'static str {
        self.programs
            .iter()
            .find(|(f, _)| *f == func)
            .map_or(self.slot, |(_, s)| s)
    }
}
