//! The fleet summary as one self-contained page: the same sections as the
//! text, each file with an anchor, its incidents and its own report's
//! command.

use std::fmt::Write as _;

use super::Fleet;
use crate::report::html::esc;

pub fn page(f: &Fleet) -> String {
    let mut s = String::from(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\
         <title>gpudirect-trace fleet report</title><style>\
         body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}\
         td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}\
         .bad{color:#b00}code{font-size:90%}</style></head><body>\n",
    );
    let _ = writeln!(
        s,
        "<h1>Fleet: {} files, {} hosts, {} GPUs</h1><p>{} damaged or unreadable.</p>",
        f.files.len(),
        f.hosts.len(),
        f.gpus,
        f.damaged_files
    );
    s.push_str("<h2>Incidents by kind</h2><table id=\"kinds\"><tr><th>kind</th><th>count</th><th>hosts</th></tr>\n");
    for k in &f.by_kind {
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&k.kind.to_string()),
            k.count,
            k.hosts
        );
    }
    s.push_str("</table>\n<h2>Hosts and their first cause</h2><table id=\"hosts\"><tr><th>host</th><th>boot</th><th>kernel</th><th>GPUs</th><th>first cause</th><th>timelines</th><th>files</th></tr>\n");
    for h in &f.hosts {
        let first = h.first_cause.as_ref().map_or_else(String::new, |b| {
            format!(
                "{} <b>{}</b> {}: {}",
                esc(b.wall.as_deref().unwrap_or("")),
                esc(&b.device),
                esc(b.gpu.as_deref().unwrap_or("")),
                esc(&b.text)
            )
        });
        let files: Vec<String> = h
            .files
            .iter()
            .map(|&i| format!("<a href=\"#file-{}\">[{}]</a>", i + 1, i + 1))
            .collect();
        let gpus: Vec<String> = h.gpus.iter().map(|g| esc(&g.label)).collect();
        let timelines: Vec<String> = h.timelines.iter().map(|t| esc(t)).collect();
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{first}</td><td>{}</td><td>{}</td></tr>",
            esc(&h.host),
            esc(&h.boot_id.chars().take(8).collect::<String>()),
            esc(&h.kernel),
            gpus.join("<br>"),
            timelines.join("<br>"),
            files.join(" ")
        );
    }
    s.push_str("</table>\n<h2>Shared by hosts</h2><ul id=\"patterns\">\n");
    for p in &f.patterns {
        let _ = writeln!(
            s,
            "<li>{}<br><small>{}</small></li>",
            esc(&p.summary),
            esc(&p.devices.join("; "))
        );
    }
    s.push_str("</ul>\n<h2>Files</h2>\n");
    for (i, r) in f.files.iter().enumerate() {
        let class = if r.damaged() { " class=\"bad\"" } else { "" };
        let _ = writeln!(
            s,
            "<h3 id=\"file-{}\"{class}>[{}] {}</h3><p>{} {} incidents, {} lost events</p>",
            i + 1,
            i + 1,
            esc(&r.path),
            esc(r.host.as_deref().unwrap_or("?")),
            r.incidents,
            r.lost_events
        );
        if let Some(e) = &r.error {
            let _ = writeln!(s, "<p class=\"bad\">unreadable: {}</p>", esc(e));
            continue;
        }
        for w in &r.warnings {
            let _ = writeln!(s, "<p class=\"bad\">{}</p>", esc(w));
        }
        let kinds: Vec<String> = r
            .by_kind
            .iter()
            .map(|(k, n)| format!("{n} {}", esc(&k.to_string())))
            .collect();
        let _ = writeln!(
            s,
            "<p>{}</p><p>Its own report: <code>{}</code></p>",
            kinds.join(", "),
            esc(&r.report)
        );
    }
    s.push_str("</body></html>\n");
    s
}
