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

/// The kernel's mitigations that tax every kernel call and return, as
/// /sys/devices/system/cpu/vulnerabilities states them ("none" where none
/// applies or the files are absent). Why: on 2026-12-06 the CI host (AMD
/// EPYC, SRSO "Safe RET, no microcode") read the clock in 58.5 ns and
/// reserved a ring record in 45.4, against 26.7 and 21.2 on 2026-12-05's
/// host (same CPU model, another host kernel build, its mitigations not
/// written down): the per-hit and stack tables doubled while the reader's
/// (user space) did not, and the page did not say why.
pub fn call_return_mitigations() -> String {
    let dir = std::path::Path::new("/sys/devices/system/cpu/vulnerabilities");
    let read = |f: &str| fs::read_to_string(dir.join(f)).unwrap_or_default();
    summarize_mitigations(
        ["spec_rstack_overflow", "retbleed", "spectre_v2"]
            .into_iter()
            .map(|f| (f, read(f))),
    )
}

/// `name state` of each entry that mitigates something (`spectre_v2
/// Mitigation: Retpolines`), its state up to the first `;` (spectre_v2 goes
/// on with STIBP and RSB details).
fn summarize_mitigations<'a>(entries: impl Iterator<Item = (&'a str, String)>) -> String {
    let kept: Vec<String> = entries
        .filter_map(|(name, state)| {
            let state = state.trim().split(';').next().unwrap_or("").trim();
            let applies = state.starts_with("Mitigation") || state.contains("Safe RET");
            applies.then(|| format!("{name} {state}"))
        })
        .collect();
    if kept.is_empty() {
        "none".into()
    } else {
        kept.join(", ")
    }
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

#[cfg(test)]
mod tests {
    use super::summarize_mitigations;

    #[test]
    fn only_the_mitigations_in_force_are_named() {
        let host = [
            (
                "spec_rstack_overflow",
                "Vulnerable: Safe RET, no microcode\n".to_owned(),
            ),
            ("retbleed", "Not affected\n".to_owned()),
            (
                "spectre_v2",
                "Mitigation: Retpolines; STIBP: disabled; RSB filling\n".to_owned(),
            ),
        ];
        assert_eq!(
            summarize_mitigations(host.into_iter()),
            "spec_rstack_overflow Vulnerable: Safe RET, no microcode, \
             spectre_v2 Mitigation: Retpolines"
        );
        let none = [
            ("retbleed", "Not affected".to_owned()),
            ("spectre_v2", String::new()),
        ];
        assert_eq!(summarize_mitigations(none.into_iter()), "none");
    }
}
