//! What both benchmark runs (`bench.rs` on the host, `bench_vm.rs` in VMs)
//! write into docs/benchmarks.md: the machine, kernel, commit and date they
//! ran on, and their generated section between its markers.

use std::{fs, process::Command};

use anyhow::{Context as _, Result};

/// The document both runs write.
const DOC: &str = "docs/benchmarks.md";

/// "N CPUs (model), host kernel R".
pub fn machine() -> String {
    format!(
        "{} CPUs ({}), host kernel {}",
        cpus(),
        cpu_model(),
        kernel()
    )
}

pub fn cpus() -> String {
    sh("nproc", &[])
}

/// /proc/cpuinfo's first "model name" (empty if none).
pub fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default()
}

pub fn kernel() -> String {
    sh("uname", &["-r"])
}

pub fn commit() -> String {
    sh("git", &["rev-parse", "--short", "HEAD"])
}

pub fn date() -> String {
    sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"])
}

/// The 1-minute load average (empty if unreadable).
pub fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default()
}

/// Replaces the text between `start` and `end` in docs/benchmarks.md (or
/// appends it).
pub fn write_section(start: &str, end: &str, section: &str) -> Result<()> {
    let doc = fs::read_to_string(DOC).unwrap_or_else(|_| "# Benchmarks\n".into());
    let new = match (doc.find(start), doc.find(end)) {
        (Some(a), Some(b)) if b > a => format!("{}{section}{}", &doc[..a], &doc[b + end.len()..]),
        _ => format!("{}\n\n{section}\n", doc.trim_end()),
    };
    fs::write(DOC, new).with_context(|| format!("writing {DOC}"))?;
    eprintln!("xtask: wrote {DOC}");
    Ok(())
}

/// `cmd`'s trimmed standard output, empty if it could not run.
fn sh(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}
