//! Text rendering of per-device snapshots (live view, and later reports).

use std::fmt::Write as _;

use crate::{
    aggregate::{DeviceSnapshot, LongLived},
    model::Incident,
    output::{bytes, tail_if_any},
};

pub struct Totals<'a> {
    pub kernel: &'a str,
    pub attached: usize,
    pub elapsed: f64,
    /// Records received from the ring buffer.
    pub events: u64,
    /// Tracepoint hits counted in-kernel (None: not known for this window).
    pub kernel_hits: Option<u64>,
    pub lost: u64,
    /// Program runs the kernel skipped (recursion protection).
    pub missed: u64,
    pub decode_errors: u64,
    pub aggregate_only: bool,
    pub final_summary: bool,
}

pub fn live_text(devices: &[DeviceSnapshot], t: &Totals<'_>) -> String {
    let mut s = String::new();
    let title = if t.final_summary {
        "gpudirect-trace: final summary"
    } else {
        "gpudirect-trace live"
    };
    let _ = writeln!(
        s,
        "{title}  kernel {}  {} probes  {:.1}s  mode {}",
        // Unknown for an imported ftrace text.
        if t.kernel.is_empty() { "?" } else { t.kernel },
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
        "events: {} {} streamed, {} LOST, {} MISSED by the kernel{}",
        // The reason after the "?" and its noun, not between them.
        t.kernel_hits.map_or_else(
            || "? in kernel (no kernel counter checkpoints around this window),".to_owned(),
            |n| format!("{n} in kernel,")
        ),
        t.events,
        t.lost,
        t.missed,
        tail_if_any(t.decode_errors, |n| format!(", {n} undecodable"))
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
        // "yet" only while more may come: a final summary or a report is
        // the whole trace.
        let none = if t.final_summary {
            "(no DMA activity in this trace)"
        } else {
            "(no DMA activity seen yet)"
        };
        let _ = writeln!(s, "{none}");
        // Nothing fired at all: the devices used bypass the DMA API (the
        // usual surprise: a VM's virtio disk or NIC), which no tracer of
        // these paths can see.
        if t.final_summary && t.kernel_hits == Some(0) && t.events == 0 {
            let _ = writeln!(
                s,
                "no probe fired while tracing: the devices in use did not map memory through \
                 the DMA API or an IOMMU (virtio devices without VIRTIO_F_ACCESS_PLATFORM, \
                 common in VMs, hand the device guest-physical addresses directly); \
                 `gpudirect-trace probes` lists what is attached"
            );
        }
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
            truncate(&device_label(d), 22),
            d.level,
            d.maps,
            d.unmaps,
            format!("{lower}{}", bytes(d.bytes_mapped)),
            bytes(d.bytes_to_device),
            bytes(d.bytes_from_device),
            format!("{}/{}", bytes(d.map_size.p50), bytes(d.map_size.p99)),
            d.outstanding_mappings,
            bytes(d.outstanding_bytes),
            d.families.swiotlb.swiotlb_bounces,
            d.faults + d.xids,
            d.events_per_sec
        );
    }
    s.push_str(&device_notes(devices));
    s
}

/// Incidents (faults, Xids, AER errors, mapping failures, IOMMU changes),
/// one line each on the trace's clock, with what the mapping history says
/// under each fault. `more` is how many earlier ones are not shown.
pub fn incidents_text<'a>(incidents: impl Iterator<Item = &'a Incident>, more: u64) -> String {
    let mut s = String::new();
    for i in incidents {
        if s.is_empty() {
            let _ = writeln!(
                s,
                "\nincidents (faults, Xids, AER, mapping failures, IOMMU changes, DMA misuse):"
            );
        }
        let _ = writeln!(s, "  {i}");
        if let Some(m) = i.mapping_line() {
            let _ = writeln!(s, "      {m}");
        }
        if let Some(c) = i.context_line() {
            let _ = writeln!(s, "      {c}");
        }
        for l in i.misuse_lines() {
            let _ = writeln!(s, "      {l}");
        }
    }
    if more > 0 && !s.is_empty() {
        let _ = writeln!(s, "  ({more} earlier ones: --json lists them)");
    }
    s
}

/// Each device's timeline after a grave PCIe incident (link down,
/// downtrained, gone, Xid 79): its first cause, then what followed.
pub fn timelines_text(list: &[crate::families::pcie::timeline::Timeline]) -> String {
    let mut s = String::new();
    if list.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "
device timelines (first cause, then what followed):"
    );
    for t in list {
        let _ = writeln!(s, "  {}", t.summary);
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
        // What the families say of the device (PCIe AER counts, ...).
        for line in d.families.notes(&d.device) {
            let _ = writeln!(s, "note: {line}");
        }
        if d.dma_sources.len() > 1 || d.dma_sources.contains_key("iova") {
            let per: Vec<String> = d
                .dma_sources
                .iter()
                .map(|(op, src)| format!("{op} {src}"))
                .collect();
            let _ = writeln!(
                s,
                "note: {}: DMA-API operations from: {}",
                d.device,
                per.join(", ")
            );
        }
        if let Some(v) = &d.iova {
            let _ = writeln!(
                s,
                "note: {}: IOVA API (dma_iova_*): {} allocations ({}), {} links ({}), {} unlinks,                  {} syncs, {} frees{}{}",
                d.device,
                v.allocs,
                bytes(v.alloc_bytes),
                v.links,
                bytes(v.link_bytes),
                v.unlinks,
                v.syncs,
                v.frees,
                tail_if_any(v.declined, |n| format!(", {n} declined (fell back to dma_map_*)")),
                tail_if_any(v.out_of_range, |n| format!(", {n} PAST THEIR ALLOCATION"))
            );
        }
        if d.dma.unmaps_skipped > 0 || d.unmap_not_needed > 0 {
            let _ = writeln!(
                s,
                "note: {}: the kernel skips this device's unmaps (dma_need_unmap() said false {}                  times): {} mappings ({}) were not unmapped, by design; they are not                  outstanding and not leaks",
                d.device,
                d.unmap_not_needed,
                d.dma.unmaps_skipped,
                bytes(d.dma.unmaps_skipped_bytes)
            );
        }
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

pub use crate::output::ns;

/// A device as the table's first column shows it: its bus id and, where
/// known, its driver (`0000:00:04.0 nvme`), so that a row says what the
/// device is without lspci.
fn device_label(d: &DeviceSnapshot) -> std::borrow::Cow<'_, str> {
    match &d.driver {
        Some(drv) => format!("{} {drv}", d.device).into(),
        None => d.device.as_str().into(),
    }
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// One line per NVIDIA GPU: who it is (index, name, UUID, bus id) and,
/// where NVML read it, BAR1, the PCIe link and its replays since `first`.
pub fn gpus_text(
    gpus: &[crate::gpu::GpuIdentity],
    first: Option<&crate::gpu::Sample>,
    latest: Option<&crate::gpu::Sample>,
) -> String {
    let mut s = String::new();
    for g in gpus {
        let _ = write!(s, "{g}");
        if let Some(f) = latest.and_then(|l| l.gpu(&g.bus_id)) {
            if let Some(b) = f.bar1.ok() {
                let _ = write!(s, ": BAR1 {} of {} used", bytes(b.used), bytes(b.total));
            }
            let p = &f.pcie;
            if let (Some(gc), Some(wc)) = (p.gen_current.ok(), p.width_current.ok()) {
                let _ = write!(s, ", PCIe Gen{gc} x{wc}");
                if let (Some(gm), Some(wm)) = (p.gen_max.ok(), p.width_max.ok()) {
                    let _ = write!(s, " (max Gen{gm} x{wm})");
                }
            }
            if let Some(r) = p.replays.ok() {
                let since = first
                    .and_then(|f| f.gpu(&g.bus_id))
                    .and_then(|f| f.pcie.replays.ok().copied())
                    .map(|r0| format!(" (+{} since the start)", r.saturating_sub(r0)))
                    .unwrap_or_default();
                let _ = write!(s, ", {r} PCIe replays{since}");
            }
        }
        s.push('\n');
    }
    s
}

/// IOMMU invalidations: per unit and type across devices, then per device
/// (the time each submission to the invalidation queue took).
pub fn invalidations_text(
    units: &[crate::aggregate::inval::UnitRow],
    devices: &[DeviceSnapshot],
) -> String {
    use crate::output::ns;
    let mut s = String::new();
    if units.is_empty() && devices.iter().all(|d| d.invalidations.is_empty()) {
        return s;
    }
    let head = |s: &mut String, first: &str| {
        let _ = writeln!(
            s,
            "{first:<22} {:<7} {:<21} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9}",
            "IOMMU", "TYPE", "COUNT", "p50", "p99", "max", "TOTAL", "NESTED"
        );
    };
    let row = |s: &mut String, first: &str, r: &crate::aggregate::inval::InvalRow| {
        let l = &r.latency_ns;
        let _ = write!(
            s,
            "{:<22} {:<7} {:<21} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9}",
            truncate(first, 22),
            truncate(&r.iommu, 7),
            r.kind,
            r.count,
            ns(l.p50),
            ns(l.p99),
            ns(l.max),
            ns(r.total_ns),
            ns(r.nested_ns)
        );
    };
    let _ = writeln!(
        s,
        "
IOMMU invalidations (time per submission to the invalidation queue; NESTED: inside \
         timed IOMMU calls):"
    );
    head(&mut s, "");
    for u in units {
        row(&mut s, "(all devices)", &u.row);
        if let Some(q) = u.descriptors_queued {
            let _ = write!(s, "  {q} descriptors queued");
        }
        s.push('\n');
    }
    for d in devices {
        for r in &d.invalidations {
            row(&mut s, &d.device, r);
            s.push('\n');
        }
        for t in &d.cache_tag_flushes {
            let _ = writeln!(
                s,
                "{:<22} {:<7} cache tag {} flush {}: {} flushes, {} pages",
                truncate(&d.device, 22),
                truncate(&t.iommu, 7),
                t.tag,
                t.flush,
                t.count,
                t.pages
            );
        }
    }
    s
}

/// Per device: the IOMMU's flush policy and what translation costs.
pub fn translation_text(devices: &[DeviceSnapshot]) -> String {
    let mut s = String::new();
    for d in devices {
        if d.iommu_policy.is_none() && d.translation.is_none() {
            continue;
        }
        if s.is_empty() {
            let _ = writeln!(s, "\ntranslation per device:");
        }
        let policy = match d.iommu_policy.as_deref() {
            Some("identity") => "identity (passthrough: no translation)".to_owned(),
            Some("DMA") => "DMA (strict: every unmap flushes the IOTLB)".to_owned(),
            Some("DMA-FQ") => "DMA-FQ (lazy: unmaps are flushed in batches)".to_owned(),
            Some(other) => other.to_owned(),
            None => "-".to_owned(),
        };
        let _ = write!(s, "  {:<22} policy {policy}", truncate(&d.device, 22));
        if let Some(b) = &d.translation {
            let _ = write!(
                s,
                "; DMA-API {:.3} ms/s, IOMMU {:.3} ms/s (invalidation queue {:.3}){}; identity \
                 would save ~{:.3} ms/s",
                b.dma_api_ms_per_s,
                b.iommu_ms_per_s,
                b.invalidation_ms_per_s,
                b.dma_api_ms_per_gb
                    .map(|g| format!(", {g:.1} ms per GB mapped"))
                    .unwrap_or_default(),
                b.identity_saves_ms_per_s
            );
        }
        s.push('\n');
    }
    s
}

/// Per device: the processes that map the most (outstanding bytes first).
pub fn processes_text(devices: &[DeviceSnapshot]) -> String {
    let mut s = String::new();
    for d in devices.iter().filter(|d| !d.processes.is_empty()) {
        let _ = writeln!(
            s,
            "\nprocesses mapping {} ({} level, by outstanding bytes):\n  {:>8} {:<16} {:<13} {:>10} {:>10} {:>9} {:>9}",
            d.device, d.level, "PID", "COMM", "CONTAINER", "OUT_B", "OUTST", "MAPS", "MAPPED"
        );
        for p in &d.processes {
            let pid = if p.pid == crate::aggregate::procs::OTHER_PID {
                "other".to_owned()
            } else if p.context.is_some() {
                "irq".to_owned()
            } else {
                p.pid.to_string()
            };
            let _ = writeln!(
                s,
                "  {:>8} {:<16} {:<13} {:>10} {:>10} {:>9} {:>9}",
                pid,
                truncate(p.comm.as_deref().unwrap_or("-"), 16),
                truncate(p.container.as_deref().unwrap_or("-"), 13),
                bytes(p.outstanding_bytes),
                p.outstanding_mappings,
                p.maps,
                bytes(p.bytes_mapped)
            );
        }
    }
    s
}

/// The misuse checks' counts (`--check`): findings by device and check,
/// and what could not be checked.
pub fn misuse_text(stats: Option<&crate::analysis::misuse::CheckStats>) -> String {
    let Some(st) = stats else {
        return String::new();
    };
    let mut s = String::from("\nDMA-API misuse checks (--check):\n");
    if st.findings.is_empty() {
        s.push_str("  no misuse proven\n");
    }
    for (dev, checks) in &st.findings {
        let list: Vec<String> = checks.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let _ = writeln!(s, "  {dev:<14}  {}", list.join(", "));
    }
    for (dev, callers) in &st.map_failures {
        for r in callers {
            let from = r.caller.as_deref().map_or_else(
                || "caller unknown: --stacks".to_owned(),
                |c| format!("from {c}"),
            );
            let _ = writeln!(
                s,
                "  {dev:<14}  {} failed {} time(s), {from}",
                r.api, r.count
            );
        }
    }
    let _ = writeln!(
        s,
        "  not checkable: {} unmaps and {} syncs of handles mapped before tracing, {} maps \
         untracked; {} findings unproven after lost events ({} restarts)",
        st.unknown_unmaps, st.unknown_syncs, st.untracked_maps, st.unproven, st.resets
    );
    s
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
