//! What a session is asked to do: the core's own options (the CLI converts
//! its arguments into these; the session never sees clap's types).

/// How to load and run the tracer.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Stream every event (false: aggregate-only, in-kernel counts only).
    pub stream: bool,
    /// Aggregate-only: keep DMA-API mappings in the kernel's table.
    pub lifetimes: bool,
    /// Aggregate-only: one mapping in this many has its lifetime timed.
    pub lifetime_sample: u32,
    /// Ring buffer size in bytes (a power of two).
    pub ring_bytes: u32,
    /// A probe that failed to load or attach is an error (exit status 3).
    pub strict: bool,
    /// Follow /dev/kmsg for faults only the kernel log reports.
    pub follow_kmsg: bool,
    /// Check DMA-API use (analysis::misuse); needs `stream`.
    pub check: bool,
    /// Take kernel stacks of DMA-API calls for the findings.
    pub stacks: bool,
    /// With `stacks`: also every unmap's and sync's that cannot be a
    /// finding.
    pub stacks_every_call: bool,
    /// Frames kept per stack.
    pub stack_depth: u32,
    /// Which programs report DMA-API calls.
    pub dma_source: crate::ebpf::DmaSource,
    /// Scatterlist entries walked per map at most.
    pub sg_walk_max: u32,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            stream: true,
            lifetimes: true,
            lifetime_sample: gpudirect_trace_common::lifetime::DEFAULT_SAMPLE,
            ring_bytes: crate::ebpf::DEFAULT_RING_BYTES,
            strict: false,
            follow_kmsg: true,
            check: false,
            stacks: false,
            stacks_every_call: false,
            stack_depth: crate::ebpf::DEFAULT_STACK_DEPTH,
            dma_source: crate::ebpf::DmaSource::Auto,
            sg_walk_max: gpudirect_trace_common::SG_WALK_DEFAULT,
        }
    }
}

/// `--strict` and a probe failed: the commands exit with status 3.
#[derive(Debug)]
pub struct StrictFailure(pub Vec<String>);

impl std::fmt::Display for StrictFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--strict: {} probe(s) failed:\n  {}",
            self.0.len(),
            self.0.join("\n  ")
        )
    }
}

impl std::error::Error for StrictFailure {}

/// The exit status of `--strict` when a probe failed.
pub const STRICT_EXIT: u8 = 3;
