//! `cargo xtask bench`: benchmarks on the host kernel (not tests). Runs the
//! `#[ignore]`d benchmark functions of the host test suite and the trace-file
//! benchmark in release mode, prints what they measured, and writes it into
//! docs/benchmarks.md between markers, with machine, kernel, date and commit.

use std::process::Command;

use anyhow::{ensure, Context as _, Result};

use crate::bench_doc;

const START: &str = "<!-- xtask-bench:start -->";
const END: &str = "<!-- xtask-bench:end -->";

fn run_capture(args: &[&str]) -> Result<String> {
    eprintln!("xtask: cargo {}", args.join(" "));
    let out = Command::new("cargo")
        .args(args)
        .output()
        .context("running cargo")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(
        out.status.success(),
        "benchmark run failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(text)
}

/// `cargo xtask bench` options.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Instead of the host benchmarks: gpudirect-trace next to bpftrace
    /// one-liners on the same events in VMs (writes its own section).
    #[arg(long)]
    pub vm: bool,
    /// With --vm: only the workload part (NVMe random reads without the
    /// tracer and under each mode; its own section), not the bpftrace side
    /// by side.
    #[arg(long, requires = "vm")]
    pub workload: bool,
    /// Kernel series for --vm (repeatable). Default: 6.1 and 6.12.
    #[arg(long = "kernel")]
    pub kernels: Vec<String>,
}

/// The --vm default. Not 5.10: the host's bpftrace (0.17) cannot build its
/// tracepoint argument structs there ("unknown type name 'u64'" from its
/// definitions.h without kernel headers), so no side by side is possible.
const BENCH_VM_KERNELS: &[&str] = &["6.1", "6.12"];

pub fn main(args: BenchArgs) -> Result<()> {
    if args.vm {
        let kernels = if args.kernels.is_empty() {
            BENCH_VM_KERNELS.iter().map(|s| s.to_string()).collect()
        } else {
            args.kernels
        };
        if !args.workload {
            crate::bench_vm::run(&kernels)?;
        }
        return crate::bench_vm_workload::run(&kernels);
    }
    run()
}

pub fn run() -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    ensure!(
        unsafe { libc::geteuid() } == 0,
        "cargo xtask bench loads BPF programs: run it as root"
    );
    let host = run_capture(&[
        "test",
        "--release",
        "-p",
        "gpudirect-trace",
        "--test",
        "host",
        "--",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
        "bench_",
    ])?;
    // The library's benchmarks: the trace file, the flight recorder, the
    // misuse checks.
    let lib = |filter: &str| {
        run_capture(&[
            "test",
            "--release",
            "-p",
            "gpudirect-trace",
            "--lib",
            "--",
            "--ignored",
            "--nocapture",
            filter,
        ])
    };
    let file = lib("tracefile::tests::bench")?;
    let flight = lib("flight::bench")?;
    let misuse = lib("analysis::misuse::bench")?;
    // With --nocapture the harness's "test NAME ... " may precede a line.
    let lines: Vec<&str> = host
        .lines()
        .chain(file.lines())
        .chain(flight.lines())
        .chain(misuse.lines())
        .filter_map(|l| match l.find("BENCH ") {
            Some(i) => Some(&l[i..]),
            None => l.find("map/unmap stream:").map(|i| &l[i..]),
        })
        .collect();
    for l in &lines {
        println!("{l}");
    }
    let section = format!(
        "{START}\n## Host kernel (`cargo xtask bench`, generated)\n\n\
         Machine: {} CPUs ({}); kernel {}; {}; commit {}; load average at the \
         end {}; the kernel's call and return mitigations: {} (they tax the \
         programs' helpers and the stack walk, not the reader).\n\
         Events are driven through the real programs with BPF_PROG_TEST_RUN;\n\
         per-hit cost is the kernel's accounting (kernel.bpf_stats_enabled).\n\
         Timing goals (issues 17 and 28) are measurements, never pass/fail tests; where \
         the machine is shared, numbers move by 10-30% between runs.\n\n{}\
         All measured lines:\n\n```\n{}\n```\n{END}",
        bench_doc::cpus(),
        bench_doc::cpu_model(),
        bench_doc::kernel(),
        bench_doc::date(),
        bench_doc::commit(),
        bench_doc::load_average(),
        bench_doc::call_return_mitigations(),
        crate::bench_tables::render(&lines),
        lines.join("\n")
    );
    bench_doc::write_section(START, END, &section)
}
