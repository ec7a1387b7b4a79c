//! Text rendering of per-device snapshots (live view, and later reports).

use std::fmt::Write as _;

use crate::{
    aggregate::{DeviceSnapshot, LongLived, Notable},
    faults::Fault,
    output::bytes,
};

pub struct Totals<'a> {
    pub kernel: &'a str,
    pub attached: usize,
    pub elapsed: f64,
    /// Records received from the ring buffer.
    pub events: u64,
    /// Tracepoint hits counted in-kernel.
    pub kernel_hits: u64,
    pub lost: u64,
    /// Program runs the kernel skipped (recursion protection).
    pub missed: u64,
    pub decode_errors: u64,
    pub aggregate_only: bool,
    pub final_summary: bool,
}

pub fn live_text<'a>(
    devices: &[DeviceSnapshot],
    recent: impl Iterator<Item = &'a Notable>,
    t: &Totals<'_>,
) -> String {
    let mut s = String::new();
    let title = if t.final_summary {
        "gpudirect-trace: final summary"
    } else {
        "gpudirect-trace live"
    };
    let _ = writeln!(
        s,
        "{title}  kernel {}  {} probes  {:.1}s  mode {}",
        t.kernel,
        t.attached,
        t.elapsed,
        if t.aggregate_only {
            "aggregate-only"
        } else {
            "streaming"
        }
    );
    let _ = writeln!(
        s,
        "events: {} in kernel, {} streamed, {} LOST, {} MISSED by the kernel{}",
        t.kernel_hits,
        t.events,
        t.lost,
        t.missed,
        if t.decode_errors > 0 {
            format!(", {} undecodable", t.decode_errors)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        s,
        "{:<22} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>17} {:>9} {:>9} {:>8} {:>6} {:>9}",
        "DEVICE",
        "LEVEL",
        "MAPS",
        "UNMAPS",
        "MAPPED",
        "TO_DEV",
        "FROM_DEV",
        "SIZE p50/p99",
        "OUTST",
        "OUT_B",
        "BOUNCE",
        "FAULT",
        "EV/S"
    );
    if devices.is_empty() {
        let _ = writeln!(s, "(no DMA activity seen yet)");
    }
    for d in devices {
        // A scatterlist not walked to its end: the bytes are a lower bound.
        let lower = if d.sg_truncated + d.sg_unmap_truncated > 0 {
            ">="
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "{:<22} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>17} {:>9} {:>9} {:>8} {:>6} {:>9.0}",
            truncate(&d.device, 22),
            d.level,
            d.maps,
            d.unmaps,
            format!("{lower}{}", bytes(d.bytes_mapped)),
            bytes(d.bytes_to_device),
            bytes(d.bytes_from_device),
            format!("{}/{}", bytes(d.map_size.p50), bytes(d.map_size.p99)),
            d.outstanding_mappings,
            bytes(d.outstanding_bytes),
            d.swiotlb_bounces,
            d.faults + d.xids,
            d.events_per_sec
        );
    }
    s.push_str(&device_notes(devices));
    let mut header = false;
    for n in recent {
        if !header {
            let _ = writeln!(s, "\nlatest faults, Xids and IOMMU changes:");
            header = true;
        }
        let _ = writeln!(
            s,
            "  {:>12.6}s  {:<18} {:<14} pid {:<7} {}{}",
            n.ts_ns as f64 / 1e9,
            n.kind,
            n.device,
            n.pid,
            n.address
                .as_deref()
                .map(|a| format!("{a} "))
                .unwrap_or_default(),
            n.detail
        );
    }
    s
}

/// Where each device's DMA-API level came from, and which byte counts are
/// lower bounds.
pub fn device_notes(devices: &[DeviceSnapshot]) -> String {
    let mut s = String::new();
    let mut by_source: Vec<(&str, Vec<&str>)> = Vec::new();
    for d in devices.iter().filter(|d| d.dma_source != "none") {
        match by_source.iter_mut().find(|(src, _)| *src == d.dma_source) {
            Some((_, list)) => list.push(&d.device),
            None => by_source.push((d.dma_source, vec![&d.device])),
        }
    }
    if !by_source.is_empty() {
        let parts: Vec<String> = by_source
            .iter()
            .map(|(src, list)| format!("{src} ({})", list.join(", ")))
            .collect();
        let _ = writeln!(
            s,
            "DMA-API level from: {} (tracepoints: dma:*; hooks: fentry/kprobe on the DMA-API \
             functions)",
            parts.join("; ")
        );
    }
    for d in devices {
        if d.sg_truncated + d.sg_unmap_truncated > 0 {
            let _ = writeln!(
                s,
                "note: {}: {} scatter-gather map(s) and {} unmap(s) not walked to the end of \
                 their list (--sg-walk-max, or a bounded walk without bpf_loop()): its bytes \
                 are a lower bound (>=)",
                d.device, d.sg_truncated, d.sg_unmap_truncated
            );
        }
    }
    s
}

/// Per device and operation: time spent in the kernel's DMA/IOMMU functions.
pub fn latency_text(devices: &[DeviceSnapshot]) -> String {
    let mut s = String::new();
    for d in devices {
        for (op, l) in &d.latency_ns {
            if s.is_empty() {
                let _ = writeln!(
                    s,
                    "\nlatency per device and operation:\n{:<22} {:<13} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
                    "DEVICE", "OP", "COUNT", "p50", "p90", "p99", "p99.9", "max"
                );
            }
            let _ = writeln!(
                s,
                "{:<22} {:<13} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}{}",
                truncate(&d.device, 22),
                op,
                l.count,
                ns(l.p50),
                ns(l.p90),
                ns(l.p99),
                ns(l.p999),
                ns(l.max),
                if l.source == "stream" {
                    ""
                } else {
                    "  (log2 buckets)"
                }
            );
        }
    }
    s
}

/// Outstanding mappings older than the threshold: leak suspects.
pub fn long_lived_text(list: &[(String, &'static str, LongLived)]) -> String {
    let mut s = String::new();
    for (dev, lvl, m) in list {
        if s.is_empty() {
            let _ = writeln!(s, "\nlong-lived mappings (leak suspects):");
        }
        let _ = writeln!(
            s,
            "  {:<22} {:<8} {:>18} {:>9} age {:>8.1}s pid {}",
            truncate(dev, 22),
            lvl,
            m.address,
            bytes(m.size),
            m.age_s,
            m.pid
        );
    }
    s
}

/// The latest decoded faults with what the mapping history says.
pub fn faults_text<'a>(faults: impl Iterator<Item = &'a Fault>) -> String {
    let mut s = String::new();
    for f in faults {
        if s.is_empty() {
            let _ = writeln!(s, "\nfaults (kernel log and iommu:io_page_fault):");
        }
        let _ = writeln!(
            s,
            "  {:<10} {:<14} {:<10} {}{}{}",
            f.source.as_str(),
            f.device.as_deref().unwrap_or("-"),
            f.address
                .map(|a| format!("{a:#x}"))
                .unwrap_or_else(|| "-".into()),
            f.xid.map(|x| format!("Xid {x}: ")).unwrap_or_default(),
            f.reason,
            f.access
                .map(|a| format!(" ({a:?})").to_lowercase())
                .unwrap_or_default(),
        );
        if let Some(m) = &f.mapping_state {
            let _ = writeln!(s, "      mapping: {m}");
        }
    }
    s
}

/// 1234 -> "1.2us".
pub fn ns(v: u64) -> String {
    match v {
        0..=999 => format!("{v}ns"),
        1_000..=999_999 => format!("{:.1}us", v as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.1}ms", v as f64 / 1e6),
        _ => format!("{:.2}s", v as f64 / 1e9),
    }
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
