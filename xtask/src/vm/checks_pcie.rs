//! Host checks of the PCIe health scenarios (pcie-aer, pcie-aer-storm,
//! pcie-remove): what `report --json` / `report` of the guest's recording
//! says about the virtio-blk disk behind its root port.

use anyhow::{ensure, Context as _, Result};
use serde_json::Value;

use super::{
    checks::{device, tagged_str},
    qemu::{Device, BLK_PORT_BDF},
};

fn incidents<'a>(v: &'a Value, category: &str, device: &str) -> Vec<&'a Value> {
    v["incidents"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|i| i["category"] == category && i["device"] == device)
                .collect()
        })
        .unwrap_or_default()
}

/// One correctable RxErr and an uncorrectable UR with its TLP header from
/// aer_inject, one uncorrectable CmpltTO from qemu's hardware: each counted
/// on the disk by severity and bit, each an incident, in order.
pub fn pcie_aer(series: &str, v: &Value, lines: &[String]) -> Result<()> {
    let bdf = Device::BlkPort.bdf();
    let d = device(v, bdf)?;
    let aer = &d["pcie_aer"];
    ensure!(aer.is_object(), "{series}: no pcie_aer on {bdf}: {d}");
    ensure!(
        aer["corrected"] == 1 && aer["errors"]["corrected:RxErr"] == 1,
        "{series}: corrected RxErr: {aer}"
    );
    ensure!(
        aer["nonfatal"] == 2
            && aer["errors"]["nonfatal:UnsupReq"] == 1
            && aer["errors"]["nonfatal:CmpltTO"] == 1,
        "{series}: the two uncorrectable errors: {aer}"
    );
    let tlp = aer["last_tlp_header"].as_str().unwrap_or("");
    ensure!(
        tlp.starts_with("0x40000001 0x0000000f 0xfe600000"),
        "{series}: the UR's TLP header (the last logged one): {aer}"
    );
    let kernel: u64 = tagged_str(lines, "TRACEFS aer_event=")
        .and_then(|n| n.parse().ok())
        .context("no TRACEFS count")?;
    ensure!(
        kernel == 3,
        "{series}: tracefs counted {kernel} aer_event, want 3"
    );
    let inc = incidents(v, "aer", bdf);
    ensure!(
        inc.len() == 3,
        "{series}: {} AER incidents on {bdf}: {inc:?}",
        inc.len()
    );
    let text = |i: usize| inc[i]["text"].as_str().unwrap_or("").to_owned();
    ensure!(
        text(0).contains("CmpltTO") && text(1).contains("RxErr") && text(2).contains("UnsupReq"),
        "{series}: the incidents in order (CmpltTO, RxErr, UnsupReq): {:?}",
        (text(0), text(1), text(2))
    );
    Ok(())
}

/// 10,000 corrected errors: the recording counted every one the kernel
/// handled (tracefs's count), lost nothing, and said how many the kernel
/// log showed. The report's text carries it (its JSON would list 4096
/// incidents: too much for a serial console).
pub fn pcie_aer_storm(series: &str, lines: &[String]) -> Result<()> {
    let kernel: u64 = tagged_str(lines, "TRACEFS aer_event=")
        .and_then(|n| n.parse().ok())
        .context("no TRACEFS count")?;
    ensure!(
        kernel >= 10_000,
        "{series}: the kernel handled only {kernel}"
    );
    let bdf = Device::BlkPort.bdf();
    let note = lines
        .iter()
        .find(|l| l.contains(&format!("{bdf}: PCIe AER ")))
        .with_context(|| format!("{series}: no PCIe AER note for {bdf}"))?;
    ensure!(
        note.contains(&format!("{kernel} corrected (BadTLP {kernel})")),
        "{series}: tracefs counted {kernel}; the report says: {note}"
    );
    ensure!(
        note.contains("the kernel log showed") || series.starts_with("6.12"),
        "{series}: 7.x rate-limits AER lines: the note must say how many the log showed: {note}"
    );
    // The recorder's own last word: `wrote N events (...) to F; 0 lost`.
    let wrote = lines
        .iter()
        .find(|l| l.contains("gpudirect-trace: wrote "))
        .with_context(|| format!("{series}: no 'wrote' line from the recorder"))?;
    ensure!(
        wrote.trim_end().ends_with("; 0 lost"),
        "{series}: events lost during the storm: {wrote}"
    );
    Ok(())
}

/// The disk removed during DMA: gone, with the AER as first cause and the
/// removal after it; on 7.x the slot's and the link's own events too.
pub fn pcie_remove(series: &str, v: &Value) -> Result<()> {
    let bdf = Device::BlkPort.bdf();
    let d = device(v, bdf)?;
    ensure!(
        d["maps"].as_u64().unwrap_or(0) > 0,
        "{series}: no DMA on the disk before its removal: {}",
        d["maps"]
    );
    let link = &d["pcie_link"];
    ensure!(
        link["removals"].as_u64().unwrap_or(0) >= 1 && link["state"] == "removed",
        "{series}: the disk's link state: {link}"
    );
    let tl = v["device_timelines"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["device"] == bdf))
        .with_context(|| format!("{series}: no timeline for {bdf}: {}", v["device_timelines"]))?;
    ensure!(tl["outcome"] == "gone", "{series}: {tl}");
    ensure!(
        tl["first_cause"]["category"] == "aer",
        "{series}: the first cause is the AER: {tl}"
    );
    let then: Vec<String> = tl["then"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s["text"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default();
    ensure!(
        then.last().is_some_and(|t| t.contains("removed")),
        "{series}: the removal comes last: {then:?}"
    );
    if !series.starts_with("6.") {
        // 7.x: pciehp's slot event on the port, put on the device below it.
        ensure!(
            link["slot_events"]["card_not_present"]
                .as_u64()
                .unwrap_or(0)
                >= 1,
            "{series}: pci_hp_event on {BLK_PORT_BDF} put on {bdf}: {link}"
        );
    }
    Ok(())
}
