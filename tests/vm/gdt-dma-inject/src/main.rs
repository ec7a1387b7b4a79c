//! gdt-dma-inject: test support for gpudirect-trace's VM scenarios (not part of the
//! tracer). Makes qemu's `edu` device perform one DMA to or from a chosen IOVA, so
//! that the IOMMU reports a real fault (or, with a mapped IOVA, a real transfer).
//!
//! Modes: `sysfs` (default) drives the unbound device through sysfs: the device's
//! DMA domain has nothing mapped, so every IOVA faults. `vfio` binds it to vfio-pci
//! and can map a buffer at the IOVA first (`--map`), then unmap it and repeat the
//! DMA (`--then-unmap`), which faults. Both share `edu::Bar0::dma`.

mod edu;
mod sysfs;
mod vfio;

use std::{process::ExitCode, time::Duration};

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Program the device through /sys/bus/pci/devices/BDF (no driver bound).
    Sysfs,
    /// Bind the device to vfio-pci and use a VFIO type1 container.
    Vfio,
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
    /// vfio: map a 4 KiB buffer at the IOVA's page before the DMA.
    #[arg(long)]
    map: bool,
    /// vfio (with --map): after the DMA, unmap the buffer and repeat the DMA.
    #[arg(long, requires = "map")]
    then_unmap: bool,
    /// Milliseconds to wait for the transfer. A TCG guest on a loaded host
    /// can stall for seconds (CI at 113516e: 7.2 booted in 119 s, and its
    /// edu transfer missed a 2 s wait); a transfer that faults still ends.
    #[arg(long, default_value_t = 10000)]
    timeout_ms: u64,
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s}: {e}"))
}

fn report(args: &Args, what: &str, took: Duration) {
    println!(
        "gdt-dma-inject: {} dma {:?} iova={:#x} len={}{what} completed in {} ms",
        args.device,
        args.dir,
        args.iova,
        args.len,
        took.as_millis()
    );
}

const PAGE: u64 = 4096;
const FILL: u8 = 0xa5;

fn run_vfio(args: &Args) -> Result<()> {
    let timeout = Duration::from_millis(args.timeout_ms);
    let dev = vfio::Device::open(&args.device)?;
    if !args.force && !dev.id_ok()? {
        anyhow::bail!("{} is not an edu device (1234:11e8)", args.device);
    }
    let page = args.iova & !(PAGE - 1);
    if args.iova + args.len > page + PAGE {
        anyhow::bail!("with --map the transfer must stay within one 4 KiB page");
    }
    let buf = vfio::DmaBuf::new(PAGE as usize, FILL)?;
    if args.map {
        dev.map(buf.ptr, PAGE as usize, page)?;
        println!("gdt-dma-inject: mapped 4096 bytes at iova {page:#x} through VFIO");
    }
    let took = dev.bar.dma(args.dir, args.iova, args.len, timeout)?;
    let off = (args.iova - page) as usize;
    let changed = if args.dir == edu::Dir::Write && args.map {
        let n = buf.changed(off + args.len as usize, FILL);
        format!(" ({n} bytes of the mapped buffer written)")
    } else {
        String::new()
    };
    report(args, &format!(" via vfio{changed}"), took);
    if args.then_unmap {
        dev.unmap(PAGE as usize, page)?;
        println!("gdt-dma-inject: unmapped iova {page:#x}; repeating the DMA (expect a fault)");
        let took = dev.bar.dma(args.dir, args.iova, args.len, timeout)?;
        report(args, " via vfio after unmap", took);
    }
    Ok(())
}

fn run(args: &Args) -> Result<()> {
    edu::check_args(args.iova, args.len)?;
    if (args.map || args.then_unmap) && args.mode != Mode::Vfio {
        anyhow::bail!("--map/--then-unmap need --mode vfio");
    }
    match args.mode {
        Mode::Vfio => run_vfio(args)?,
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
            report(args, &format!(" (edu id {id:#010x})"), took);
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
