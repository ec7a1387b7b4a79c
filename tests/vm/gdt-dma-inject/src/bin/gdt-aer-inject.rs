//! gdt-aer-inject: test support for gpudirect-trace's VM scenarios (not part
//! of the tracer). Injects PCIe AER errors through the kernel's own software
//! injector (drivers/pci/pcie/aer_inject.c, CONFIG_PCIEAER_INJECT, the
//! `aer_inject` module): it fakes the device's AER status registers and
//! raises its root port's AER interrupt, so the kernel's whole AER path runs
//! (aer_isr, ras:aer_event, aer_print_error and its ratelimit) as for a
//! hardware error. qemu's own injector (`pcie_aer_inject_error`) cannot
//! deliver correctable errors: its pcie_aer_msg_alldev() passes only
//! uncorrectable messages up (seen with qemu 7.2 and a 7.2 guest).
//!
//! With `--count N`, each error waits until the kernel counted the previous
//! one in the device's `aer_dev_correctable` / `aer_dev_nonfatal` /
//! `aer_dev_fatal` TOTAL line, so none is merged into another ("multiple
//! errors received"): the kernel handles exactly N.

use std::{
    io::Write as _,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "gdt-aer-inject", about)]
struct Args {
    /// PCI address of the device the error is reported for (0000:01:00.0).
    #[arg(long)]
    device: String,
    /// Correctable error status bits (0x1: Receiver Error).
    #[arg(long, value_parser = parse_u32, default_value = "0")]
    correctable: u32,
    /// Uncorrectable error status bits (0x4000: Completion Timeout).
    #[arg(long, value_parser = parse_u32, default_value = "0")]
    uncorrectable: u32,
    /// TLP header log, four dwords (uncorrectable errors).
    #[arg(long, value_parser = parse_u32, num_args = 4)]
    header: Option<Vec<u32>>,
    /// Errors to inject, one after the other.
    #[arg(long, default_value_t = 1)]
    count: u64,
    /// Give up waiting for the kernel to handle one after this long.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
}

fn parse_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s}: {e}"))
}

/// struct aer_error_inj (aer_inject.c): bus, dev, fn, then u32s from
/// offset 4; `domain` last.
fn record(a: &Args) -> Result<[u8; 32]> {
    let (seg, rest) = a.device.split_once(':').context("ssss:bb:dd.f")?;
    let (bus, rest) = rest.split_once(':').context("ssss:bb:dd.f")?;
    let (dev, func) = rest.split_once('.').context("ssss:bb:dd.f")?;
    let h = |s: &str| u32::from_str_radix(s, 16).with_context(|| format!("{s} in {}", a.device));
    let mut r = [0u8; 32];
    r[0] = h(bus)? as u8;
    r[1] = h(dev)? as u8;
    r[2] = h(func)? as u8;
    let mut put = |off: usize, v: u32| r[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    put(4, a.uncorrectable);
    put(8, a.correctable);
    for (i, d) in a.header.iter().flatten().take(4).enumerate() {
        put(12 + 4 * i, *d);
    }
    put(28, h(seg)?);
    Ok(r)
}

/// The kernel's count of handled errors of the kind injected.
fn handled(a: &Args) -> Option<u64> {
    let file = if a.correctable != 0 {
        "aer_dev_correctable"
    } else if a.uncorrectable & a.fatal_mask() != 0 {
        "aer_dev_fatal"
    } else {
        "aer_dev_nonfatal"
    };
    let text = std::fs::read_to_string(format!("/sys/bus/pci/devices/{}/{file}", a.device)).ok()?;
    text.lines()
        .find(|l| l.starts_with("TOTAL_ERR"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
}

impl Args {
    /// The device's uncorrectable severity register (AER cap + 0x0c):
    /// which uncorrectable bits are fatal.
    fn fatal_mask(&self) -> u32 {
        // The default severities (PCIe r6.0 7.8.4.4): DLP, SDES, FCP,
        // RxOF, MalfTLP, internal. The test devices keep them.
        (1 << 4) | (1 << 5) | (1 << 13) | (1 << 17) | (1 << 18) | (1 << 22)
    }
}

fn main() -> Result<()> {
    let a = Args::parse();
    if (a.correctable == 0) == (a.uncorrectable == 0) {
        bail!("give --correctable or --uncorrectable");
    }
    let rec = record(&a)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/aer_inject")
        .context("/dev/aer_inject (modprobe aer_inject)")?;
    let mut before = handled(&a);
    let start = Instant::now();
    for i in 0..a.count {
        f.write_all(&rec)
            .with_context(|| format!("injecting error {i}"))?;
        // One at a time: wait until the kernel counted it.
        if let Some(b) = before {
            let deadline = Instant::now() + Duration::from_millis(a.timeout_ms);
            loop {
                match handled(&a) {
                    Some(n) if n > b => {
                        before = Some(n);
                        break;
                    }
                    _ if Instant::now() > deadline => {
                        bail!(
                            "error {i}: the kernel did not count it within {} ms",
                            a.timeout_ms
                        )
                    }
                    _ => std::thread::yield_now(),
                }
            }
        }
    }
    println!(
        "gdt-aer-inject: {} errors injected for {} in {:.2}s (kernel's count now {:?})",
        a.count,
        a.device,
        start.elapsed().as_secs_f64(),
        handled(&a)
    );
    Ok(())
}
