//! `cargo xtask bench --vm`'s workload part (issue 28, item 4, the VM half):
//! the largest IOPS of a fio-like O_DIRECT 4 KiB random-read load on the
//! VM's NVMe (tests/vm/bench/workload.sh, gdt-randread), without the tracer
//! and under each mode, interleaved over rounds. The slowdown is stated as
//! the ratio of medians with its spread (the lowest and highest ratio of one
//! round's traced run to the same round's untraced run). Writes its own
//! section of docs/benchmarks.md, so it can run alone (`--workload`).
//! Reported, never enforced.

use std::fmt::Write as _;

use anyhow::{ensure, Result};
use serde_json::Value;

use crate::{
    bench_doc,
    bench_vm::{on_each_kernel, BenchVm},
};

const START: &str = "<!-- xtask-bench-vm-workload:start -->";
const END: &str = "<!-- xtask-bench-vm-workload:end -->";
const SCRIPT: &str = "tests/vm/bench/workload.sh";

/// The modes in table order; "none" is the baseline.
const MODES: [(&str, &str); 4] = [
    ("none", "no tracer"),
    ("streaming", "streaming (`live`)"),
    ("aggregate", "aggregate-only"),
    ("no-lifetimes", "aggregate-only --no-lifetimes"),
];

/// One kernel's workload runs.
#[derive(Debug, Default, PartialEq)]
pub struct Workload {
    pub kernel: String,
    /// The script's configuration line (seconds, rounds, threads, ...).
    pub config: String,
    /// (round, mode, IOPS) of every run.
    pub runs: Vec<(u32, String, f64)>,
    /// Events lost or missed by the tracer, per mode, summed over rounds.
    pub lost: Vec<(String, u64)>,
    /// Traced runs whose tracer printed no final object.
    pub no_summary: u32,
}

fn kv<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// Parses the guest's console output.
pub fn parse(kernel: &str, lines: &[String]) -> Result<Workload> {
    let mut w = Workload {
        kernel: kernel.to_string(),
        ..Workload::default()
    };
    for l in lines {
        let l = l.trim();
        if let Some(rest) = l.strip_prefix("BENCH-VM-WL config ") {
            w.config = rest.trim().to_string();
        } else if let Some(rest) = l.strip_prefix("BENCH-VM-WL-JSON ") {
            let mode = kv(rest, "mode").unwrap_or("?").to_string();
            let lost = rest
                .find('{')
                .and_then(|i| serde_json::from_str::<Value>(&rest[i..]).ok())
                .map(|v| {
                    v["lost_events"].as_u64().unwrap_or(0)
                        + v["missed_events"].as_u64().unwrap_or(0)
                });
            let Some(lost) = lost else {
                w.no_summary += 1;
                continue;
            };
            match w.lost.iter_mut().find(|(m, _)| *m == mode) {
                Some((_, n)) => *n += lost,
                None => w.lost.push((mode, lost)),
            }
        } else if let Some(rest) = l.strip_prefix("BENCH-VM-WL ") {
            let (Some(round), Some(mode), Some(iops)) =
                (kv(rest, "round"), kv(rest, "mode"), kv(rest, "iops"))
            else {
                continue;
            };
            if let (Ok(r), Ok(x)) = (round.parse(), iops.parse()) {
                w.runs.push((r, mode.to_string(), x));
            }
        }
    }
    ensure!(
        w.runs.iter().any(|r| r.1 == "none"),
        "no untraced BENCH-VM-WL run in the output"
    );
    Ok(w)
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// One mode's row: (median IOPS, ratio of medians, lowest and highest
/// per-round ratio, rounds).
pub fn summary(w: &Workload, mode: &str) -> Option<(f64, f64, f64, f64, usize)> {
    let iops = |m: &str| -> Vec<(u32, f64)> {
        w.runs
            .iter()
            .filter(|r| r.1 == m)
            .map(|r| (r.0, r.2))
            .collect()
    };
    let base = iops("none");
    let mine = iops(mode);
    let med = median(mine.iter().map(|x| x.1).collect())?;
    let base_med = median(base.iter().map(|x| x.1).collect())?;
    let ratios: Vec<f64> = mine
        .iter()
        .filter_map(|(r, x)| {
            base.iter()
                .find(|b| b.0 == *r && b.1 > 0.0)
                .map(|b| x / b.1)
        })
        .collect();
    let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((med, med / base_med, lo, hi, mine.len()))
}

pub fn render(runs: &[Workload], machine: &str, commit: &str, date: &str) -> String {
    let mut s = format!(
        "{START}\n## Workload in a VM: NVMe random reads (`cargo xtask bench --vm`, generated)\n\n\
         Issue 28, item 4 (the VM half; the PyTorch pinned-copy loop is measured on the GPU \
         host). Machine: {machine}; guest under qemu TCG (no KVM: the IOPS are emulated, \
         compare ratios); {date}; commit {commit}.\n\
         `gdt-randread` (tests/vm/gdt-dma-inject), a fio-like load for a guest without fio \
         (`fio --rw=randread --direct=1 --bs=4k --ioengine=psync --numjobs=N`): N threads, each \
         with one O_DIRECT 4 KiB read in flight at a random offset of the VM's NVMe (VT-d, \
         strict), as fast as they complete, for a fixed time. The same load without the \
         tracer and under `gpudirect-trace live --json` in each mode, interleaved over rounds \
         (each round starts one mode later); the tracer attaches before the load and is \
         stopped after it, so its startup is not in the window; its reader shares the \
         guest's one vCPU with the load. Ratio: median IOPS over the untraced median \
         (1.00 = no slowdown); spread: the lowest and highest ratio of one round's run to the \
         same round's untraced run.\n\n"
    );
    for w in runs {
        let _ = write!(
            s,
            "### {} ({})\n\n\
             | mode | median IOPS | ratio to untraced | spread over rounds | rounds | events lost |\n\
             |---|---|---|---|---|---|\n",
            w.kernel, w.config
        );
        for (mode, label) in MODES {
            let lost = w
                .lost
                .iter()
                .find(|x| x.0 == mode)
                .map_or("-".to_owned(), |x| x.1.to_string());
            match summary(w, mode) {
                Some((med, ratio, lo, hi, n)) => {
                    let _ = writeln!(
                        s,
                        "| {label} | {med:.0} | {ratio:.2} | {lo:.2}-{hi:.2} | {n} | {lost} |"
                    );
                }
                None => {
                    let _ = writeln!(s, "| {label} | - | - | - | 0 | {lost} |");
                }
            }
        }
        if w.no_summary > 0 {
            let _ = writeln!(
                s,
                "\n{} traced runs printed no final object (their losses are unknown).",
                w.no_summary
            );
        }
        s.push('\n');
    }
    s.push_str(END);
    s
}

pub fn run(kernels: &[String]) -> Result<()> {
    let vm = BenchVm {
        what: "workload",
        label: "bench-vm-workload",
        script: SCRIPT,
        memory: 1024,
        host_root: false,
    };
    let mut runs = Vec::new();
    on_each_kernel(kernels, &vm, |k, release, lines| {
        let mut w = parse(k, lines)?;
        w.kernel = format!("{k} ({release})");
        eprintln!("xtask: bench --vm workload {k}: {w:?}");
        runs.push(w);
        Ok(())
    })?;
    // TCG's speed is the host's: its load is part of the conditions.
    let machine = format!(
        "{}, load average at the end {}",
        bench_doc::machine(),
        bench_doc::load_average()
    );
    let section = render(&runs, &machine, &bench_doc::commit(), &bench_doc::date());
    println!("{section}");
    bench_doc::write_section(START, END, &section)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_vm::tests::lines;

    #[test]
    fn parses_and_summarises_the_workload() {
        let out = lines(
            "BENCH-VM-WL config seconds=4 rounds=2 threads=4 block=4096 device=/dev/nvme0n1\n\
             BENCH-VM-WL round=1 mode=none BENCH-VM-WL-RUN ios=4000 seconds=4.000 iops=1000.0\n\
             BENCH-VM-WL round=1 mode=streaming BENCH-VM-WL-RUN ios=3200 seconds=4.000 iops=800.0\n\
             BENCH-VM-WL-JSON round=1 mode=streaming {\"lost_events\":3,\"missed_events\":1}\n\
             BENCH-VM-WL round=1 mode=aggregate BENCH-VM-WL-RUN ios=3600 seconds=4.000 iops=900.0\n\
             BENCH-VM-WL-JSON round=1 mode=aggregate {\"lost_events\":0}\n\
             BENCH-VM-WL round=2 mode=streaming BENCH-VM-WL-RUN ios=3000 seconds=4.000 iops=750.0\n\
             BENCH-VM-WL-JSON round=2 mode=streaming \n\
             BENCH-VM-WL round=2 mode=none BENCH-VM-WL-RUN ios=4400 seconds=4.000 iops=1100.0\n\
             BENCH-VM-WL round=2 mode=aggregate BENCH-VM-WL-RUN ios=4000 seconds=4.000 iops=1000.0\n\
             BENCH-VM-WL done",
        );
        let w = parse("6.12", &out).expect("parse");
        assert!(w.config.starts_with("seconds=4 rounds=2"), "{}", w.config);
        assert_eq!(w.runs.len(), 6);
        assert_eq!(w.lost, [("streaming".into(), 4), ("aggregate".into(), 0)]);
        assert_eq!(w.no_summary, 1);
        // Medians 775 over 1050; per round 0.80 and 750/1100 = 0.68.
        let (med, ratio, lo, hi, n) = summary(&w, "streaming").expect("streaming");
        assert_eq!((med, n), (775.0, 2));
        assert!((ratio - 775.0 / 1050.0).abs() < 1e-9);
        assert!((lo - 750.0 / 1100.0).abs() < 1e-9 && (hi - 0.8).abs() < 1e-9);
        let md = render(&[w], "m", "abc", "d");
        assert!(
            md.contains("| streaming (`live`) | 775 | 0.74 | 0.68-0.80 | 2 | 4 |"),
            "{md}"
        );
        assert!(
            md.contains("| no tracer | 1050 | 1.00 | 1.00-1.00 | 2 | - |"),
            "{md}"
        );
        assert!(
            md.contains("| aggregate-only --no-lifetimes | - | - | - | 0 | - |"),
            "{md}"
        );
        assert!(md.contains("1 traced runs printed no final object"), "{md}");
        assert!(md.starts_with(START) && md.ends_with(END));
        assert!(parse("6.12", &lines("noise")).is_err());
    }
}
