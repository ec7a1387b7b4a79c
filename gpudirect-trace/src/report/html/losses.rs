//! Losses and self-metrics over time (loss records; the checkpoints'
//! in-kernel hit counts against the events written), how the file read,
//! and the probe table of the header.

use std::{collections::BTreeMap, fmt::Write as _};

use super::{
    esc,
    svg::{self, Line, TimeChart, Unit, COLORS},
    Ctx,
};
use crate::report::series::{coarsen, CpBucket};

/// Lines this section draws (the page's size budget).
pub const LINES: usize = 4;
/// Loss records listed one by one.
const LOSS_ROWS: usize = 50;

pub fn section(ctx: &Ctx) -> String {
    let r = ctx.r;
    let f = ctx.factor;
    let n = r.series.len.div_ceil(f).max(1);
    let width = r.series.width_ns * f as u64;
    let bw = width as f64 / 1e9;
    let mut s = String::from("<section id=\"losses\"><h2>Losses and self-metrics</h2>");
    let lost = r.losses_total();
    if lost == 0 {
        s.push_str(
            "<p class=\"ok\">No events lost: the ring buffer never overflowed in this window.</p>",
        );
    } else {
        let _ = write!(
            s,
            "<p class=\"bad\">{lost} events lost in {} loss records (the ring buffer was full; \
             counts stay exact where the kernel counters are used).</p>",
            r.losses.len()
        );
    }
    let chart = |id: &str, lines: Vec<Line>, unit: Unit| TimeChart {
        id: id.to_owned(),
        unit,
        log: false,
        b0: ctx.axis.t0,
        bw,
        lines,
        marks: &[],
        height: 80.0,
    };
    let mut per = vec![Some(0.0); n];
    for l in &r.losses {
        let i = (l.ts_ns.saturating_sub(r.series.t0_ns) / width) as usize;
        if let Some(Some(v)) = per.get_mut(i.min(n - 1)) {
            *v += l.lost as f64;
        }
    }
    if lost > 0 {
        s.push_str("<h4>Lost events per bucket</h4>");
        s.push_str(&svg::time_chart(
            &ctx.axis,
            &chart(
                "losses-chart",
                vec![Line {
                    name: "lost events".into(),
                    color: COLORS[1],
                    values: per,
                    band: None,
                }],
                Unit::Count,
            ),
        ));
    }
    // Checkpoints (about one a second): rates between consecutive ones,
    // drawn over the buckets they span.
    let mut cps = coarsen(&r.series.checkpoints, f);
    cps.resize(n, CpBucket::default());
    let mut hits = vec![None; n];
    let mut written = vec![None; n];
    let mut lost_rate = vec![None; n];
    let mut prev: Option<(usize, u64, u64, u64, u64)> = None;
    let mut points = 0;
    for (i, c) in cps.iter().enumerate() {
        let Some(p) = &c.0 else { continue };
        points += 1;
        if let Some((j, ts, h, w, lo)) = prev {
            let dt = (p.ts_ns.saturating_sub(ts) as f64 / 1e9).max(1e-9);
            for k in j + 1..=i {
                hits[k] = Some(p.hits.saturating_sub(h) as f64 / dt);
                written[k] = Some(p.events_written.saturating_sub(w) as f64 / dt);
                lost_rate[k] = Some(p.lost_total.saturating_sub(lo) as f64 / dt);
            }
        }
        prev = Some((i, p.ts_ns, p.hits, p.events_written, p.lost_total));
    }
    if points > 1 {
        s.push_str(
            "<h4>Tracepoint hits counted in the kernel, events written and lost, per second \
             <small>(between checkpoints; hits above written are events not streamed: aggregate-only \
             kinds, filtered or lost)</small></h4>",
        );
        let lines = vec![
            Line {
                name: "kernel hits/s".into(),
                color: COLORS[0],
                values: hits,
                band: None,
            },
            Line {
                name: "events written/s".into(),
                color: COLORS[2],
                values: written,
                band: None,
            },
            Line {
                name: "lost/s".into(),
                color: COLORS[1],
                values: lost_rate,
                band: None,
            },
        ];
        s.push_str(&svg::time_chart(
            &ctx.axis,
            &chart("checkpoints-chart", lines, Unit::PerSec),
        ));
    } else {
        let _ = write!(
            s,
            "<p class=\"note\">{points} checkpoint(s) in this window: no self-metrics over time.</p>"
        );
    }
    if !r.losses.is_empty() {
        s.push_str(
            "<table id=\"loss-table\" class=\"num\"><thead><tr><th>time</th><th>lost</th><th>lost since the start</th></tr></thead><tbody>",
        );
        for l in r.losses.iter().take(LOSS_ROWS) {
            let _ = write!(
                s,
                "<tr><td>{:.6}s</td><td>{}</td><td>{}</td></tr>",
                ctx.t(l.ts_ns),
                l.lost,
                l.total
            );
        }
        s.push_str("</tbody></table>");
        if r.losses.len() > LOSS_ROWS {
            let _ = write!(
                s,
                "<p class=\"note\">... {} more loss records (all in the chart).</p>",
                r.losses.len() - LOSS_ROWS
            );
        }
    }
    let st = &r.stats;
    let _ = write!(
        s,
        "<h3>The file</h3><table class=\"kv\"><tr><th>format</th><td>{}.{}</td></tr><tr><th>blocks</th><td>{}</td></tr>\
         <tr><th>end</th><td>{}</td></tr><tr><th>damage</th><td>{} damaged regions ({} bytes skipped), \
         {} blocks of a newer format, {} undecodable blocks</td></tr></table>",
        st.version.0,
        st.version.1,
        st.blocks,
        match st.truncated_at {
            Some(at) => format!("<span class=\"bad\">cut short at byte {at}</span>"),
            None if st.clean_end => "<span class=\"ok\">closed cleanly</span>".into(),
            None => "<span class=\"bad\">no end block (the recorder did not finish)</span>".into(),
        },
        st.corrupt_regions,
        st.skipped_bytes,
        st.unknown_blocks,
        st.undecodable_blocks
    );
    s.push_str(&probes(ctx));
    s.push_str("</section>");
    s
}

fn probes(ctx: &Ctx) -> String {
    let p = &ctx.r.header.probes;
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for x in p {
        *by.entry(x.status.as_str()).or_default() += 1;
    }
    let counts: Vec<String> = by.iter().map(|(k, n)| format!("{n} {}", esc(k))).collect();
    let mut s = format!(
        "<h3 id=\"probes\">Probes</h3><p>{} probes in the header: {}.</p>",
        p.len(),
        if counts.is_empty() {
            "none".into()
        } else {
            counts.join(", ")
        }
    );
    if p.is_empty() {
        return s;
    }
    s.push_str(
        "<details><summary>the probe table (why each probe is attached or not)</summary><table id=\"probe-table\" class=\"sortable\"><thead><tr><th>probe</th><th>kind</th><th>program</th>\
         <th>status</th><th>why</th><th>hot path</th></tr></thead><tbody>",
    );
    for x in p {
        let _ = write!(
            s,
            "<tr class=\"st-{0}\"><td>{1}</td><td>{2}</td><td>{3}</td><td>{0}</td><td>{4}</td><td>{5}</td></tr>",
            esc(&x.status),
            esc(&x.name),
            esc(&x.kind),
            esc(&x.program),
            esc(&x.reason),
            if x.hot { "yes" } else { "" }
        );
    }
    s.push_str("</tbody></table></details>");
    s
}
