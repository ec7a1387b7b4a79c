//! The summary: where and when the recording was made, which window and
//! devices the page shows, whether anything was lost, and the verdict:
//! every kind of incident with its count and each one linked to its row.

use std::{collections::BTreeMap, fmt::Write as _};

use super::{esc, svg, Ctx};
use crate::{
    model::{Category, Incident},
    output::bytes,
};

/// Incidents listed one by one per category in the verdict (all are in
/// the table).
const VERDICT_ITEMS: usize = 12;

/// A category's name for people; categories this page does not know yet
/// (new kinds of findings) show their own name.
pub fn category_title(c: Category) -> &'static str {
    match c.as_str() {
        "iommu-fault" => "IOMMU faults",
        "xid" => "NVIDIA Xids",
        "aer" => "PCIe AER errors",
        "map-error" => "DMA mapping failures",
        "iommu-change" => "IOMMU group and domain changes",
        other => other,
    }
}

/// A category's name in a few characters (the timeline's row labels).
pub fn category_short(c: Category) -> &'static str {
    match c.as_str() {
        "iommu-fault" => "IOMMU faults",
        "xid" => "Xids",
        "aer" => "AER errors",
        "map-error" => "map errors",
        "iommu-change" => "IOMMU chg.",
        "misuse" => "DMA misuse",
        "pcie-link" => "PCIe link",
        other => other,
    }
}

/// Whether incidents of this category are bad news (IOMMU group changes
/// are context, everything else is a finding).
pub fn is_finding(c: Category) -> bool {
    c.as_str() != "iommu-change"
}

/// The one line the verdict and the marks show for an incident.
pub fn one_line(i: &Incident) -> String {
    let mut s = format!("{} {} {}", i.at, i.category.as_str(), i.device);
    if let Some(a) = i.address {
        let _ = write!(s, " at {a:#x}");
    }
    let _ = write!(s, ": {}", i.text);
    if let Some(p) = &i.process {
        let _ = write!(s, ", {p}");
    }
    if let Some(m) = i.fault.as_ref().and_then(|f| f.mapping.as_ref()) {
        let _ = write!(s, " [{}]", m.name());
    }
    s
}

fn row(s: &mut String, k: &str, v: &str) {
    let _ = write!(s, "<tr><th>{k}</th><td>{v}</td></tr>");
}

/// The flight recorder's trigger, in a snapshot (the header's `snapshot`):
/// what fired, when, what the ring held; the incident it was, linked.
fn trigger(ctx: &Ctx) -> Option<String> {
    let info = ctx.r.header.snapshot.as_ref()?;
    let t = &info.trigger;
    let mut s =
        format!(
        "{} ({}) at {:.6}s; the ring held the {:.3}s before it and had dropped {} older events; \
         {}",
        esc(&t.name),
        esc(&t.label),
        ctx.r.seconds(t.at_ns),
        t.at_ns.saturating_sub(info.ring_from_ns) as f64 / 1e9,
        info.discarded_events,
        crate::report::snapshot::went_on(
            ctx.r.after_trigger_ns().unwrap_or((info.after_ns, info.after_ns)),
            |n| format!("{:.3}s", n as f64 / 1e9)
        )
    );
    if let Some(i) = &t.incident {
        let _ = write!(s, ": {}", esc(&i.to_string()));
    }
    Some(s)
}

pub fn section(ctx: &Ctx) -> String {
    let r = ctx.r;
    let h = &r.header;
    let mut s =
        String::from("<section id=\"summary\"><h1>gpudirect-trace report</h1><table class=\"kv\">");
    row(&mut s, "file", &format!("<code>{}</code>", esc(ctx.path)));
    row(
        &mut s,
        "host",
        &if h.boot_id.is_empty() {
            // An imported ftrace text knows no boot id.
            format!("<b>{}</b>", esc(&h.hostname))
        } else {
            format!("<b>{}</b> (boot {})", esc(&h.hostname), esc(&h.boot_id))
        },
    );
    if !h.kernel_release.is_empty() {
        row(&mut s, "kernel", &esc(&h.kernel_release));
    }
    // Drivers of the devices the trace saw, from the header's PCI inventory.
    let mut drivers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in &h.devices {
        if ctx.anchors.contains_key(&d.bus_id) || ctx.gpus.contains_key(&d.bus_id) {
            let name = d.driver.clone().unwrap_or_else(|| "no driver".into());
            drivers
                .entry(name)
                .or_default()
                .push(ctx.device_link(&d.bus_id));
        }
    }
    if !drivers.is_empty() {
        let v: Vec<String> = drivers
            .iter()
            .map(|(k, v)| format!("{} ({})", esc(k), v.join(", ")))
            .collect();
        row(&mut s, "drivers", &v.join("; "));
    }
    let mode = if h.aggregate_only {
        "aggregate-only (in-kernel counters; rare events streamed)"
    } else {
        "streaming (every event)"
    };
    let mut rec = format!("gpudirect-trace {}, {mode}", esc(&h.tool_version));
    if !h.command.is_empty() {
        let _ = write!(rec, ", command <code>{}</code>", esc(&h.command.join(" ")));
    }
    row(&mut s, "recorded by", &rec);
    if let Some(w) = r.clock().wall(h.start_ts_ns) {
        row(&mut s, "started", &esc(&w));
    }
    let win = &r.window;
    let mut wtext = format!(
        "{:.3} s to {:.3} s of the recording ({})",
        ctx.axis.t0,
        ctx.axis.t1,
        match (win.from, win.to) {
            (None, None) => "the whole recording".to_owned(),
            (f, t) => format!(
                "window{}{}",
                f.map(|f| format!(" --from {}s", svg::num(f.as_secs_f64())))
                    .unwrap_or_default(),
                t.map(|t| format!(" --to {}s", svg::num(t.as_secs_f64())))
                    .unwrap_or_default()
            ),
        }
    );
    if win.devices.is_empty() {
        let _ = write!(wtext, "; all {} devices", ctx.devices.len());
    } else {
        let names: Vec<String> = win.devices.iter().map(|d| esc(d)).collect();
        let _ = write!(wtext, "; only --device {}", names.join(", "));
    }
    row(&mut s, "window", &wtext);
    let lost = r.losses_total();
    let mut ev = format!("{} streamed", r.analysis.agg.events);
    if let Some(k) = r.kernel_hits {
        let _ = write!(ev, ", {k} counted in the kernel");
    }
    let _ = write!(ev, "; file {}", bytes(r.file_len));
    row(&mut s, "events", &ev);
    let warnings = super::super::warnings(ctx.path, r);
    let mut loss = if lost == 0 {
        "<span class=\"ok\">no events lost</span>".to_owned()
    } else {
        format!(
            "<a class=\"bad\" href=\"#losses\">{lost} events lost</a> in {} loss records (ring buffer full)",
            r.losses.len()
        )
    };
    for w in &warnings {
        let _ = write!(loss, "<br><span class=\"bad\">{}</span>", esc(w));
    }
    if warnings.is_empty() {
        loss.push_str("; the file reads cleanly");
    }
    row(&mut s, "losses", &loss);
    if let Some(t) = trigger(ctx) {
        row(&mut s, "flight-recorder trigger", &format!("<b>{t}</b>"));
    }
    s.push_str("</table>");
    s.push_str(&verdict(ctx));
    s.push_str(&device_table(ctx));
    s.push_str("</section>");
    s
}

fn verdict(ctx: &Ctx) -> String {
    let mut by: BTreeMap<Category, Vec<&Incident>> = BTreeMap::new();
    for i in &ctx.incidents {
        by.entry(i.category).or_default().push(i);
    }
    let mut s = String::from("<h2 id=\"verdict\">Verdict</h2><ul class=\"verdict\">");
    let findings: usize = by
        .iter()
        .filter(|(c, _)| is_finding(**c))
        .map(|(_, v)| v.len())
        .sum();
    if findings == 0 {
        s.push_str(
            "<li class=\"ok\">No IOMMU faults, Xids, AER errors, mapping failures or misuse findings \
             in this window.</li>",
        );
    }
    for (c, list) in &by {
        let cls = if is_finding(*c) { "bad" } else { "info" };
        let _ = write!(
            s,
            "<li class=\"{cls}\"><a href=\"#incidents\" data-cat=\"{}\"><b>{} {}</b></a><ul>",
            esc(c.as_str()),
            list.len(),
            esc(category_title(*c))
        );
        for i in list.iter().take(VERDICT_ITEMS) {
            let _ = write!(
                s,
                "<li><a href=\"#inc-{}\">{}</a></li>",
                i.id,
                esc(&one_line(i))
            );
        }
        if list.len() > VERDICT_ITEMS {
            let _ = write!(
                s,
                "<li>... and {} more in the <a href=\"#incidents\" data-cat=\"{}\">table</a></li>",
                list.len() - VERDICT_ITEMS,
                esc(c.as_str())
            );
        }
        s.push_str("</ul></li>");
    }
    let evicted = ctx.r.analysis.ledger.evicted();
    if evicted > 0 {
        let _ = write!(s, "<li class=\"bad\">{}</li>", evicted_note(evicted));
    }
    s.push_str("</ul>");
    s
}

/// What the summary and the incident section say of incidents the ledger
/// let go: one sentence, so the page tells it one way.
pub(super) fn evicted_note(evicted: u64) -> String {
    format!(
        "{evicted} earlier incidents were not kept (the report keeps the newest {})",
        crate::analysis::INCIDENTS_KEPT
    )
}

/// One row per device: the live view's table, each linked to its panel.
fn device_table(ctx: &Ctx) -> String {
    let mut s = String::from(
        "<h2>Device overview</h2><table id=\"device-table\" class=\"num\"><thead><tr><th>device</th><th>level</th><th>maps</th>\
         <th>unmaps</th><th>mapped</th><th>to device</th><th>from device</th><th>size p50</th>\
         <th>size p99</th><th>outstanding</th><th>outstanding bytes</th><th>bounces</th>\
         <th>map errors</th><th>faults</th><th>Xids</th></tr></thead><tbody>",
    );
    for d in ctx.devices {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            ctx.device_link(&d.device),
            d.level,
            d.maps,
            d.unmaps,
            bytes(d.bytes_mapped),
            bytes(d.bytes_to_device),
            bytes(d.bytes_from_device),
            bytes(d.map_size.p50),
            bytes(d.map_size.p99),
            d.outstanding_mappings,
            bytes(d.outstanding_bytes),
            d.families.swiotlb.swiotlb_bounces,
            d.map_errors,
            d.faults,
            d.xids
        );
    }
    s.push_str("</tbody></table>");
    if ctx.devices.is_empty() {
        s.push_str("<p>No device activity in this window.</p>");
    }
    if let Some(c) = ctx.r.counters {
        let _ = write!(
            s,
            "<p class=\"note\">Counts from {}; sizes and outstanding mappings from the event stream.</p>",
            esc(c)
        );
    }
    s
}
