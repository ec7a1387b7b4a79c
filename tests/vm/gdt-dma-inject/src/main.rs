//! gdt-dma-inject: test support for gpudirect-trace's VM scenarios (not part of the
//! tracer). Makes qemu's `edu` device perform one DMA to or from a chosen IOVA, so
//! that the IOMMU reports a real fault (or, with a mapped IOVA, a real transfer).
//!
//! Modes: `sysfs` (default) drives the unbound device through sysfs. A VFIO mode
//! (mapping the IOVA through a VFIO container first) plugs in beside it: only how
//! BAR0 is reached and how the IOVA gets mapped differ; `edu::Bar0::dma` is shared.

mod edu;
mod sysfs;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Program the device through /sys/bus/pci/devices/BDF (no driver bound).
    Sysfs,
}

#[derive(Parser, Debug)]
#[command(name = "gdt-dma-inject", version, about)]
struct Args {
    /// PCI address of the edu device, e.g. 0000:00:03.0.
    #[arg(long)]
    device: String,
    /// Bus address the device reads or writes, hex (0x123000) or decimal.
    #[arg(long, value_parser = parse_u64)]
    iova: u64,
    /// Bytes to transfer (1..4095).
    #[arg(long, default_value = "64", value_parser = parse_u64)]
    len: u64,
    /// write: device writes RAM at the IOVA; read: device reads it.
    #[arg(long, value_enum)]
    dir: edu::Dir,
    #[arg(long, value_enum, default_value = "sysfs")]
    mode: Mode,
    /// Accept a device whose PCI ID is not the edu's.
    #[arg(long)]
    force: bool,
    /// Milliseconds to wait for the transfer.
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s}: {e}"))
}

fn run(args: &Args) -> Result<()> {
    edu::check_args(args.iova, args.len)?;
    match args.mode {
        Mode::Sysfs => {
            let dev = sysfs::Device::open(&args.device, !args.force)?;
            let id = dev.bar.id();
            let took = dev
                .bar
                .dma(
                    args.dir,
                    args.iova,
                    args.len,
                    Duration::from_millis(args.timeout_ms),
                )
                .with_context(|| format!("DMA on {}", dev.path().display()))?;
            println!(
                "gdt-dma-inject: {} (edu id {id:#010x}) dma {:?} iova={:#x} len={} completed in {} ms",
                args.device,
                args.dir,
                args.iova,
                args.len,
                took.as_millis()
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gdt-dma-inject: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse_hex_and_decimal() {
        assert_eq!(parse_u64("0x123000"), Ok(0x123000));
        assert_eq!(parse_u64("64"), Ok(64));
        assert!(parse_u64("zz").is_err());
    }
}
