//! Host checks of the IOVA-API scenarios (issue 32): nvme-iova (VT-d: the
//! block layer's dma_iova_* calls are the NVMe's maps) and
//! nvme-direct-unmap (no IOMMU: the maps the kernel never unmaps).

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use super::{checks::tagged, qemu::Device};

/// What both scenarios read: 32 O_DIRECT reads of 128 KiB.
const READ_BYTES: u64 = 32 * 128 * 1024;

fn device<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v["devices"]
        .as_array()?
        .iter()
        .find(|d| d["device"].as_str() == Some(name))
}

fn n(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

/// Events the tracer lost or the kernel skipped: a shortfall must be counted.
fn losses(v: &Value) -> u64 {
    n(v, "lost_events") + n(v, "missed_events")
}

/// The kernel's run time per hit of the programs whose names start with
/// `prefix`, from a `live --json` object's program_stats (bpf_stats).
fn per_hit(series: &str, tag: &str, v: &Value, prefixes: &[&str]) {
    for p in v["program_stats"].as_array().into_iter().flatten() {
        let name = p["program"].as_str().unwrap_or("");
        if prefixes.iter().any(|x| name.starts_with(x)) {
            eprintln!(
                "xtask: {series}: {tag}: {name}: {} runs, {:.0} ns per run",
                p["run_count"],
                p["ns_per_run"].as_f64().unwrap_or(0.0)
            );
        }
    }
}

/// nvme-iova: in both modes the NVMe's own row, at level dma, with maps ==
/// unmaps > 0 and 4 MiB from the device, its IOMMU maps attributed to it
/// and none left unattributed; streaming also shows the iova row and the
/// hooks as the source of the "iova" operation.
pub fn nvme_iova(series: &str, lines: &[String]) -> Result<()> {
    let nvme = Device::Nvme.bdf();
    for tag in ["STREAMING", "AGGREGATE"] {
        let v = tagged(lines, &format!("{tag} "))?;
        let d = device(&v, nvme).with_context(|| format!("{tag}: no {nvme} row: {v}"))?;
        let (maps, unmaps) = (n(d, "maps"), n(d, "unmaps"));
        let from = n(d, "bytes_from_device");
        ensure!(
            d["level"] == "dma",
            "{tag}: {nvme} at level {}, want dma (the IOVA API as its DMA-API source)",
            d["level"]
        );
        let lost = losses(&v);
        ensure!(
            maps > 0 && (maps == unmaps || lost > 0),
            "{tag}: {nvme} maps={maps} unmaps={unmaps}, want equal and > 0 (lost+missed={lost})"
        );
        ensure!(
            from == READ_BYTES || (from < READ_BYTES && lost > 0),
            "{tag}: {nvme} bytes_from_device={from}, want {READ_BYTES} (lost+missed={lost})"
        );
        // How they were attributed is known from streamed records only.
        let via = tag == "AGGREGATE" || n(d, "iommu_via_dma_api") > 0;
        ensure!(
            n(&d["iommu"], "maps") > 0 && via,
            "{tag}: {nvme}'s IOMMU maps are not attributed to it: iommu={} via_dma_api={}",
            d["iommu"],
            d["iommu_via_dma_api"]
        );
        if let Some(u) = device(&v, "(iommu, unattributed)") {
            ensure!(
                n(&u["iommu"], "maps") == 0,
                "{tag}: iommu maps left unattributed: {}",
                u["iommu"]
            );
        }
        if tag == "STREAMING" {
            let iova = &d["iova"];
            ensure!(
                n(iova, "allocs") > 0 && n(iova, "links") == maps && n(iova, "out_of_range") == 0,
                "{tag}: {nvme}'s iova row {iova} (want allocations, links == maps {maps}, none \
                 out of range)"
            );
            ensure!(
                d["dma_sources"]["iova"] == "hook",
                "{tag}: {nvme}'s dma_sources {} lack iova from the hooks",
                d["dma_sources"]
            );
        }
        per_hit(
            series,
            tag,
            &v,
            &["t_iova_", "t_need_unmap", "iommu_map", "iommu_unmap"],
        );
        eprintln!(
            "xtask: {series}: {tag}: {nvme} level dma, {maps} maps / {unmaps} unmaps through the \
             IOVA API, {from} bytes from the device, {} IOMMU maps attributed",
            n(&d["iommu"], "maps")
        );
    }
    let p = tagged(lines, "PROBES ")?;
    let rows = p["probes"].as_array().cloned().unwrap_or_default();
    for name in [
        "time:dma_iova_try_alloc",
        "time:dma_iova_link",
        "time:dma_iova_destroy",
    ] {
        let row = rows
            .iter()
            .find(|r| r["name"] == name)
            .with_context(|| format!("probes: no {name} row"))?;
        ensure!(
            row["status"] == "attached",
            "probes: {name} is {}: {}",
            row["status"],
            row["reason"]
        );
    }
    Ok(())
}

/// nvme-direct-unmap: the NVMe's reads counted whole, nothing outstanding
/// and no leak suspect on it once they are done, and the skipped unmaps
/// said with how many.
pub fn nvme_direct_unmap(series: &str, lines: &[String]) -> Result<()> {
    let nvme = Device::Nvme.bdf();
    for tag in ["STREAMING", "AGGREGATE"] {
        let v = tagged(lines, &format!("{tag} "))?;
        let d = device(&v, nvme).with_context(|| format!("{tag}: no {nvme} row: {v}"))?;
        let from = n(d, "bytes_from_device");
        let lost = losses(&v);
        ensure!(
            from == READ_BYTES || (from < READ_BYTES && lost > 0),
            "{tag}: {nvme} bytes_from_device={from}, want {READ_BYTES} (lost+missed={lost})"
        );
        ensure!(
            n(d, "outstanding_mappings") == 0 && n(d, "outstanding_bytes") == 0,
            "{tag}: {nvme} has {} mappings ({} bytes) outstanding after the reads",
            d["outstanding_mappings"],
            d["outstanding_bytes"]
        );
        // Streaming mappings only: a dma_pool page the driver keeps
        // (coherent) is long-lived by design.
        let leaks: Vec<&Value> = v["long_lived"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|l| l["device"].as_str() == Some(nvme) && l["level"] == "dma")
            .collect();
        ensure!(leaks.is_empty(), "{tag}: {nvme} leak suspects: {leaks:?}");
        ensure!(
            n(d, "unmap_not_needed") > 0,
            "{tag}: {nvme}: no dma_need_unmap() false seen ({d})"
        );
        let skipped = n(&d["dma"], "unmaps_skipped");
        if tag == "STREAMING" {
            ensure!(
                skipped == n(d, "maps") - n(d, "unmaps") && skipped > 0,
                "{tag}: {nvme}: {skipped} unmaps said skipped, maps {} unmaps {}",
                d["maps"],
                d["unmaps"]
            );
        }
        per_hit(
            series,
            tag,
            &v,
            &["dma_map", "t_need_unmap", "t_dma_map_phys"],
        );
        eprintln!(
            "xtask: {series}: {tag}: {nvme} {from} bytes from the device, {} maps, {} unmaps, \
             {skipped} unmaps skipped by the kernel (dma_need_unmap false {} times), nothing \
             outstanding",
            d["maps"], d["unmaps"], d["unmap_not_needed"]
        );
    }
    Ok(())
}
