//! `cargo xtask bench --vm`: gpudirect-trace next to bpftrace one-liners on
//! the same real events in a VM (tests/vm/bench/bpftrace-side-by-side.sh),
//! per-hit cost from the kernel's bpf_stats for every program in one run, and
//! a tracefs trace_pipe stream timed against no tracing. Writes its own
//! section of docs/benchmarks.md (machine, kernels, commit). Goals are
//! reported, never enforced: our aggregate-only at most half of bpftrace's
//! count-only per hit, our streaming at most bpftrace's hist.

use std::{fmt::Write as _, fs, time::Duration};

use anyhow::{bail, ensure, Context as _, Result};
use serde_json::Value;

use crate::{
    bench_doc, host,
    vm::{self, qemu::Device, qemu::Iommu, BootOpts, RunSpec},
};

const START: &str = "<!-- xtask-bench-vm:start -->";
const END: &str = "<!-- xtask-bench-vm:end -->";
const SCRIPT: &str = "tests/vm/bench/bpftrace-side-by-side.sh";

/// One kernel's measurements.
#[derive(Debug, Default, PartialEq)]
pub struct Run {
    pub kernel: String,
    pub event: String,
    pub ours_program: String,
    pub bpftrace_version: String,
    pub reads: u64,
    /// (runs, ns per run) of each program on the event.
    pub bt_hist: Option<(u64, f64)>,
    pub bt_count: Option<(u64, f64)>,
    /// An empty bpftrace program on the event: the accounting floor.
    pub bt_empty: Option<(u64, f64)>,
    pub streaming: Option<(u64, f64)>,
    pub aggregate: Option<(u64, f64)>,
    /// aggregate-only with --no-lifetimes (no kernel mapping table).
    pub no_lifetimes: Option<(u64, f64)>,
    /// Rounds of (seconds without tracing, seconds with trace_pipe, lines).
    pub pipe: Vec<(f64, f64, u64)>,
    /// Events lost or missed by our tracers (all three together).
    pub ours_lost: u64,
    /// Processes that did not exit within 60 s of SIGINT (killed; their
    /// numbers are missing).
    pub stuck: Vec<String>,
}

fn kv<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// fdinfo fields of one bpftrace program (`prog_type: 5 ... run_cnt: 9`).
fn fdinfo(line: &str, key: &str) -> Option<u64> {
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        if w.trim_end_matches(':') == key && w.ends_with(':') {
            return words.next()?.parse().ok();
        }
    }
    None
}

fn ours(v: &Value, program: &str) -> Option<(u64, f64)> {
    v["program_stats"]
        .as_array()?
        .iter()
        .find(|p| p["program"].as_str() == Some(program))
        .map(|p| {
            (
                p["run_count"].as_u64().unwrap_or(0),
                p["ns_per_run"].as_f64().unwrap_or(0.0),
            )
        })
}

/// Parses the guest's console output.
pub fn parse(kernel: &str, lines: &[String]) -> Result<Run> {
    let mut r = Run {
        kernel: kernel.to_string(),
        ..Run::default()
    };
    let mut bt: [(u64, u64); 3] = [(0, 0); 3];
    let json = |tag: &str| -> Option<Value> {
        lines
            .iter()
            .rev()
            .find_map(|l| l.trim().strip_prefix(tag))
            .and_then(|j| serde_json::from_str(j.trim()).ok())
    };
    let (s, a, nl) = (json("STREAMING "), json("AGGREGATE "), json("NOLIFETIMES "));
    for l in lines {
        let Some(rest) = l.trim().strip_prefix("BENCH-VM ") else {
            continue;
        };
        if let Some(ev) = kv(rest, "event") {
            r.event = ev.to_string();
            r.ours_program = kv(rest, "ours_program").unwrap_or("").to_string();
            r.bpftrace_version = rest
                .split_once("bpftrace=")
                .map(|x| x.1.trim().to_string())
                .unwrap_or_default();
        } else if let Some(who) = rest.strip_prefix("stuck ") {
            r.stuck.push(who.trim().to_string());
        } else if let Some(n) = kv(rest, "reads") {
            r.reads = n.parse().unwrap_or(0);
        } else if let Some(which) = rest
            .strip_prefix("bpftrace-hist ")
            .map(|x| (0, x))
            .or_else(|| rest.strip_prefix("bpftrace-count ").map(|x| (1, x)))
            .or_else(|| rest.strip_prefix("bpftrace-empty ").map(|x| (2, x)))
        {
            let (i, info) = which;
            // bpftrace 0.17 loads one program per probe; BEGIN/END would be
            // uprobes that never run here, so sum what ran.
            if let (Some(n), Some(t)) = (fdinfo(info, "run_cnt"), fdinfo(info, "run_time_ns")) {
                bt[i].0 += n;
                bt[i].1 += t;
            }
        } else if let Some(p) = rest.strip_prefix("trace_pipe ") {
            let secs = kv(p, "seconds").and_then(|x| x.parse::<f64>().ok());
            let round: usize = kv(p, "round").and_then(|x| x.parse().ok()).unwrap_or(0);
            if round == 0 {
                continue;
            }
            if r.pipe.len() < round {
                r.pipe.resize(round, (0.0, 0.0, 0));
            }
            let slot = &mut r.pipe[round - 1];
            if p.starts_with("off") {
                slot.0 = secs.unwrap_or(0.0);
            } else {
                slot.1 = secs.unwrap_or(0.0);
                slot.2 = kv(p, "lines").and_then(|x| x.parse().ok()).unwrap_or(0);
            }
        }
    }
    ensure!(!r.event.is_empty(), "no BENCH-VM event line in the output");
    let per = |(n, t): (u64, u64)| (n > 0).then(|| (n, t as f64 / n as f64));
    r.bt_hist = per(bt[0]);
    r.bt_count = per(bt[1]);
    r.bt_empty = per(bt[2]);
    let lost = |v: &Option<Value>| {
        v.as_ref().map_or(0, |v| {
            v["lost_events"].as_u64().unwrap_or(0) + v["missed_events"].as_u64().unwrap_or(0)
        })
    };
    r.ours_lost = lost(&s) + lost(&a) + lost(&nl);
    r.streaming = s.as_ref().and_then(|v| ours(v, &r.ours_program));
    r.aggregate = a.as_ref().and_then(|v| ours(v, &r.ours_program));
    r.no_lifetimes = nl.as_ref().and_then(|v| ours(v, &r.ours_program));
    Ok(r)
}

fn cell(x: Option<(u64, f64)>, floor: Option<f64>) -> String {
    match (x, floor) {
        (Some((n, ns)), Some(f)) => format!("{ns:.0} ns | {:.0} ns | {n}", ns - f),
        (Some((n, ns)), None) => format!("{ns:.0} ns | - | {n}"),
        _ => "- | - | -".into(),
    }
}

fn net(x: Option<(u64, f64)>, floor: Option<f64>) -> Option<(u64, f64)> {
    x.map(|(n, ns)| (n, ns - floor.unwrap_or(0.0)))
}

/// "met (x ns <= y ns)" or "missed by z ns (x% over)".
fn goal(ours: Option<(u64, f64)>, limit: Option<f64>) -> String {
    match (ours, limit) {
        (Some((_, o)), Some(l)) if o <= l => format!("met ({o:.0} <= {l:.0} ns)"),
        (Some((_, o)), Some(l)) => format!(
            "missed by {:.0} ns ({:.0}% over {l:.0} ns)",
            o - l,
            (o / l - 1.0) * 100.0
        ),
        _ => "not measured".into(),
    }
}

pub fn render(runs: &[Run], machine: &str, commit: &str, date: &str) -> String {
    let mut s = format!(
        "{START}\n## Next to bpftrace, in a VM (`cargo xtask bench --vm`, generated)\n\n\
         Machine: {machine}; guests under qemu TCG (no KVM: every number is emulated \
         time, so compare ratios, not absolute nanoseconds); {date}; commit {commit}.\n\
         Six programs are attached at once to the same event while the guest (1 vCPU) reads \
         its NVMe with 4 KiB O_DIRECT reads under VT-d (strict): bpftrace's empty, count-only \
         and hist one-liners (the host's Debian bpftrace through a chroot into a read-only 9p \
         share of the host's root) and gpudirect-trace live in streaming, aggregate-only and \
         aggregate-only --no-lifetimes mode (each also with its timing hooks elsewhere). \
         Per-hit cost is the kernel's bpf_stats (run_time_ns / run_cnt; bpftrace's from \
         /proc/PID/fdinfo, ours from live --json program_stats); \"net\" subtracts the empty \
         program's cost, what the accounting charges any program. bpf_stats times the program \
         body only: bpftrace's tracepoint programs also pay the perf buffer fill of \
         perf_trace_* before they run, our raw tracepoint programs do not (so this favours \
         bpftrace). Under TCG one program's mean moves by up to a third between runs (6.12 \
         streaming dma_map: 1063 and 1441 ns in two runs of 4096 reads): read small \
         differences as ties.\n\n"
    );
    for r in runs {
        let floor = r.bt_empty.map(|x| x.1);
        let count_half = net(r.bt_count, floor).map(|x| x.1 / 2.0);
        let hist = net(r.bt_hist, floor).map(|x| x.1);
        let _ = write!(
            s,
            "### {} ({}, {} reads)\n\n{}\n\n\
             | program | per hit | net of the floor | runs |\n|---|---|---|---|\n\
             | bpftrace empty `{}` (the accounting floor) | {} |\n\
             | bpftrace count-only `{}` | {} |\n\
             | bpftrace hist `{}` | {} |\n\
             | gpudirect-trace aggregate-only (`{}`) | {} |\n\
             | gpudirect-trace aggregate-only --no-lifetimes (`{}`) | {} |\n\
             | gpudirect-trace streaming (`{}`) | {} |\n\n\
             Goals, net of the floor: aggregate-only at most half of bpftrace's count-only: \
             **{}** (with --no-lifetimes: **{}**); streaming at most bpftrace's hist: **{}**. \
             Events lost or missed by our three tracers: {}.{}\n\n",
            r.kernel,
            r.event,
            r.reads,
            r.bpftrace_version,
            one_liner(&r.event, Liner::Empty),
            cell(r.bt_empty, None),
            one_liner(&r.event, Liner::Count),
            cell(r.bt_count, floor),
            one_liner(&r.event, Liner::Hist),
            cell(r.bt_hist, floor),
            r.ours_program,
            cell(r.aggregate, floor),
            r.ours_program,
            cell(r.no_lifetimes, floor),
            r.ours_program,
            cell(r.streaming, floor),
            goal(net(r.aggregate, floor), count_half),
            goal(net(r.no_lifetimes, floor), count_half),
            goal(net(r.streaming, floor), hist),
            r.ours_lost,
            if r.stuck.is_empty() {
                String::new()
            } else {
                format!(
                    " Did not exit within 60 s of SIGINT (killed): {}.",
                    r.stuck.join("; ")
                )
            },
        );
        if !r.pipe.is_empty() {
            let rows: Vec<String> = r
                .pipe
                .iter()
                .map(|(off, on, n)| {
                    let per = if *n > 0 {
                        format!("{:.1} us", (on - off) * 1e6 / *n as f64)
                    } else {
                        "-".into()
                    };
                    format!("| {off:.2} s | {on:.2} s | {n} | {per} |")
                })
                .collect();
            let _ = write!(
                s,
                "tracefs `trace_pipe` of the same event (`cat trace_pipe`), 4096 of the same \
                 reads without any tracing and with it, alternately. Its cost is no BPF program, so \
                 bpf_stats cannot see it: the difference of the reads' wall times (1/100 s \
                 clock, noisy under TCG) is all there is, and it holds the whole stream, the \
                 text formatting and the reader `cat` on the same vCPU, unlike the per-hit \
                 rows above (which leave out our own reader too):\n\n\
                 | no tracing | trace_pipe | lines | difference per line |\n|---|---|---|---|\n{}\n\n",
                rows.join("\n")
            );
        }
    }
    s.push_str(END);
    s
}

#[derive(Clone, Copy)]
enum Liner {
    Empty,
    Count,
    Hist,
}

/// The one-liners the script runs (kept in step with it).
fn one_liner(event: &str, which: Liner) -> String {
    let (probe, key) = if event.starts_with("dma:") {
        ("tracepoint:dma:dma_map_page", "str(args->device)")
    } else {
        ("tracepoint:iommu:map", "comm")
    };
    match which {
        Liner::Empty => format!("{probe} {{ }}"),
        Liner::Count => format!("{probe} {{ @[probe] = count(); }}"),
        Liner::Hist => format!("{probe} {{ @[{key}] = hist(args->size); }}"),
    }
}

pub fn run(kernels: &[String]) -> Result<()> {
    ensure!(
        std::path::Path::new("/usr/bin/bpftrace").exists(),
        "bench --vm runs the host's bpftrace in the guest: install it (cargo xtask bootstrap)"
    );
    let vm = BenchVm {
        what: "bench",
        label: "bench-vm",
        script: SCRIPT,
        // Two bpftrace processes with LLVM and clang loaded, page-cached
        // over 9p, next to two tracers.
        memory: 2048,
        host_root: true,
    };
    let mut runs = Vec::new();
    on_each_kernel(kernels, &vm, |k, release, lines| {
        let mut r = parse(k, lines)?;
        eprintln!("xtask: bench --vm {k}: {r:?}");
        r.kernel = format!("{} ({release})", r.kernel);
        runs.push(r);
        Ok(())
    })?;
    let section = render(
        &runs,
        &bench_doc::machine(),
        &bench_doc::commit(),
        &bench_doc::date(),
    );
    println!("{section}");
    bench_doc::write_section(START, END, &section)
}

/// A VM of `bench --vm`: the script it runs, and what its messages and
/// console lines call it.
pub(crate) struct BenchVm<'a> {
    /// `bench` or `workload`.
    pub what: &'a str,
    pub label: &'a str,
    /// The script (tests/vm/bench/), run with `sh -c`.
    pub script: &'a str,
    /// Guest memory in MiB.
    pub memory: u32,
    /// Share the host's / (for its bpftrace).
    pub host_root: bool,
}

/// Runs `bench.script` in one VM per kernel (Intel IOMMU, one CPU, one NVMe,
/// at most 15 minutes). `each` gets the kernel, its release and the console
/// lines of a run that succeeded, before the next kernel boots, so a run
/// that cannot be read stops the bench early.
pub(crate) fn on_each_kernel(
    kernels: &[String],
    bench: &BenchVm,
    mut each: impl FnMut(&str, String, &[String]) -> Result<()>,
) -> Result<()> {
    let script = fs::read_to_string(host::repo_root().join(bench.script))
        .with_context(|| format!("reading {}", bench.script))?;
    let opts = BootOpts {
        iommu: Iommu::Intel,
        memory: bench.memory,
        smp: 1,
        kernel_log: false,
        no_build: false,
        no_tracer: false,
        append: Vec::new(),
        host_root: bench.host_root,
    };
    let binaries = vm::build_binaries(&opts)?;
    let what = bench.what;
    for k in kernels {
        let spec = RunSpec {
            kernel: k.clone(),
            devices: vec![Device::Nvme],
            modules: Vec::new(),
            kmods: Vec::new(),
            timeout: Duration::from_secs(900),
            command: vec!["sh".into(), "-c".into(), script.clone()],
            prefix: format!("[{k} {what}] "),
            label: bench.label.into(),
        };
        let out = vm::boot(&spec, &opts, &binaries)?;
        if let Some(p) = &out.problem {
            bail!("{k}: the {what} VM failed: {p}");
        }
        ensure!(
            out.success,
            "{k}: the {what} script failed (exit {:?})",
            out.exit
        );
        each(k, vm::kernel::fetch(k)?.release, &out.lines)?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Console output as `vm::boot` gives it.
    pub(crate) fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn parses_the_guest_output() {
        let out = lines(
            "BENCH-VM event=dma:dma_map_page ours_program=dma_map bpftrace=bpftrace v0.17.0\n\
             BENCH-VM reads=4096 seconds=10.1-14.2\n\
             BENCH-VM bpftrace-hist prog_type:\t5 prog_id:\t40 run_time_ns:\t8000000 run_cnt:\t4000 \n\
             BENCH-VM bpftrace-count prog_type:\t5 prog_id:\t41 run_time_ns:\t4000000 run_cnt:\t4000 \n\
             BENCH-VM bpftrace-empty prog_type:\t5 prog_id:\t42 run_time_ns:\t400000 run_cnt:\t4000 \n\
             STREAMING {\"program_stats\":[{\"program\":\"dma_map\",\"run_count\":4000,\"ns_per_run\":1500.0}],\"lost_events\":0,\"missed_events\":0}\n\
             AGGREGATE {\"program_stats\":[{\"program\":\"dma_unmap\",\"run_count\":4000,\"ns_per_run\":9.0},{\"program\":\"dma_map\",\"run_count\":4000,\"ns_per_run\":900.0}]}\n\
             BENCH-VM stuck no-lifetimes pid=77: killed\n\
             BENCH-VM trace_pipe off round=1 seconds=4.000\n\
             BENCH-VM trace_pipe on round=1 seconds=4.400 lines=4000",
        );
        let r = parse("6.12", &out).expect("parse");
        assert_eq!(r.event, "dma:dma_map_page");
        assert_eq!(r.bpftrace_version, "bpftrace v0.17.0");
        assert_eq!(r.reads, 4096);
        assert_eq!(r.bt_hist, Some((4000, 2000.0)));
        assert_eq!(r.bt_count, Some((4000, 1000.0)));
        assert_eq!(r.bt_empty, Some((4000, 100.0)));
        assert_eq!(r.no_lifetimes, None);
        assert_eq!(r.streaming, Some((4000, 1500.0)));
        assert_eq!(r.aggregate, Some((4000, 900.0)));
        assert_eq!(r.pipe, vec![(4.0, 4.4, 4000)]);
        assert_eq!(r.stuck, ["no-lifetimes pid=77: killed"]);
        let md = render(&[r], "m", "abc", "d");
        // Net of the 100 ns floor: 800 against 450, 1400 against 1900.
        assert!(md.contains("missed by 350 ns"), "{md}");
        assert!(md.contains("met (1400 <= 1900 ns)"), "{md}");
        assert!(md.contains("100.0 us"), "{md}");
        assert!(md.contains("(killed): no-lifetimes"), "{md}");
        assert!(md.starts_with(START) && md.ends_with(END));
        assert!(parse("6.1", &lines("noise")).is_err());
    }
}
