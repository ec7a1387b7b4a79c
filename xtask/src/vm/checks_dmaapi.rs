//! Host checks of the DMA-API scenarios: the hooks on kernels without
//! dma:* (issue 22), the two sources agreeing, huge scatterlists (issue 23).

use anyhow::{bail, ensure, Result};
use serde_json::Value;

use super::{checks::device, qemu::Device};

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

/// The NVMe's DMA-API level from the hooks, for `mib` MiB of O_DIRECT reads
/// (nvme-dma-hooks*): maps == unmaps > 0, the bytes read from the device
/// (NVMe maps exactly the pages of the request), sizes, one lifetime per
/// unmap; under VT-d on 6.1 also the IOMMU level attributed through the
/// DMA-API call. `fentry` and `kprobe` are the two tracers' final objects.
pub fn nvme_dma_hooks(
    series: &str,
    vtd: bool,
    fentry: &Value,
    kprobe: &Value,
    mib: u64,
) -> Result<()> {
    let bdf = Device::Nvme.bdf();
    let lossy = kprobe_loss_accounted(series, fentry, kprobe)?;
    let mut summary = Vec::new();
    for (what, v) in [("fentry", fentry), ("kprobe", kprobe)] {
        if lossy && what == "kprobe" {
            continue;
        }
        let d = device(v, bdf)?;
        let (maps, unmaps) = (n(d, "maps"), n(d, "unmaps"));
        let from_dev = n(d, "bytes_from_device");
        let dma = &d["dma"];
        let lifetimes = dma["lifetime_ns"]["count"].as_u64().unwrap_or(0);
        ensure!(
            d["level"] == "dma" && d["dma_source"] == "hooks",
            "{what}: {bdf} level {} source {} (want dma from hooks)",
            d["level"],
            d["dma_source"]
        );
        ensure!(
            maps > 0 && maps == unmaps,
            "{what}: {bdf} maps={maps} unmaps={unmaps}"
        );
        // Nothing else touches the disk: the reads are the device's only
        // device-to-memory traffic, to the byte.
        ensure!(
            from_dev == mib << 20 && n(d, "bytes_unmapped") == n(d, "bytes_mapped"),
            "{what}: {bdf} {from_dev} bytes from the device, {} mapped, {} unmapped (want {})",
            n(d, "bytes_mapped"),
            n(d, "bytes_unmapped"),
            mib << 20
        );
        ensure!(
            lifetimes == unmaps && n(d, "outstanding_mappings") == 0,
            "{what}: {bdf} {lifetimes} lifetimes for {unmaps} unmaps, {} outstanding",
            n(d, "outstanding_mappings")
        );
        ensure!(
            d["map_size"]["p50"].as_u64().unwrap_or(0) > 0 && n(d, "sg_truncated") == 0,
            "{what}: {bdf} map_size {} sg_truncated {}",
            d["map_size"],
            d["sg_truncated"]
        );
        let iommu = &d["iommu"];
        let via = n(d, "iommu_via_dma_api");
        if vtd && series != "5.10" {
            ensure!(
                n(iommu, "maps") > 0 && via > 0,
                "{what}: {bdf} iommu maps={} via_dma_api={via}: the IOMMU level is not \
                 nested under the DMA API",
                n(iommu, "maps")
            );
        } else if !vtd {
            ensure!(
                n(iommu, "maps") == 0,
                "{what}: {bdf} iommu maps={} without an IOMMU",
                n(iommu, "maps")
            );
        }
        summary.push((maps, unmaps, from_dev, n(d, "sg_entries")));
        eprintln!(
            "xtask: {series}: {bdf} ({what}): dma maps={maps} unmaps={unmaps} from_device={from_dev} \
             size p50={} lifetimes={lifetimes} (p50 {} ns) iommu maps={} via_dma_api={via}",
            d["map_size"]["p50"],
            dma["lifetime_ns"]["p50"],
            n(iommu, "maps")
        );
    }
    if let [f, k] = &summary[..] {
        ensure!(
            f == k,
            "fentry and kprobe tracers disagree: (maps, unmaps, bytes, entries) {f:?} vs {k:?}"
        );
    }
    Ok(())
}

/// The kprobe tracer's NVMe calls, where its final object says it missed
/// some runs: an interrupt's unmap landing inside its own dma_map kprobe
/// is skipped by the kernel (seen on 5.10: 14 of 16 unmaps). Then the exact
/// checks cannot hold, but the loss must be counted: every call it lacks
/// against the fentry tracer is within its `missed_events`, and it never
/// sees more than fentry does. Returns whether the loss was accounted.
fn kprobe_loss_accounted(series: &str, fentry: &Value, kprobe: &Value) -> Result<bool> {
    let missed = n(kprobe, "missed_events");
    if missed == 0 {
        return Ok(false);
    }
    let bdf = Device::Nvme.bdf();
    let (f, k) = (device(fentry, bdf)?, device(kprobe, bdf)?);
    let calls = |d: &Value| (n(d, "maps"), n(d, "unmaps"));
    let ((fm, fu), (km, ku)) = (calls(f), calls(k));
    ensure!(
        km <= fm && ku <= fu && (fm - km) + (fu - ku) <= missed,
        "kprobe: {bdf} maps={km} unmaps={ku} against fentry's {fm}/{fu}: more lost than the \
         {missed} missed runs it counted"
    );
    eprintln!(
        "xtask: {series}: {bdf} (kprobe): lost {} of {} calls to an interrupt inside its own \
         kprobes, counted: missed_events={missed}",
        (fm - km) + (fu - ku),
        fm + fu
    );
    Ok(true)
}

/// kprobe-missed: the edu's 16 pairs inside a kprobe handler are missed by
/// the kprobe tracer and counted; the 16 outside it are seen; fentry sees
/// all 32; no kprobe event is left behind.
pub fn kprobe_missed(series: &str, lines: &[String], fentry: &Value, kprobe: &Value) -> Result<()> {
    let bdf = Device::Edu.bdf();
    let calls = |v: &Value| -> Result<(u64, u64)> {
        let d = device(v, bdf)?;
        Ok((n(d, "maps"), n(d, "unmaps")))
    };
    let tag = |t: &str| super::checks::tagged_str(lines, t).unwrap_or("");
    let made: u64 = tag("EVENTS ").parse().unwrap_or(0);
    ensure!(
        made > 0,
        "{series}: no gpudirect_trace kprobe events while tracing (EVENTS {made})"
    );
    let (seen_f, seen_k) = (calls(fentry)?, calls(kprobe)?);
    ensure!(
        seen_f == (32, 32),
        "{series}: fentry tracer: edu maps/unmaps {seen_f:?}, want 32/32"
    );
    let d = device(kprobe, bdf)?;
    if d["dma_source"] == "tracepoints" {
        // dma:* fire inside the kprobe handler too; only the timing
        // kprobes on the same calls miss the nested ones.
        let timed = |op: &str| d["latency_ns"][op]["count"].as_u64().unwrap_or(0);
        let (tm, tu) = (timed("dma_map"), timed("dma_unmap"));
        // The 16 nested pairs miss both timing kprobes of each call: 64
        // missed runs. A call outside the kprobe can still go untimed when
        // its kprobe fires while another BPF program runs on that CPU (the
        // kernel's recursion guard; CI at 15c5556 on 7.2 under TCG: 11/13
        // timed, 79 missed): it must then be counted past those 64.
        let beyond_nested = n(kprobe, "missed_events").saturating_sub(64);
        ensure!(
            seen_k == (32, 32) && tm <= 16 && tu <= 16 && (16 - tm) + (16 - tu) <= beyond_nested,
            "{series}: kprobe tracer on dma:* tracepoints: edu maps/unmaps {seen_k:?}, timed \
             {tm}/{tu} with {beyond_nested} missed runs beyond the nested 64, want 32/32 counted \
             and the 16/16 outside the kprobe timed or their misses counted"
        );
    } else {
        ensure!(
            seen_k == (16, 16),
            "{series}: kprobe tracer: edu maps/unmaps {seen_k:?}, want the 16/16 made outside the kprobe"
        );
    }
    let missed = n(kprobe, "missed_events");
    ensure!(
        missed >= 32,
        "{series}: kprobe tracer counts {missed} missed runs for the 32 calls made inside a kprobe"
    );
    let left = tag("LEFT ");
    ensure!(
        left == "0",
        "{series}: {left} gpudirect_trace kprobe events left in kprobe_events after both tracers exited"
    );
    let (m, u) = seen_k;
    eprintln!(
        "xtask: {series}: {bdf}: fentry 32/32, kprobe {m}/{u} ({}) with missed_events={missed} \
         ({made} tracefs kprobe events while tracing, none left)",
        d["dma_source"]
    );
    Ok(())
}

/// dma-sources-agree: the tracepoints and the forced hooks over the same
/// I/O give identical counts and bytes; prints both sources' per-hit cost.
pub fn dma_sources_agree(series: &str, tp: &Value, hooks: &Value) -> Result<()> {
    let bdf = Device::Nvme.bdf();
    let (a, b) = (device(tp, bdf)?, device(hooks, bdf)?);
    // Per operation: what a dma:* tracepoint reports comes from it in the
    // first tracer and from the hooks in the second. Operations no
    // tracepoint reports (the IOVA API, 6.17+: without an IOMMU its
    // dma_iova_try_alloc declines are counted) are the hooks' in both, so
    // the device's overall source is "tracepoints+hooks" there (7.2).
    let hook_only = ["iova"];
    let ops = |v: &Value| -> Vec<(String, String)> {
        v["dma_sources"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, s)| (k.clone(), s.as_str().unwrap_or("").to_string()))
            .collect()
    };
    for (op, src) in ops(a) {
        let want = if hook_only.contains(&op.as_str()) {
            "hook"
        } else {
            "tracepoint"
        };
        ensure!(
            src == want,
            "{bdf}: default tracer: {op} from {src}, want {want} (dma_sources {})",
            a["dma_sources"]
        );
    }
    for (op, src) in ops(b) {
        ensure!(
            src == "hook",
            "{bdf}: --dma-source hooks: {op} from {src} (dma_sources {})",
            b["dma_sources"]
        );
    }
    ensure!(
        a["dma_source"]
            .as_str()
            .is_some_and(|s| s.starts_with("tracepoints"))
            && b["dma_source"] == "hooks",
        "sources are {} and {}",
        a["dma_source"],
        b["dma_source"]
    );
    let keys = [
        "maps",
        "unmaps",
        "bytes_mapped",
        "bytes_unmapped",
        "bytes_from_device",
        "bytes_to_device",
        "sg_maps",
        "sg_entries",
        "sg_truncated",
    ];
    for k in keys {
        ensure!(
            a[k] == b[k],
            "{bdf} {k}: tracepoints {} hooks {}",
            a[k],
            b[k]
        );
    }
    ensure!(n(a, "maps") > 0, "{bdf}: no maps at all");
    eprintln!(
        "xtask: {series}: {bdf}: tracepoints and hooks agree: maps={} unmaps={} bytes={} entries={}",
        a["maps"], a["unmaps"], a["bytes_mapped"], a["sg_entries"]
    );
    // Per-hit cost (kernel.bpf_stats_enabled): the tracepoint program
    // against the same function's hooks in the hooks-forced tracer, whose
    // entry/exit programs also do the timing that the other tracer's
    // hooks do without records (the difference is the record's cost).
    let stat = |v: &Value, prog: &str| -> Option<(u64, f64)> {
        v["program_stats"].as_array()?.iter().find_map(|p| {
            (p["program"] == prog).then(|| {
                (
                    p["run_count"].as_u64().unwrap_or(0),
                    p["ns_per_run"].as_f64().unwrap_or(0.0),
                )
            })
        })
    };
    for (tp_prog, hook_progs) in [
        ("dma_map", ["t_dma_map_in", "t_dma_map_out"]),
        ("dma_unmap", ["t_dma_unmap_in", "t_dma_unmap_out"]),
        ("dma_map_sg", ["t_dma_map_sg_in", "t_dma_map_sg_out"]),
        ("dma_unmap_sg", ["t_dma_unmap_sg_in", "t_dma_unmap_sg_out"]),
    ] {
        let t = stat(tp, tp_prog);
        let with: Vec<_> = hook_progs.iter().map(|p| stat(hooks, p)).collect();
        let without: Vec<_> = hook_progs.iter().map(|p| stat(tp, p)).collect();
        eprintln!(
            "xtask: {series}: per hit: tracepoint {tp_prog} {t:?}; hooks with records {:?} = {:?}; \
             the same hooks timing only {:?} = {:?}",
            hook_progs, with, hook_progs, without
        );
    }
    Ok(())
}

/// sg-many-exact: in each tracer's final object, the edu's scatter-gather
/// bytes equal the gdt-misuse driver's own totals ("sg-many entries=N
/// bytes=B mapped=M" lines), both ways, and no walk was cut.
pub fn sg_many_exact(series: &str, lines: &[String], tracers: &[(&str, Value)]) -> Result<()> {
    let kv = |l: &str, k: &str| -> Option<u64> {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
    };
    let mut cmds = 0u64;
    let (mut entries, mut bytes) = (0u64, 0u64);
    for l in lines
        .iter()
        .filter(|l| l.contains("gdt-misuse: sg-many entries="))
    {
        let (Some(n), Some(b), Some(m)) = (kv(l, "entries"), kv(l, "bytes"), kv(l, "mapped"))
        else {
            bail!("unparsable driver line {l:?}");
        };
        ensure!(m > 0, "the driver's dma_map_sg failed: {l}");
        cmds += 1;
        entries += n;
        bytes += b;
    }
    ensure!(
        cmds == 2,
        "want 2 sg-many lines from the driver, got {cmds}"
    );
    let bdf = Device::Edu.bdf();
    for (what, live) in tracers {
        let d = device(live, bdf)?;
        let got = (
            n(d, "sg_maps"),
            n(d, "sg_entries"),
            n(d, "bytes_mapped"),
            n(d, "bytes_unmapped"),
            n(d, "sg_truncated") + n(d, "sg_unmap_truncated"),
        );
        ensure!(
            got == (cmds, entries, bytes, bytes, 0),
            "{what}: {bdf}: (sg maps, entries, bytes mapped, unmapped, truncated) = {got:?}, \
             the driver says ({cmds}, {entries}, {bytes}, {bytes}, 0)"
        );
        eprintln!(
            "xtask: {series}: {bdf} ({what}): {cmds} sg maps of {entries} entries, {bytes} bytes \
             mapped and unmapped, exactly the driver's totals ({} source)",
            d["dma_source"]
        );
    }
    Ok(())
}
