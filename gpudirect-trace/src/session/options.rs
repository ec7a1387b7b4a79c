//! What a session is asked to do: the core's own options (the CLI converts
//! its arguments into these; the session never sees clap's types).

/// How to load and run the tracer.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Stream every event (false: aggregate-only, in-kernel counts only).
    pub stream: bool,
    /// Aggregate-only: keep DMA-API mappings in the kernel's table.
    pub lifetimes: bool,
    /// Ring buffer size in bytes (a power of two).
    pub ring_bytes: u32,
    /// A probe that failed to load or attach is an error (exit status 3).
    pub strict: bool,
    /// Follow /dev/kmsg for faults only the kernel log reports.
    pub follow_kmsg: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            stream: true,
            lifetimes: true,
            ring_bytes: crate::ebpf::DEFAULT_RING_BYTES,
            strict: false,
            follow_kmsg: true,
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
