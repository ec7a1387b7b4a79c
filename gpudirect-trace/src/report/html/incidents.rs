//! Every incident of the window once, on the trace clock: a timeline and a
//! table (sortable and filterable with the script; complete without it).

use std::{collections::BTreeMap, fmt::Write as _};

use super::{
    esc,
    summary::{category_short, evicted_note, one_line},
    svg::{self, Mark},
    Ctx,
};
use crate::model::{Category, Incident};

/// Raw text shown per row; longer input is cut (and says so).
const RAW_SHOWN: usize = 600;

/// Marks for incidents (rows of the strip: one per category present) and
/// loss records.
pub fn marks<'a>(ctx: &Ctx, list: impl Iterator<Item = &'a Incident>) -> Vec<Mark> {
    list.map(|i| Mark {
        t: i.at.t_s,
        class: i.category.as_str().to_owned(),
        title: one_line(i),
        target: Some(format!("inc-{}", i.id)),
    })
    // A log fault without a printk time sits at the clock's zero: it is in
    // the table, not on the axis.
    .filter(|m| m.t >= ctx.axis.t0 - 1.0 && m.t <= ctx.axis.t1 + 1.0)
    .collect()
}

/// What the tracepoint carried, for incidents that have no log line.
fn tracepoint_json(v: &impl serde::Serialize) -> String {
    let j = serde_json::to_string(v).unwrap_or_default();
    format!(
        "<code>{}</code><div class=\"seen\">tracepoint</div>",
        esc(&j)
    )
}

fn cut(s: &str) -> String {
    match s.char_indices().nth(RAW_SHOWN) {
        Some((at, _)) => format!("{}... ({} more bytes)", esc(&s[..at]), s.len() - at),
        None => esc(s),
    }
}

pub fn section(ctx: &Ctx) -> String {
    let mut s = String::from("<section id=\"incidents\"><h2>Incidents</h2>");
    let cats: BTreeMap<Category, usize> = ctx.incidents.iter().fold(BTreeMap::new(), |mut m, i| {
        *m.entry(i.category).or_default() += 1;
        m
    });
    let mut m = marks(ctx, ctx.incidents.iter().copied());
    m.extend(ctx.r.losses.iter().map(|l| Mark {
        t: ctx.t(l.ts_ns),
        class: "loss".into(),
        title: format!("{:.6}s: {} events lost", ctx.t(l.ts_ns), l.lost),
        target: Some("losses".into()),
    }));
    let mut rows: Vec<(&str, &str)> = cats
        .keys()
        .map(|c| (c.as_str(), category_short(*c)))
        .collect();
    if !ctx.r.losses.is_empty() {
        rows.push(("loss", "lost events"));
    }
    if rows.is_empty() {
        s.push_str(
            "<p class=\"ok\">No faults, Xids, AER errors, mapping failures, IOMMU changes or losses in this window.</p>",
        );
    } else {
        s.push_str("<h3>Timeline</h3>");
        s.push_str(&svg::mark_strip(&ctx.axis, "timeline", &m, &rows));
    }
    // A device's story after a grave PCIe incident, first cause first.
    let timelines = ctx.r.analysis.timelines();
    if !timelines.is_empty() {
        s.push_str("<h3>Device timelines</h3><ul class=\"timelines\">");
        for t in &timelines {
            let _ = write!(
                s,
                "<li>{}: <b>{}</b>, first cause: {}",
                ctx.device_link(&t.device),
                esc(&t.outcome),
                esc(&t.first_cause.text)
            );
            s.push_str("<ol>");
            for step in std::iter::once(&t.first_cause).chain(&t.then) {
                let _ = write!(
                    s,
                    "<li>{:.3} s: {}{}{}</li>",
                    step.t_s,
                    esc(&step.text),
                    if step.count > 1 {
                        format!(" (x{})", step.count)
                    } else {
                        String::new()
                    },
                    step.via
                        .as_deref()
                        .map(|p| format!(" (on its port {})", esc(p)))
                        .unwrap_or_default()
                );
            }
            s.push_str("</ol></li>");
        }
        s.push_str("</ul>");
    }
    if ctx.incidents.is_empty() {
        s.push_str("</section>");
        return s;
    }
    // The filters work with the script only: hidden without it.
    s.push_str("<div class=\"filters\" id=\"inc-filters\" hidden><label>filter <input id=\"inc-q\" type=\"search\" placeholder=\"text, device, pid, address...\"></label>");
    for (c, n) in &cats {
        let _ = write!(
            s,
            " <label><input type=\"checkbox\" class=\"cat\" value=\"{0}\" checked> {0} ({n})</label>",
            esc(c.as_str())
        );
    }
    s.push_str(" <span id=\"inc-count\"></span></div>");
    s.push_str(
        "<table id=\"incident-table\" class=\"sortable\"><thead><tr><th data-type=\"num\">#</th>\
         <th data-type=\"num\">time</th><th>category</th><th>device</th><th>process</th>\
         <th>address</th><th>decoded reason</th><th>mapping state</th><th>raw line</th></tr></thead><tbody>",
    );
    // Explanations repeat (one per cause): listed once below the table.
    let mut explanations: Vec<&str> = Vec::new();
    for i in &ctx.incidents {
        let f = i.fault.as_ref();
        let mapping = f
            .and_then(|f| f.mapping.as_ref())
            .map(|m| {
                format!(
                    "<span class=\"ms {}\">{}</span>",
                    m.name(),
                    esc(&m.to_string())
                )
            })
            .unwrap_or_default();
        let mut reason = esc(&i.text);
        let calls = i.misuse_lines();
        if !calls.is_empty() {
            let _ = write!(
                reason,
                "<br><small class=\"ctx\">{}</small>",
                calls
                    .iter()
                    .map(|l| esc(l))
                    .collect::<Vec<_>>()
                    .join("<br>")
            );
        }
        if let Some(f) = f {
            if let Some(x) = f.xid.filter(|_| !i.text.starts_with("Xid")) {
                let _ = write!(reason, " <span class=\"tag\">Xid {x}</span>");
            }
            for flag in &f.flags {
                let _ = write!(reason, " <span class=\"tag\">{}</span>", esc(flag));
            }
            if f.partial {
                reason.push_str(" <span class=\"tag\">partly decoded</span>");
            }
            if let Some(c) = i.context_line() {
                let _ = write!(reason, "<br><small class=\"ctx\">{}</small>", esc(&c));
            }
            if !f.explanation.is_empty() {
                let k = match explanations.iter().position(|e| *e == f.explanation) {
                    Some(k) => k,
                    None => {
                        explanations.push(&f.explanation);
                        explanations.len() - 1
                    }
                };
                let _ = write!(reason, " <a class=\"why\" href=\"#why-{k}\">why?</a>");
            }
        }
        let raw = match (f, &i.change, &i.map_error) {
            (Some(f), _, _) => {
                let seen: Vec<&str> = f
                    .seen_in
                    .iter()
                    .map(|c| match c {
                        crate::model::Channel::KernelLog => "kernel log",
                        crate::model::Channel::Tracepoint => "tracepoint",
                    })
                    .collect();
                format!(
                    "<code>{}</code><div class=\"seen\">{} · {}</div>",
                    cut(&f.raw),
                    esc(f.source.as_str()),
                    seen.join(" + ")
                )
            }
            (None, Some(c), _) => tracepoint_json(c),
            (None, None, Some(e)) => tracepoint_json(e),
            _ => String::new(),
        };
        let wall =
            i.at.wall
                .as_deref()
                .map(|w| format!("<div class=\"wall\">{}</div>", esc(w)))
                .unwrap_or_default();
        let _ = write!(
            s,
            "<tr id=\"inc-{id}\" class=\"inc c-{cat}\" data-cat=\"{cat}\"><td data-k=\"{id}\">{id}</td>\
             <td data-k=\"{t}\">{at}{wall}</td><td>{cat}</td><td>{dev}</td><td>{proc}</td>\
             <td data-k=\"{ak}\"><code>{addr}</code></td><td>{reason}</td><td>{mapping}</td><td class=\"raw\">{raw}</td></tr>",
            id = i.id,
            t = svg::num(i.at.t_s),
            at = esc(&i.at.to_string()),
            cat = esc(i.category.as_str()),
            dev = ctx.device_link(&i.device),
            proc = esc(&i.process.as_ref().map(ToString::to_string).unwrap_or_default()),
            ak = i.address.map(|a| format!("{a:016x}")).unwrap_or_default(),
            addr = i.address.map(|a| format!("{a:#x}")).unwrap_or_default(),
        );
    }
    s.push_str("</tbody></table>");
    let _ = write!(
        s,
        "<p class=\"note\">{} incident{}: each event once (a fault reported by both the kernel log and a \
         tracepoint is one row, \"kernel log + tracepoint\").",
        ctx.incidents.len(),
        if ctx.incidents.len() == 1 { "" } else { "s" }
    );
    let evicted = ctx.r.analysis.ledger.evicted();
    if evicted > 0 {
        let _ = write!(s, " <span class=\"bad\">{}.</span>", evicted_note(evicted));
    }
    s.push_str("</p>");
    if !explanations.is_empty() {
        s.push_str("<h3>What the reasons mean</h3><dl class=\"why\">");
        for (k, e) in explanations.iter().enumerate() {
            let _ = write!(s, "<dt id=\"why-{k}\">[{}]</dt><dd>{}</dd>", k + 1, esc(e));
        }
        s.push_str("</dl>");
    }
    s.push_str("</section>");
    s
}
