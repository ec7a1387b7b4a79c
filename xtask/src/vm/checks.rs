//! Host-side checks of what `gpudirect-trace live --json` printed in a guest
//! (the last JSON object of the console output: cumulative counters).

use anyhow::{bail, ensure, Context as _, Result};
use serde_json::Value;

use super::qemu::Device;

fn device<'a>(v: &'a Value, name: &str) -> Result<&'a Value> {
    v["devices"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["device"].as_str() == Some(name)))
        .with_context(|| format!("no device entry {name:?} in the final interval"))
}

/// NVMe reads under strict VT-d: DMA-API and IOMMU latencies and lifetimes
/// on the NVMe's bus id, attributed in-kernel. 5.10's intel-iommu maps
/// without iommu_map() (no iommu:map events, no iommu_map calls), so there
/// only the DMA-API timing exists.
pub fn nvme_latency(series: &str, v: &Value) -> Result<()> {
    let bdf = Device::Nvme.bdf();
    let d = device(v, bdf)?;
    let lat = &d["latency_ns"];
    let check = |op: &str| -> Result<()> {
        let l = &lat[op];
        let n = |k: &str| l[k].as_u64().unwrap_or(0);
        let (count, p50, p99, max) = (n("count"), n("p50"), n("p99"), n("max"));
        ensure!(
            count > 0 && p50 > 0 && p99 >= p50 && max >= p99,
            "{bdf} {op} latency: count={count} p50={p50} p99={p99} max={max}"
        );
        eprintln!("xtask: {series}: {bdf} {op}: count={count} p50={p50}ns p99={p99}ns max={max}ns");
        Ok(())
    };
    check("dma_map_sg")?;
    check("dma_unmap_sg")?;
    if series == "5.10" {
        return Ok(());
    }
    check("iommu_map")?;
    check("iommu_unmap")?;
    let iommu = &d["iommu"];
    let (maps, unmaps) = (
        iommu["maps"].as_u64().unwrap_or(0),
        iommu["unmaps"].as_u64().unwrap_or(0),
    );
    let lifetimes = iommu["lifetime_ns"]["count"].as_u64().unwrap_or(0);
    ensure!(
        maps > 0 && unmaps > 0,
        "{bdf}: iommu maps={maps} unmaps={unmaps}"
    );
    ensure!(
        lifetimes > 0 && lifetimes <= unmaps,
        "{bdf}: {lifetimes} lifetimes for {unmaps} unmaps"
    );
    let via = d["iommu_via_dma_api"].as_u64().unwrap_or(0);
    ensure!(
        via > 0,
        "{bdf}: no IOMMU event attributed through the DMA API"
    );
    eprintln!(
        "xtask: {series}: {bdf}: iommu maps={maps} unmaps={unmaps} lifetimes={lifetimes} via_dma_api={via}"
    );
    Ok(())
}

fn faults(v: &Value) -> Vec<Value> {
    v["faults"].as_array().cloned().unwrap_or_default()
}

fn find_fault<'a>(fs: &'a [Value], addr: &str) -> Result<&'a Value> {
    fs.iter()
        .find(|f| f["address"].as_str() == Some(addr))
        .with_context(|| format!("no fault at {addr} among {} reported", fs.len()))
}

/// edu DMA to unmapped IOVAs: two VT-d faults decoded from the kernel log.
pub fn edu_fault_live(series: &str, v: &Value) -> Result<()> {
    let fs = faults(v);
    for (addr, code, access) in [("0x123000", 5, "write"), ("0x456000", 6, "read")] {
        let f = find_fault(&fs, addr)?;
        ensure!(f["source"] == "vtd", "{addr}: source {}", f["source"]);
        ensure!(
            f["device"] == Device::Edu.bdf(),
            "{addr}: device {}",
            f["device"]
        );
        ensure!(
            f["reason_code"] == code,
            "{addr}: reason_code {}",
            f["reason_code"]
        );
        ensure!(f["access"] == access, "{addr}: access {}", f["access"]);
        let state = f["mapping_state"].as_str().unwrap_or("");
        ensure!(
            state.starts_with("never mapped"),
            "{addr}: mapping_state {state:?}"
        );
        eprintln!("xtask: {series}: vtd fault {addr} reason {code} ({access}): {state}");
    }
    Ok(())
}

/// VFIO map, DMA, unmap, DMA: the second DMA's fault is "DMA after unmap".
pub fn vfio_after_unmap(series: &str, v: &Value) -> Result<()> {
    let fs = faults(v);
    let f = find_fault(&fs, "0x200000")?;
    ensure!(f["device"] == Device::Edu.bdf(), "device {}", f["device"]);
    let state = f["mapping_state"].as_str().unwrap_or("");
    if !(state.contains("DMA after unmap") && state.contains("by pid")) {
        bail!("mapping_state {state:?}, want DMA after unmap with the unmapping task");
    }
    let d = device(v, Device::Edu.bdf())?;
    ensure!(
        d["iommu"]["maps"].as_u64().unwrap_or(0) >= 1
            && d["iommu"]["unmaps"].as_u64().unwrap_or(0) >= 1,
        "VFIO's iommu map/unmap not attributed to the edu: {}",
        d["iommu"]
    );
    eprintln!("xtask: {series}: fault at 0x200000: {state}");
    Ok(())
}
