//! `cargo xtask bench`: benchmarks on the host kernel (not tests). Runs the
//! `#[ignore]`d benchmark functions of the host test suite and the trace-file
//! benchmark in release mode, prints what they measured, and writes it into
//! docs/benchmarks.md between markers, with machine, kernel, date and commit.

use std::{fs, process::Command};

use anyhow::{ensure, Context as _, Result};

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
        return crate::bench_vm::run(&kernels);
    }
    run()
}

/// "N CPUs (model)".
pub fn machine() -> String {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    format!(
        "{} CPUs ({cpu}), host kernel {}",
        sh("nproc", &[]),
        sh("uname", &["-r"])
    )
}

/// Replaces the text between `start` and `end` in `path` (or appends it).
pub fn write_section(path: &str, start: &str, end: &str, section: &str) -> Result<()> {
    let doc = fs::read_to_string(path).unwrap_or_else(|_| "# Benchmarks\n".into());
    let new = match (doc.find(start), doc.find(end)) {
        (Some(a), Some(b)) if b > a => format!("{}{section}{}", &doc[..a], &doc[b + end.len()..]),
        _ => format!("{}\n\n{section}\n", doc.trim_end()),
    };
    fs::write(path, new).with_context(|| format!("writing {path}"))?;
    eprintln!("xtask: wrote {path}");
    Ok(())
}

pub fn sh(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
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
    let file = run_capture(&[
        "test",
        "--release",
        "-p",
        "gpudirect-trace",
        "--lib",
        "--",
        "--ignored",
        "--nocapture",
        "tracefile::tests::bench",
    ])?;
    let flight = run_capture(&[
        "test",
        "--release",
        "-p",
        "gpudirect-trace",
        "--lib",
        "--",
        "--ignored",
        "--nocapture",
        "flight::bench",
    ])?;
    let misuse = run_capture(&[
        "test",
        "--release",
        "-p",
        "gpudirect-trace",
        "--lib",
        "--",
        "--ignored",
        "--nocapture",
        "analysis::misuse::bench",
    ])?;
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
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let section = format!(
        "{START}\n## Host kernel (`cargo xtask bench`, generated)\n\n\
         Machine: {} CPUs ({cpu}); kernel {}; {}; commit {}; load average at the \
         end {}.\n\
         Events are driven through the real programs with BPF_PROG_TEST_RUN;\n\
         per-hit cost is the kernel's accounting (kernel.bpf_stats_enabled).\n\
         Timing goals (issue 17) are measurements, never pass/fail tests; where \
         the machine is shared, numbers move by 10-30% between runs.\n\n{}\
         All measured lines:\n\n```\n{}\n```\n{END}",
        sh("nproc", &[]),
        sh("uname", &["-r"]),
        sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        sh("git", &["rev-parse", "--short", "HEAD"]),
        fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_owned))
            .unwrap_or_default(),
        crate::bench_tables::render(&lines),
        lines.join("\n")
    );
    write_section("docs/benchmarks.md", START, END, &section)
}
