//! gdt-randread: test support for `cargo xtask bench --vm` (not part of the
//! tracer). A fio-like random-read load for guests that have no fio: N
//! threads, each with one O_DIRECT read of `--block` bytes outstanding at a
//! random aligned offset of the device, for a fixed time, as fast as the
//! device completes them (fio's `--rw=randread --direct=1 --ioengine=psync
//! --numjobs=N`). Every read is one DMA map and unmap of the NVMe driver,
//! the events the tracer sees. Prints one line:
//! `BENCH-VM-WL-RUN ios=N seconds=S iops=X`.

use std::{
    alloc::{alloc, dealloc, Layout},
    fs::OpenOptions,
    os::unix::fs::{FileExt as _, OpenOptionsExt as _},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "gdt-randread", about)]
struct Args {
    /// Block device to read (/dev/nvme0n1).
    #[arg(long)]
    device: String,
    /// How long to read.
    #[arg(long, default_value_t = 4.0)]
    seconds: f64,
    /// Reader threads: reads in flight at once.
    #[arg(long, default_value_t = 4)]
    threads: u64,
    /// Bytes per read (a multiple of the logical block size).
    #[arg(long, default_value_t = 4096)]
    block: u64,
}

/// xorshift64*: each thread its own stream, no shared state.
fn next(x: &mut u64) -> u64 {
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    x.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&args.device)
        .with_context(|| format!("opening {} with O_DIRECT", args.device))?;
    let size = std::fs::read_to_string(format!(
        "/sys/class/block/{}/size",
        args.device.trim_start_matches("/dev/")
    ))
    .ok()
    .and_then(|s| s.trim().parse::<u64>().ok())
    .map(|sectors| sectors * 512)
    .context("the device's size from /sys/class/block")?;
    let blocks = size / args.block;
    ensure!(blocks > 0, "{} is smaller than one block", args.device);
    let file = Arc::new(file);
    let done = Arc::new(AtomicBool::new(false));
    let ios = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let threads: Vec<_> = (0..args.threads)
        .map(|t| {
            let (file, done, ios) = (file.clone(), done.clone(), ios.clone());
            let block = args.block;
            std::thread::spawn(move || -> Result<()> {
                // O_DIRECT wants the buffer aligned (to the logical block).
                let layout = Layout::from_size_align(block as usize, 4096)?;
                // SAFETY: a non-zero size (ensured by from_size_align and the
                // block argument); freed below with the same layout.
                let ptr = unsafe { alloc(layout) };
                ensure!(!ptr.is_null(), "allocating the read buffer");
                // SAFETY: ptr is valid for `block` bytes until dealloc.
                let buf = unsafe { std::slice::from_raw_parts_mut(ptr, block as usize) };
                let mut x = 0x9E37_79B9_7F4A_7C15 ^ (t + 1);
                let mut r = Ok(());
                while !done.load(Ordering::Relaxed) {
                    let off = next(&mut x) % blocks * block;
                    if let Err(e) = file.read_exact_at(buf, off) {
                        r = Err(e).context(format!("reading at {off}"));
                        break;
                    }
                    ios.fetch_add(1, Ordering::Relaxed);
                }
                // SAFETY: allocated above with this layout.
                unsafe { dealloc(ptr, layout) };
                r
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(args.seconds));
    // Reads that complete after this are not counted: the rate is over the
    // fixed window only.
    let n = ios.load(Ordering::Relaxed);
    let secs = start.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("reader thread")?;
    }
    println!(
        "BENCH-VM-WL-RUN ios={n} seconds={secs:.3} iops={:.1}",
        n as f64 / secs
    );
    Ok(())
}
