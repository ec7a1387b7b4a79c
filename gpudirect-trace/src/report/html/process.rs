//! Who mapped what: mapped and outstanding bytes per process and device.
//! The pid is the task current when the DMA-API or IOMMU tracepoint fired:
//! the caller for a driver's map in process context; maps made in
//! interrupt context are their own row where the kernel's preempt count
//! could be read, else they fall to the interrupted task (`model::process`).
//! Names appear only where the trace has them (a driver's Xid line names
//! its process).

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
};

use super::{
    esc,
    svg::{self, Unit, COLORS},
    Ctx,
};
use crate::{
    model::ProcessOrigin,
    output::bytes,
    report::series::{ProcStats, LEVELS},
};

/// Table rows shown (largest mappers first); the rest are summed.
const ROWS: usize = 200;
/// Bars per device chart.
const BARS: usize = 16;

#[derive(Default, Clone)]
struct Row {
    stats: ProcStats,
    outstanding: [u64; 3],
    outstanding_bytes: [u64; 3],
}

pub fn section(ctx: &Ctx) -> String {
    let r = ctx.r;
    let mut s = String::from("<section id=\"processes\"><h2>Processes</h2>");
    // Names the trace gives: those the recorder looked up while the
    // processes ran (NAMES blocks), then processes the drivers' reports name.
    let mut names: HashMap<u32, String> = r
        .analysis
        .agg
        .names
        .iter()
        .filter_map(|(&pid, n)| n.comm.clone().map(|c| (pid, c)))
        .collect();
    for i in &ctx.incidents {
        if let Some(p) = &i.process {
            if let (Some(c), ProcessOrigin::Reported) = (&p.comm, p.from) {
                names.entry(p.pid).or_insert_with(|| c.clone());
            }
        }
    }
    let mut rows: BTreeMap<(String, u32), Row> = BTreeMap::new();
    for ((dev, pid), st) in &r.series.processes {
        rows.entry((dev.to_string(), *pid)).or_default().stats = st.clone();
    }
    // Outstanding at the end of the window, by the pid that mapped them.
    for (dev, d) in &r.analysis.agg.devices {
        if !r.wanted(dev) {
            continue;
        }
        for (l, level) in [&d.dma, &d.iommu, &d.coherent].into_iter().enumerate() {
            for m in level.long_lived(r.last_ns, 0, usize::MAX) {
                let row = rows.entry((dev.to_string(), m.pid)).or_default();
                row.outstanding[l] += 1;
                row.outstanding_bytes[l] += m.size;
            }
        }
    }
    if rows.is_empty() {
        s.push_str("<p>No mappings with a process in this window (aggregate-only recordings stream none).</p></section>");
        return s;
    }
    s.push_str(
        "<p class=\"note\">The pid is the task current when the mapping tracepoint fired: the caller for maps \
         made in process context; maps made in an interrupt show as interrupt context where the kernel's preempt \
         count could be read (the probe list's \"interrupt context\" row), as the interrupted task where not. Outstanding: \
         mappings this pid made that were still mapped at the end of the window.</p>",
    );
    // Per device: bars of bytes mapped, and of bytes outstanding.
    let mut by_dev: BTreeMap<&str, Vec<(u32, &Row)>> = BTreeMap::new();
    for ((dev, pid), row) in &rows {
        by_dev.entry(dev).or_default().push((*pid, row));
    }
    for (k, (dev, list)) in by_dev.iter().enumerate() {
        let _ = write!(s, "<h3>{}</h3><div class=\"dists\">", ctx.device_link(dev));
        for (what, pick) in [
            (
                "Bytes mapped",
                (|r: &Row| crate::output::sum(r.stats.bytes_mapped.iter().copied()))
                    as fn(&Row) -> u64,
            ),
            ("Bytes outstanding at the end", |r: &Row| {
                crate::output::sum(r.outstanding_bytes.iter().copied())
            }),
        ] {
            let mut v: Vec<(u32, u64)> = list
                .iter()
                .map(|(p, r)| (*p, pick(r)))
                .filter(|x| x.1 > 0)
                .collect();
            if v.is_empty() {
                continue;
            }
            v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let more = v.len().saturating_sub(BARS);
            v.truncate(BARS);
            let labels: Vec<String> = v.iter().map(|(p, _)| label(*p, &names)).collect();
            let values: Vec<u64> = v.iter().map(|x| x.1).collect();
            let _ = write!(
                s,
                "<div><h4>{what} per process{}</h4>",
                if more > 0 {
                    format!(" (largest {BARS}; {more} more in the table)")
                } else {
                    String::new()
                }
            );
            s.push_str(&svg::bars(
                &format!(
                    "proc-{k}-{}",
                    if what.starts_with("Bytes mapped") {
                        "mapped"
                    } else {
                        "outstanding"
                    }
                ),
                &labels,
                &values,
                COLORS[k % COLORS.len()],
                "bytes",
                Unit::Bytes,
                svg::HALF,
            ));
            s.push_str("</div>");
        }
        s.push_str("</div>");
    }
    s.push_str(
        "<table id=\"process-table\" class=\"sortable num\"><thead><tr><th>device</th><th data-type=\"num\">pid</th>\
         <th>name</th><th>level</th><th data-type=\"num\">maps</th><th data-type=\"num\">bytes mapped</th>\
         <th data-type=\"num\">unmaps by it</th><th data-type=\"num\">outstanding</th>\
         <th data-type=\"num\">outstanding bytes</th></tr></thead><tbody>",
    );
    let mut flat: Vec<(&str, u32, usize, &Row)> = Vec::new();
    for ((dev, pid), row) in &rows {
        for l in 0..3 {
            let st = &row.stats;
            if st.maps[l] + st.unmaps[l] + row.outstanding[l] > 0 {
                flat.push((dev, *pid, l, row));
            }
        }
    }
    flat.sort_by(|a, b| b.3.stats.bytes_mapped[b.2].cmp(&a.3.stats.bytes_mapped[a.2]));
    for (dev, pid, l, row) in flat.iter().take(ROWS) {
        let st = &row.stats;
        let pid_n = *pid;
        let irq = pid_n == crate::model::INTERRUPT_PID;
        let pid = if irq {
            "-".to_owned()
        } else {
            pid_n.to_string()
        };
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{pid}</td><td>{}</td><td>{}</td><td>{}</td><td data-k=\"{}\">{}</td><td>{}</td>\
             <td>{}</td><td data-k=\"{}\">{}</td></tr>",
            ctx.device_link(dev),
            if irq {
                "(interrupt context)".to_owned()
            } else {
                names.get(&pid_n).map(|n| esc(n)).unwrap_or_default()
            },
            LEVELS[*l],
            st.maps[*l],
            st.bytes_mapped[*l],
            bytes(st.bytes_mapped[*l]),
            st.unmaps[*l],
            row.outstanding[*l],
            row.outstanding_bytes[*l],
            bytes(row.outstanding_bytes[*l]),
        );
    }
    s.push_str("</tbody></table>");
    if flat.len() > ROWS {
        let _ = write!(
            s,
            "<p class=\"note\">{} more rows not shown (smaller mappers).</p>",
            flat.len() - ROWS
        );
    }
    for (dev, o) in &r.series.other_processes {
        let _ = write!(
            s,
            "<p class=\"note\">{}: {} maps ({}) by processes beyond the first {} counted one by one.</p>",
            ctx.device_link(dev),
            crate::output::sum(o.maps.iter().copied()),
            bytes(crate::output::sum(o.bytes_mapped.iter().copied())),
            crate::report::series::MAX_PROCESSES
        );
    }
    s.push_str("</section>");
    s
}

fn label(pid: u32, names: &HashMap<u32, String>) -> String {
    match (pid, names.get(&pid)) {
        (0, _) => "pid 0 (kernel)".into(),
        (crate::model::INTERRUPT_PID, _) => "interrupt context".into(),
        (p, Some(n)) => format!("pid {p} ({n})"),
        (p, None) => format!("pid {p}"),
    }
}
