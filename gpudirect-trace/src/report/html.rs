//! `report --html`: one self-contained page (inline CSS and SVG drawn here;
//! no scripts, no network) with the device table and plots: mapped-size
//! distributions per device and operation, events over time, and faults,
//! Xids and losses on the timeline.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use super::{Replay, BUCKET_NS};
use crate::{aggregate::DeviceSnapshot, output::bytes};

const W: f64 = 760.0;
const H: f64 = 200.0;
const LEFT: f64 = 60.0;
const BOTTOM: f64 = 30.0;
const COLORS: [&str; 6] = [
    "#3465a4", "#cc0000", "#4e9a06", "#c4a000", "#75507b", "#ce5c00",
];

/// Text safe inside HTML and SVG elements and attributes.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A bar chart: one bar per value, labels under some of them.
fn bars(id: &str, labels: &[String], values: &[u64], color: &str, unit: &str) -> String {
    let max = values.iter().copied().max().unwrap_or(0).max(1);
    let n = values.len().max(1) as f64;
    let bw = (W - LEFT - 10.0) / n;
    let plot_h = H - BOTTOM - 10.0;
    let mut s = format!(
        "<svg id=\"{}\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\">",
        esc(id)
    );
    let _ = write!(
        s,
        "<line x1=\"{LEFT}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\" stroke=\"#555\"/>\
         <line x1=\"{LEFT}\" y1=\"10\" x2=\"{LEFT}\" y2=\"{y}\" stroke=\"#555\"/>\
         <text x=\"{tx}\" y=\"18\" text-anchor=\"end\" class=\"ax\">{max}</text>\
         <text x=\"{tx}\" y=\"{y}\" text-anchor=\"end\" class=\"ax\">0</text>",
        y = H - BOTTOM,
        x2 = W - 10.0,
        tx = LEFT - 4.0,
    );
    let every = (values.len() / 12).max(1);
    for (i, &v) in values.iter().enumerate() {
        let h = plot_h * v as f64 / max as f64;
        let x = LEFT + i as f64 * bw;
        let label = labels.get(i).map(String::as_str).unwrap_or("");
        let _ = write!(
            s,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{color}\"><title>{}: {v} {unit}</title></rect>",
            H - BOTTOM - h,
            (bw - 1.0).max(0.5),
            esc(label)
        );
        if i % every == 0 {
            let _ = write!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"ax\">{}</text>",
                x + bw / 2.0,
                H - BOTTOM + 14.0,
                esc(label)
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// Counts per power-of-two size bucket (4KiB, 8KiB, ...).
fn size_buckets(h: &Histogram<u64>) -> (Vec<String>, Vec<u64>) {
    let mut counts = [0u64; 64];
    for v in h.iter_recorded() {
        let b = 63 - v.value_iterated_to().max(1).leading_zeros() as usize;
        counts[b] += v.count_at_value();
    }
    let lo = counts.iter().position(|&c| c > 0).unwrap_or(0);
    let hi = counts.iter().rposition(|&c| c > 0).unwrap_or(0);
    let labels = (lo..=hi).map(|b| bytes(1 << b)).collect();
    (labels, counts[lo..=hi].to_vec())
}

pub fn page(path: &str, r: &Replay, devices: &[DeviceSnapshot], filter: &[String]) -> String {
    let h = &r.header;
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>gpudirect-trace report: {}</title><style>\
         body{{font-family:sans-serif;margin:1.5em;color:#222}}\
         table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}\
         th{{background:#eee}}td:first-child{{text-align:left}}.ax{{font-size:10px;fill:#444}}\
         .warn{{color:#a40000}}svg.chart{{display:block;margin:0.3em 0 1.2em}}\
         </style></head><body>",
        esc(path)
    );
    let _ = write!(
        s,
        "<h1>gpudirect-trace report</h1><p>File <code>{}</code>; host <b>{}</b>, kernel {}, \
         gpudirect-trace {}; window {:.3} s to {:.3} s of the recording; {} events, {} lost.</p>",
        esc(path),
        esc(&h.hostname),
        esc(&h.kernel_release),
        esc(&h.tool_version),
        r.seconds(r.from_ns),
        r.seconds(r.last_ns),
        r.agg.events,
        r.losses_total()
    );
    for w in super::read_warnings(path, &r.stats, r.file_len) {
        let _ = write!(s, "<p class=\"warn\">warning: {}</p>", esc(&w));
    }
    s.push_str(
        "<h2>Devices</h2><table id=\"devices\"><tr><th>device</th><th>level</th><th>maps</th>\
         <th>unmaps</th><th>mapped</th><th>to device</th><th>from device</th><th>size p50</th>\
         <th>size p99</th><th>outstanding</th><th>bounces</th><th>faults</th><th>Xids</th></tr>",
    );
    for d in devices {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&d.device),
            d.level,
            d.maps,
            d.unmaps,
            bytes(d.bytes_mapped),
            bytes(d.bytes_to_device),
            bytes(d.bytes_from_device),
            bytes(d.map_size.p50),
            bytes(d.map_size.p99),
            d.outstanding_mappings,
            d.swiotlb_bounces,
            d.faults,
            d.xids
        );
    }
    s.push_str("</table><h2>Mapped-size distributions</h2>");
    let mut any = false;
    for (i, (name, d)) in r.agg.devices.iter().enumerate() {
        if !filter.is_empty() && !filter.iter().any(|f| f == &**name) {
            continue;
        }
        for (op, level) in [
            ("dma_map", &d.dma),
            ("iommu_map", &d.iommu),
            ("dma_alloc", &d.coherent),
        ] {
            if level.sizes.is_empty() {
                continue;
            }
            any = true;
            let (labels, counts) = size_buckets(&level.sizes);
            let _ = write!(
                s,
                "<h3>{} — {op} ({} mappings, by power-of-two size)</h3>",
                esc(name),
                level.sizes.len()
            );
            let color = COLORS[i % COLORS.len()];
            s.push_str(&bars(
                &format!("sizes-{name}-{op}"),
                &labels,
                &counts,
                color,
                "mappings",
            ));
        }
    }
    if !any {
        s.push_str("<p>No mappings with sizes in this window.</p>");
    }
    s.push_str("<h2>Events over time</h2>");
    let span = r.last_ns.saturating_sub(r.from_ns).max(1);
    let nb = (span.div_ceil(BUCKET_NS) as usize).max(1);
    let group = nb.div_ceil(150).max(1);
    for (i, (name, v)) in r.rate.iter().enumerate() {
        let binned: Vec<u64> = v.chunks(group).map(|c| c.iter().sum()).collect();
        let labels: Vec<String> = (0..binned.len())
            .map(|b| {
                let t = r.from_ns.saturating_add((b * group) as u64 * BUCKET_NS);
                format!("{:.1}s", r.seconds(t))
            })
            .collect();
        let _ = write!(
            s,
            "<h3>{} (events per {:.1} s)</h3>",
            esc(name),
            (group as u64 * BUCKET_NS) as f64 / 1e9
        );
        s.push_str(&bars(
            &format!("rate-{name}"),
            &labels,
            &binned,
            COLORS[i % COLORS.len()],
            "events",
        ));
    }
    if r.rate.is_empty() {
        s.push_str("<p>No streamed events in this window.</p>");
    }
    s.push_str("<h2>Faults, Xids and losses on the timeline</h2>");
    s.push_str(&timeline(r, span));
    s.push_str("</body></html>\n");
    s
}

fn timeline(r: &Replay, span: u64) -> String {
    let th = 90.0;
    let mut s = format!(
        "<svg id=\"timeline\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{th}\" viewBox=\"0 0 {W} {th}\">\
         <line x1=\"{LEFT}\" y1=\"60\" x2=\"{}\" y2=\"60\" stroke=\"#555\"/>\
         <text x=\"{LEFT}\" y=\"78\" class=\"ax\">{:.1}s</text><text x=\"{}\" y=\"78\" text-anchor=\"end\" class=\"ax\">{:.1}s</text>",
        W - 10.0,
        r.seconds(r.from_ns),
        W - 10.0,
        r.seconds(r.from_ns.saturating_add(span))
    );
    let x = |ts: u64| LEFT + (W - LEFT - 10.0) * ts.saturating_sub(r.from_ns) as f64 / span as f64;
    for n in &r.incidents {
        let (y, color) = match n.kind {
            "io_page_fault" => (20.0, "#cc0000"),
            "nvidia_xid" => (35.0, "#ce5c00"),
            _ => (48.0, "#75507b"),
        };
        let _ = write!(
            s,
            "<circle class=\"mark {}\" cx=\"{:.1}\" cy=\"{y}\" r=\"4\" fill=\"{color}\"><title>{:.6}s {} {} {}</title></circle>",
            n.kind,
            x(n.ts_ns),
            r.seconds(n.ts_ns),
            esc(n.kind),
            esc(&n.device),
            esc(&n.detail)
        );
    }
    for f in r
        .faults
        .iter()
        .filter(|f| f["source"] != "iommu-tracepoint")
    {
        let Some(ts) = f["timestamp_ns"].as_u64() else {
            continue;
        };
        let text = format!(
            "{:.6}s {} {} {}",
            r.seconds(ts),
            f["source"].as_str().unwrap_or("-"),
            f["device"].as_str().unwrap_or("-"),
            f["reason"].as_str().unwrap_or("")
        );
        let _ = write!(
            s,
            "<rect class=\"mark log-fault\" x=\"{:.1}\" y=\"16\" width=\"7\" height=\"7\" fill=\"#a40000\"><title>{}</title></rect>",
            x(ts) - 3.5,
            esc(&text)
        );
    }
    for l in &r.losses {
        let _ = write!(
            s,
            "<rect class=\"mark loss\" x=\"{:.1}\" y=\"52\" width=\"3\" height=\"16\" fill=\"#888\"><title>{:.3}s: {} events lost</title></rect>",
            x(l.ts_ns) - 1.5,
            r.seconds(l.ts_ns),
            l.lost
        );
    }
    s.push_str(
        "<text x=\"4\" y=\"24\" class=\"ax\">faults</text><text x=\"4\" y=\"39\" class=\"ax\">Xids</text>\
         <text x=\"4\" y=\"52\" class=\"ax\">other</text><text x=\"4\" y=\"66\" class=\"ax\">losses</text></svg>",
    );
    if r.incidents.is_empty() && r.losses.is_empty() && r.faults.is_empty() {
        s.push_str("<p>No faults, Xids, errors or losses in this window.</p>");
    }
    s
}
