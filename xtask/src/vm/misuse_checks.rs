//! Host-side check of the dma-misuse-module scenario: the findings of
//! `record --check` against the calls the misbehaving driver (tests/vm/
//! gdt-misuse) logged making them.
//!
//! Each misuse must be reported exactly once, with the right check, on the
//! edu with its driver's name, at the offending call (its DMA address, and
//! its time within a few milliseconds before the driver's log line); the
//! control, the exempt commands, the NVMe and the e1000e give nothing; a
//! sync the kernel skips (6.11+ on a coherent device) gives nothing; the
//! file's report finds the same.

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use super::{checks::tagged, qemu::Device};

/// One `TAG_CALL <printk seconds> cmd=.. n=.. fn=.. addr=.. ...` line.
#[derive(Debug)]
struct DriverCall {
    ts_ns: u64,
    cmd: String,
    n: u32,
    addr: u64,
    skipped: bool,
}

fn driver_calls(lines: &[String], tag: &str) -> Vec<DriverCall> {
    let prefix = format!("{tag}_CALL ");
    lines
        .iter()
        .filter_map(|l| l.trim().strip_prefix(&prefix))
        .filter_map(|rest| {
            let mut it = rest.split_whitespace();
            let secs: f64 = it.next()?.parse().ok()?;
            let kv: Vec<(&str, &str)> = it.filter_map(|w| w.split_once('=')).collect();
            let get = |k: &str| kv.iter().find(|(a, _)| *a == k).map(|(_, v)| *v);
            Some(DriverCall {
                ts_ns: (secs * 1e9).round() as u64,
                cmd: get("cmd")?.to_owned(),
                n: get("n")?.parse().ok()?,
                addr: u64::from_str_radix(get("addr")?.trim_start_matches("0x"), 16).ok()?,
                skipped: get("kernel_skips") == Some("1"),
            })
        })
        .collect()
}

/// The misuse each command performs: its offending call and the check.
const EXPECTED: &[(&str, u32, &str)] = &[
    ("double-unmap", 3, "double-unmap"),
    ("unmap-size", 2, "unmap-size"),
    ("unmap-dir", 2, "unmap-direction"),
    ("unmap-class-resource", 2, "unmap-class"),
    ("unmap-class-page", 2, "unmap-class"),
    ("free-coherent-streaming", 2, "unmap-class"),
    ("sg-unmap-nents", 2, "sg-unmap-count"),
    ("sync-after-unmap", 3, "sync-unmapped"),
    ("sync-outside", 2, "sync-outside"),
    ("sync-dir-cpu", 2, "sync-direction"),
    ("sync-dir-device", 2, "sync-direction"),
    ("sync-sg-after-unmap", 3, "sync-unmapped"),
    ("sync-sg-count", 2, "sync-sg-count"),
    ("overlap-first", 2, "cacheline-overlap"),
    ("overlap-shared-line", 2, "cacheline-overlap"),
    ("overlap-later", 2, "cacheline-overlap"),
    ("overlap-bidir", 2, "cacheline-overlap"),
    ("map-text", 1, "kernel-image"),
    ("map-rodata", 1, "kernel-image"),
    // The IOVA API (6.17+; absent from the driver on older headers).
    ("iova-link-outside", 5, "iova-outside"),
    ("iova-unlink-unlinked", 3, "iova-unlink-unlinked"),
    ("iova-sync-unlinked", 3, "iova-sync-unlinked"),
    ("iova-free-linked", 4, "iova-free-linked"),
    ("iova-double-free", 4, "iova-double-free"),
];

/// A finding as the check compares it.
#[derive(Debug, PartialEq)]
struct Finding {
    check: String,
    device: String,
    driver: String,
    addr: u64,
    ts_ns: u64,
    count: u64,
    /// The offending call's kernel stack (`--stacks`).
    stack: Vec<String>,
    /// The name of the offending call's process.
    comm: Option<String>,
}

fn findings(v: &Value) -> Vec<Finding> {
    v["incidents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["category"] == "misuse")
        .map(|i| {
            let m = &i["misuse"];
            let hex = |x: &Value| {
                x.as_str()
                    .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
                    .unwrap_or(0)
            };
            Finding {
                check: m["check"].as_str().unwrap_or("").to_owned(),
                device: m["device"].as_str().unwrap_or("").to_owned(),
                driver: m["driver"].as_str().unwrap_or("").to_owned(),
                addr: hex(&m["call"]["address"]),
                ts_ns: m["call"]["mono_ns"].as_u64().unwrap_or(0),
                count: m["count"].as_u64().unwrap_or(0),
                stack: m["call"]["stack"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f.as_str().map(str::to_owned))
                    .collect(),
                comm: m["call"]["process"]["comm"].as_str().map(str::to_owned),
            }
        })
        .collect()
}

/// The stack names the driver's command (`cmd_NAME+0x.. [gdt_misuse]`):
/// the DMA-API calls are inlined into the cmd_* functions; map-text and
/// map-rodata tail-call map_kernel, which then stands in the stack.
fn names_command(stack: &[String], cmd: &str) -> bool {
    let f = format!("cmd_{}+", cmd.replace('-', "_"));
    stack.iter().any(|fr| {
        (fr.starts_with(&f) || (cmd.starts_with("map-") && fr.starts_with("map_kernel+")))
            && fr.ends_with("[gdt_misuse]")
    })
}

/// The stack as dma-debug prints it (issue 26): no frame of the tracer's
/// BPF programs or trampolines, and the first frame the DMA-API function
/// the driver called (dma_*, __dma_*, debug_dma_*), its caller next.
fn stack_shape(stack: &[String]) -> Result<()> {
    ensure!(
        !stack
            .iter()
            .any(|f| f.contains("[bpf]") || f.starts_with("bpf_")),
        "a BPF frame in the stack: {stack:#?}"
    );
    let first = stack.first().map(String::as_str).unwrap_or("");
    ensure!(
        ["dma_", "__dma_", "debug_dma_", "iommu_dma_"]
            .iter()
            .any(|p| first.starts_with(p)),
        "the stack does not start at the DMA-API function: {stack:#?}"
    );
    Ok(())
}

/// The process behind a driver command: the short-lived /bin/echo that
/// wrote it (misuse.lib's run_cmd), named though it is gone.
fn from_echo(tag: &str, cmd: &str, f: &Finding) -> Result<()> {
    ensure!(
        f.comm.as_deref() == Some("echo"),
        "{tag} {cmd}: process {:?}, want \"echo\" (the short-lived writer of the command)",
        f.comm
    );
    Ok(())
}

/// One phase (TAG: MISUSE, the whole command list with the unbind; SYNCS,
/// the sync commands with no sync skipped). Returns false when the phase
/// did not run.
fn phase(series: &str, lines: &[String], tag: &str) -> Result<bool> {
    let calls = driver_calls(lines, tag);
    if calls.is_empty() {
        return Ok(false);
    }
    let record = tagged(lines, &format!("{tag}_RECORD "))?;
    let report = tagged(lines, &format!("{tag}_REPORT "))?;
    // Which programs the kernel skipped: each skip resets the checks.
    for p in record["program_stats"].as_array().into_iter().flatten() {
        if p["missed"].as_u64().unwrap_or(0) > 0 {
            eprintln!(
                "xtask: {series}: {tag}: {} skipped {} of {} runs (recursion)",
                p["program"], p["missed"], p["run_count"]
            );
        }
    }
    let found = findings(&record);
    let edu = Device::Edu.bdf();
    let mut matched = vec![false; found.len()];
    let mut want = 0;
    for (cmd, n, check) in EXPECTED {
        let Some(c) = calls.iter().find(|c| c.cmd == *cmd && c.n == *n) else {
            continue;
        };
        // The finding at this call: its check, its DMA address, and (with
        // --stacks) a stack naming the command's function. Not matched by
        // time: the printk clock of the driver's line and the trace's
        // CLOCK_MONOTONIC drift apart under TCG (40 ms after 10 s, seen on
        // 6.12), so time is only a sanity bound.
        let hits: Vec<usize> = found
            .iter()
            .enumerate()
            .filter(|(_, f)| {
                f.check == *check
                    && f.addr == c.addr
                    && names_command(&f.stack, cmd)
                    && f.ts_ns.abs_diff(c.ts_ns) < 2_000_000_000
            })
            .map(|(i, _)| i)
            .collect();
        if c.skipped {
            ensure!(
                hits.is_empty(),
                "{tag} {cmd}: a finding for a sync the kernel skipped: {:?}",
                hits.iter().map(|&i| &found[i]).collect::<Vec<_>>()
            );
            continue;
        }
        want += 1;
        ensure!(
            hits.len() == 1,
            "{tag} {cmd}: {} {check} findings at {:#x} from cmd_{} (want exactly one); all \
             findings: {found:#?}",
            hits.len(),
            c.addr,
            cmd.replace('-', "_")
        );
        let f = &found[hits[0]];
        stack_shape(&f.stack).with_context(|| format!("{tag} {cmd}"))?;
        from_echo(tag, cmd, f)?;
        ensure!(
            f.device == edu && f.driver == "gdt-misuse",
            "{tag} {cmd}: on {} by {:?}, want {edu} by gdt-misuse",
            f.device,
            f.driver
        );
        matched[hits[0]] = true;
    }
    if tag == "MISUSE" {
        let leak = calls
            .iter()
            .find(|c| c.cmd == "leak" && c.n == 1)
            .context("no leak command in the driver's calls")?;
        let leaks: Vec<usize> = found
            .iter()
            .enumerate()
            .filter(|(_, f)| f.check == "leak-at-unbind")
            .map(|(i, _)| i)
            .collect();
        ensure!(
            leaks.len() == 1,
            "{} leak findings, want one: {found:#?}",
            leaks.len()
        );
        let f = &found[leaks[0]];
        ensure!(
            f.count == 2
                && f.addr == leak.addr
                && f.device == edu
                && f.driver == "gdt-misuse"
                && names_command(&f.stack, "leak"),
            "leak finding {f:?}: want 2 mappings, the oldest at {:#x} mapped by cmd_leak, on \
             {edu} by gdt-misuse",
            leak.addr
        );
        stack_shape(&f.stack).context("leak")?;
        from_echo(tag, "leak", f)?;
        matched[leaks[0]] = true;
        want += 1;
        let failures: u64 = record["misuse"]["map_failures"][edu]
            .as_array()
            .map(|m| m.iter().filter_map(|r| r["count"].as_u64()).sum())
            .unwrap_or(0);
        let map_fail = calls.iter().filter(|c| c.cmd == "map-fail").count() as u64;
        ensure!(
            failures == map_fail,
            "{failures} map failures counted on the edu, the driver made {map_fail}"
        );
        // Each failed map is an incident that names its writer, as the
        // findings do (it stayed `pid N [current task]` before 482e748).
        let incidents: Vec<&serde_json::Value> = record["incidents"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["category"] == "map-error" && i["device"] == edu)
            .collect();
        ensure!(
            incidents.len() as u64 == map_fail
                && incidents.iter().all(|i| i["process"]["comm"] == "echo"),
            "{tag}: {map_fail} map failures, want as many map-error incidents naming \"echo\": \
             {incidents:#?}"
        );
    }
    let extra: Vec<&Finding> = found
        .iter()
        .zip(&matched)
        .filter(|(_, m)| !**m)
        .map(|(f, _)| f)
        .collect();
    ensure!(
        extra.is_empty(),
        "{tag}: findings no misuse explains (the control, NVMe, e1000e, exempt commands must \
         give none): {extra:#?}"
    );
    ensure!(
        findings(&report) == found,
        "{tag}: report --json of the file finds otherwise than the recording did live"
    );
    // The guest's file reported here: the module's names come from the
    // file (symbolised at record time), not from this host's kallsyms.
    if let Ok(file) = super::checks::embedded_file_named(lines, tag) {
        let host = super::checks::host_report(&file, &format!("misuse-{tag}"))?;
        ensure!(
            findings(&host) == found,
            "{tag}: report --json of the file on the host finds otherwise than the recording \
             did live"
        );
        eprintln!("xtask: {series}: {tag}: the host's report of the guest's file agrees");
        let (ids, calls) = exported_stacks_named(&file, tag)?;
        eprintln!(
            "xtask: {series}: {tag}: export names {ids} stacks over {calls} calls, each with \
             its frames"
        );
    } else {
        ensure!(
            tag != "MISUSE",
            "MISUSE: the scenario printed no recording for the host"
        );
    }
    let unknown = &record["misuse"];
    eprintln!(
        "xtask: {series}: {tag}: {want} misuses, each found once; unknown unmaps {}, syncs {}, \
         unproven {}",
        unknown["unknown_unmaps"], unknown["unknown_syncs"], unknown["unproven"]
    );
    Ok(true)
}

pub fn dma_misuse(series: &str, lines: &[String]) -> Result<()> {
    ensure!(phase(series, lines, "MISUSE")?, "no MISUSE_CALL lines");
    if !phase(series, lines, "SYNCS")? {
        eprintln!("xtask: {series}: no force_sync phase (kernel without dma:* tracepoints)");
    }
    // The flight recorder beside MISUSE: its misuse trigger's snapshot, cut
    // from a ring, names the module's, NVMe's and e1000e's stacks; no
    // finding named most of them, and each must come with its frames.
    let snapshot = super::checks::embedded_file_named(lines, "FLIGHT")
        .context("FLIGHT: the scenario printed no flight-recorder snapshot")?;
    let (ids, calls) = exported_stacks_named(&snapshot, "FLIGHT")?;
    eprintln!(
        "xtask: {series}: FLIGHT: the misuse trigger's snapshot names {ids} stacks over {calls} \
         calls, each with its frames"
    );
    Ok(())
}

/// The guest's file exported here (`--format jsonl`): every `stack_id` a
/// record carries (`record --check --stacks`: each map's, and each call
/// that may be a finding's) is named by a `"kind":"stacks"` line with
/// frames, finding or not. Returns (stacks named, records naming one).
fn exported_stacks_named(file: &[u8], tag: &str) -> Result<(usize, usize)> {
    let out = super::checks::host_run(
        file,
        &format!("misuse-{tag}-export"),
        &["export", "--format", "jsonl"],
    )?;
    let mut named = std::collections::BTreeSet::new();
    let mut framed = std::collections::BTreeSet::new();
    let mut calls = 0;
    for line in String::from_utf8_lossy(&out).lines() {
        let v: Value = serde_json::from_str(line).context("export --format jsonl")?;
        if let Some(id) = v["stack_id"].as_u64() {
            named.insert(id);
            calls += 1;
        }
        if v["kind"] == "stacks" {
            for s in v["stacks"].as_array().into_iter().flatten() {
                if s["frames"].as_array().is_some_and(|f| !f.is_empty()) {
                    framed.extend(s["id"].as_u64());
                }
            }
        }
    }
    let missing: Vec<&u64> = named.difference(&framed).collect();
    ensure!(
        calls > 0 && missing.is_empty(),
        "{tag}: export names stacks without frames: {missing:?} ({calls} records with a \
         stack id)"
    );
    Ok((named.len(), calls))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_call_lines_parse() {
        let lines = vec![
            "MISUSE_CALL 12.345678 cmd=double-unmap n=3 fn=dma_unmap_single dev=0000:00:03.0 \
             addr=0xfffff000 size=64 dir=DMA_TO_DEVICE"
                .to_owned(),
            "MISUSE_CALL 13.000001 cmd=sync-dir-cpu n=2 fn=dma_sync_single_for_cpu \
             dev=0000:00:03.0 addr=0x1000 size=64 dir=DMA_FROM_DEVICE kernel_skips=1"
                .to_owned(),
            "noise".to_owned(),
        ];
        let c = driver_calls(&lines, "MISUSE");
        assert_eq!(c.len(), 2);
        assert_eq!(
            (c[0].ts_ns, c[0].n, c[0].addr),
            (12_345_678_000, 3, 0xffff_f000)
        );
        assert!(c[1].skipped && !c[0].skipped);
    }
}
