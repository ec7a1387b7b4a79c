//! Options shared by the subcommands that trace (live, record, serve), and
//! the parsers of values several subcommands take.

use std::time::Duration;

use clap::Args;

use crate::session::SessionOptions;

#[derive(Args, Debug, Clone)]
pub struct TraceArgs {
    /// Count in kernel maps only; stream rare events (faults, Xids) but not
    /// every map/unmap. For hosts with millions of mappings per second.
    #[arg(long)]
    pub aggregate_only: bool,
    /// With --aggregate-only: do not keep DMA-API mappings in a kernel table.
    /// Saves ~200 ns per map and per unmap (docs/benchmarks.md) at the price
    /// of mapping lifetimes, outstanding counts and long-lived listings.
    #[arg(long, requires = "aggregate_only")]
    pub no_lifetimes: bool,
    /// BPF ring buffer size in bytes (rounded up to a power of two).
    #[arg(long, default_value_t = crate::ebpf::DEFAULT_RING_BYTES, value_name = "BYTES")]
    pub ring_size: u32,
    /// Exit with status 3 if any probe failed to load or attach
    /// (unavailable ones are normal: kernels differ).
    #[arg(long)]
    pub strict: bool,
}

impl TraceArgs {
    pub fn session_options(&self) -> SessionOptions {
        SessionOptions {
            stream: !self.aggregate_only,
            lifetimes: !self.no_lifetimes,
            ring_bytes: self.ring_size,
            strict: self.strict,
            follow_kmsg: true,
        }
    }
}

/// A positive duration such as 500ms, 1s or 2m.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 1s, 2m)"))?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

/// A time offset: like a duration, but zero is allowed.
pub fn parse_offset(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 0s, 1.5s, 2m)"))
}

/// `--device` values as the tables name devices: a GPU index (`0`, `GPU0`) or
/// UUID (`GPU-4f39...`, a unique prefix) becomes that GPU's bus id, any
/// printed bus id is normalised, anything else (`nvme0`) stays a device name.
pub fn resolve_devices(
    specs: &[String],
    gpus: &[crate::gpu::GpuIdentity],
) -> anyhow::Result<Vec<String>> {
    specs
        .iter()
        .map(|spec| {
            let s = spec.trim();
            let gpu_like =
                s.bytes().all(|b| b.is_ascii_digit()) || s.to_ascii_lowercase().starts_with("gpu");
            if gpu_like {
                return crate::gpu::resolve_device(s, gpus);
            }
            Ok(crate::faults::normalize_bdf(s).unwrap_or_else(|| s.to_owned()))
        })
        .collect()
}
