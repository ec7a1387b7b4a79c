//! One panel per device: rates, outstanding mappings and bytes (the leak
//! view), latency percentiles per operation and swiotlb bounces over time
//! on the page's shared axis with the device's incidents marked, then the
//! distributions: mapped sizes, lifetimes and latencies.

use std::fmt::Write as _;

use gpudirect_trace_common::{op, LatHist};
use hdrhistogram::Histogram;

use super::{
    esc, incidents,
    summary::category_short,
    svg::{self, Line, Mark, TimeChart, Unit, COLORS},
    Ctx,
};
use crate::{
    aggregate::{DeviceSnapshot, DeviceStats, LatencySnapshot},
    output::{bytes, ns},
    report::{
        series::{coarsen, Bucket, CpBucket, DeviceSeries, Gauge, LatBucket, LEVELS},
        Replay,
    },
};

/// Incidents drawn across every chart of a device; beyond this many only
/// the device's incident strip shows them.
const MARKS_ON_CHARTS: usize = 256;

fn active_levels(b: &[Bucket]) -> Vec<usize> {
    (0..3)
        .filter(|&l| b.iter().any(|b| b.maps[l] + b.unmaps[l] > 0))
        .collect()
}

/// Levels the checkpoints count for `device` (aggregate-only recordings).
fn counter_levels(cps: &[CpBucket], device: &str) -> Vec<usize> {
    (0..3)
        .filter(|&l| {
            cps.iter().any(|c| {
                c.0.as_ref()
                    .and_then(|p| p.counters.get(device))
                    .is_some_and(|r| r[l][0] + r[l][1] > 0)
            })
        })
        .collect()
}

/// How many lines the device panels draw (bands count twice): the page's
/// size budget divides among them.
pub fn lines(r: &Replay, devices: &[DeviceSnapshot]) -> usize {
    devices
        .iter()
        .map(|d| match r.series.devices.get(d.device.as_str()) {
            Some(s) => {
                let levels = active_levels(&s.buckets).len();
                let bounces = s.buckets.iter().any(|b| b.bounces > 0) as usize;
                2 * levels + 6 * levels + 3 * s.latency.len() + bounces
            }
            None => 4 * counter_levels(&r.series.checkpoints, &d.device).len(),
        })
        .sum()
}

/// Counts per power-of-two bucket (value `v` in bucket floor(log2 v)).
fn log2_buckets(h: &Histogram<u64>) -> Vec<(usize, u64)> {
    let mut counts = [0u64; 64];
    for v in h.iter_recorded() {
        let b = 63 - v.value_iterated_to().max(1).leading_zeros() as usize;
        counts[b] += v.count_at_value();
    }
    trim(&counts)
}

/// The buckets from the first to the last non-empty one.
fn trim(counts: &[u64]) -> Vec<(usize, u64)> {
    match (
        counts.iter().position(|&c| c > 0),
        counts.iter().rposition(|&c| c > 0),
    ) {
        (Some(lo), Some(hi)) => (lo..=hi).map(|b| (b, counts[b])).collect(),
        _ => Vec::new(),
    }
}

fn log2_of(h: &LatHist) -> Vec<(usize, u64)> {
    trim(&h.buckets)
}

fn dist(
    id: &str,
    title: &str,
    b: &[(usize, u64)],
    label: fn(u64) -> String,
    color: &str,
    unit: &str,
) -> String {
    if b.is_empty() {
        return String::new();
    }
    let labels: Vec<String> = b.iter().map(|(k, _)| label(1u64 << k)).collect();
    let values: Vec<u64> = b.iter().map(|(_, v)| *v).collect();
    format!(
        "<div><h4>{title}</h4>{}</div>",
        svg::bars(id, &labels, &values, color, unit, Unit::Count, svg::HALF)
    )
}

/// Time charts of one device panel: ids under its anchor, its incidents.
struct Maker<'a> {
    anchor: &'a str,
    b0: f64,
    bw: f64,
    marks: &'a [Mark],
}

impl<'a> Maker<'a> {
    fn chart(
        &self,
        id: &str,
        unit: Unit,
        log: bool,
        lines: Vec<Line>,
        height: f64,
    ) -> TimeChart<'a> {
        TimeChart {
            id: format!("{}-{id}", self.anchor),
            unit,
            log,
            b0: self.b0,
            bw: self.bw,
            lines,
            marks: self.marks,
            height,
        }
    }
}

/// Per bucket, the level carried forward through buckets without a
/// sample: (min, max, last).
type Levels = Vec<Option<(f64, f64, f64)>>;

fn fill_gauges(g: impl Iterator<Item = Option<Gauge>>) -> Levels {
    let mut last: Option<u64> = None;
    g.map(|g| match g {
        Some(g) => {
            last = Some(g.last);
            Some((g.min as f64, g.max as f64, g.last as f64))
        }
        None => last.map(|v| (v as f64, v as f64, v as f64)),
    })
    .collect()
}

fn level_line(name: String, color: &'static str, v: Levels) -> Line {
    Line {
        name,
        color,
        values: v.iter().map(|x| x.map(|x| x.2)).collect(),
        band: Some((
            v.iter().map(|x| x.map(|x| x.0)).collect(),
            v.iter().map(|x| x.map(|x| x.1)).collect(),
        )),
    }
}

pub fn section(ctx: &Ctx) -> String {
    let mut s = String::from("<section id=\"devices\"><h2>Devices</h2>");
    if ctx.devices.is_empty() {
        s.push_str("<p>No device activity in this window.</p>");
    }
    for d in ctx.devices {
        s.push_str(&panel(ctx, d));
    }
    s.push_str("</section>");
    s
}

fn panel(ctx: &Ctx, d: &DeviceSnapshot) -> String {
    let r = ctx.r;
    let name = d.device.as_str();
    let anchor = ctx.anchors.get(name).cloned().unwrap_or_default();
    let pci = r.header.devices.iter().find(|p| p.bus_id == name);
    let mut title = esc(name);
    if let Some(g) = ctx.gpus.get(name) {
        // The identity the recording kept (name, UUID), else bus order.
        let full = r
            .header
            .gpus
            .iter()
            .find(|id| id.bus_id == name)
            .map_or_else(|| format!("{g} (bus order)"), ToString::to_string);
        let _ = write!(title, " <span class=\"gpu\">{}</span>", esc(&full));
    }
    if let Some(p) = pci {
        let _ = write!(
            title,
            " <small>{}:{} class {} driver {}{}</small>",
            esc(p.vendor.trim_start_matches("0x")),
            esc(p.device.trim_start_matches("0x")),
            esc(p.class.trim_start_matches("0x")),
            esc(p.driver.as_deref().unwrap_or("none")),
            p.iommu_group
                .map(|g| format!(", IOMMU group {g}"))
                .unwrap_or_default()
        );
    }
    let mut s = format!(
        "<section class=\"device\" id=\"{anchor}\" data-device=\"{}\"><h3>{title}</h3>",
        esc(name)
    );
    let _ = write!(
        s,
        "<p class=\"facts\">{} level: {} maps, {} unmaps, {} mapped; {} mappings ({}) outstanding at the end; \
         {} swiotlb bounces ({}); {} map errors, {} faults, {} Xids.</p>",
        d.level,
        d.maps,
        d.unmaps,
        bytes(d.bytes_mapped),
        d.outstanding_mappings,
        bytes(d.outstanding_bytes),
        d.families.swiotlb.swiotlb_bounces,
        bytes(d.families.swiotlb.swiotlb_bounced_bytes),
        d.map_errors,
        d.faults,
        d.xids
    );
    // What the families say of the device (PCIe AER counts, ...).
    for (what, value) in d.families.facts() {
        let _ = write!(s, "<p class=\"facts\">{}: {}</p>", esc(what), esc(&value));
    }
    let mine: Vec<_> = ctx
        .incidents
        .iter()
        .copied()
        .filter(|i| i.device == name)
        .collect();
    let marks = incidents::marks(ctx, mine.iter().copied());
    let chart_marks: &[Mark] = if marks.len() <= MARKS_ON_CHARTS {
        &marks
    } else {
        &[]
    };
    let f = ctx.factor;
    let n = r.series.len.div_ceil(f);
    let bw = (r.series.width_ns * f as u64) as f64 / 1e9;
    let mk = Maker {
        anchor: &anchor,
        b0: ctx.axis.t0,
        bw,
        marks: chart_marks,
    };
    let chart = |id: &str, unit, log, lines, h| mk.chart(id, unit, log, lines, h);
    let ser = r.series.devices.get(name);
    let pad = |mut b: Vec<Bucket>| {
        b.resize(n, Bucket::default());
        b
    };
    let buckets = ser.map(|x| pad(coarsen(&x.buckets, f))).unwrap_or_default();
    let levels = active_levels(&buckets);
    if !levels.is_empty() {
        let mut rate = Vec::new();
        for &l in &levels {
            for (k, what) in ["maps", "unmaps"].iter().enumerate() {
                rate.push(Line {
                    name: format!("{what}/s ({})", LEVELS[l]),
                    color: COLORS[(2 * l + k) % COLORS.len()],
                    values: buckets
                        .iter()
                        .map(|b| Some([b.maps[l], b.unmaps[l]][k] as f64 / bw))
                        .collect(),
                    band: None,
                });
            }
        }
        s.push_str("<h4>Map and unmap rate</h4>");
        s.push_str(&svg::time_chart(
            &ctx.axis,
            &chart("rate", Unit::PerSec, false, rate, 110.0),
        ));
        for (what, id, unit) in [
            ("Outstanding mappings", "outstanding", Unit::Count),
            ("Outstanding bytes", "outstanding-bytes", Unit::Bytes),
        ] {
            let lines = levels
                .iter()
                .map(|&l| {
                    let g = buckets.iter().map(|b| {
                        if unit == Unit::Count {
                            b.outstanding[l]
                        } else {
                            b.outstanding_bytes[l]
                        }
                    });
                    level_line(
                        format!("{} ({})", what.to_lowercase(), LEVELS[l]),
                        COLORS[(2 * l) % COLORS.len()],
                        fill_gauges(g),
                    )
                })
                .collect();
            let _ = write!(
                s,
                "<h4>{what} <small>(line: at the end of each bucket; band: minimum to maximum within it)</small></h4>"
            );
            s.push_str(&svg::time_chart(
                &ctx.axis,
                &chart(id, unit, false, lines, 90.0),
            ));
        }
    } else {
        s.push_str(&counter_charts(ctx, name, n, f, &mk));
    }
    if let Some(ser) = ser {
        s.push_str(&latency_charts(ctx, ser, n, &mk));
        let bounces: Vec<Option<f64>> = buckets
            .iter()
            .map(|b| Some(b.bounces as f64 / bw))
            .collect();
        if buckets.iter().any(|b| b.bounces > 0) {
            let total = crate::output::sum(buckets.iter().map(|b| b.bounce_bytes));
            let _ = write!(
                s,
                "<h4>swiotlb bounces <small>({} bounced in all)</small></h4>",
                bytes(total)
            );
            let l = vec![Line {
                name: "bounces/s".into(),
                color: COLORS[5],
                values: bounces,
                band: None,
            }];
            s.push_str(&svg::time_chart(
                &ctx.axis,
                &chart("bounces", Unit::PerSec, false, l, 70.0),
            ));
        } else {
            s.push_str("<p class=\"note\">No swiotlb bounces streamed for this device.</p>");
        }
    }
    if !mine.is_empty() {
        let mut cats: Vec<_> = mine.iter().map(|i| i.category).collect();
        cats.dedup();
        cats.sort();
        cats.dedup();
        let rows: Vec<(&str, &str)> = cats
            .iter()
            .map(|c| (c.as_str(), category_short(*c)))
            .collect();
        let _ = write!(s, "<h4>Incidents of this device ({})</h4>", mine.len());
        s.push_str(&svg::mark_strip(
            &ctx.axis,
            &format!("{anchor}-incidents"),
            &marks,
            &rows,
        ));
    }
    if let Some(st) = r.analysis.agg.devices.get(name) {
        s.push_str(&distributions(&anchor, st, d));
    }
    s.push_str("</section>");
    s
}

/// Rates and maps-minus-unmaps from the checkpoints' kernel counters, for
/// devices without streamed mappings (aggregate-only recordings).
fn counter_charts(ctx: &Ctx, name: &str, n: usize, f: usize, mk: &Maker) -> String {
    let chart = |id: &str, unit, log, lines, h| mk.chart(id, unit, log, lines, h);
    let r = ctx.r;
    let levels = counter_levels(&r.series.checkpoints, name);
    if levels.is_empty() {
        return "<p class=\"note\">No mappings of this device in this window.</p>".into();
    }
    let mut cps = coarsen(&r.series.checkpoints, f);
    cps.resize(n, CpBucket::default());
    let mut rate: Vec<Line> = Vec::new();
    let mut net: Vec<Line> = Vec::new();
    for &l in &levels {
        let mut maps = vec![None; n];
        let mut unmaps = vec![None; n];
        let mut outst = vec![None; n];
        let mut prev: Option<(usize, u64, [u64; 4])> = None;
        for (i, c) in cps.iter().enumerate() {
            let Some(p) = &c.0 else { continue };
            let row = p.counters.get(name).map(|x| x[l]).unwrap_or_default();
            if let Some((j, ts, pr)) = prev {
                let dt = (p.ts_ns.saturating_sub(ts) as f64 / 1e9).max(1e-9);
                for k in j + 1..=i {
                    maps[k] = Some(row[0].saturating_sub(pr[0]) as f64 / dt);
                    unmaps[k] = Some(row[1].saturating_sub(pr[1]) as f64 / dt);
                }
            }
            let o = row[0] as f64 - row[1] as f64;
            outst[i] = Some((o, o, o));
            prev = Some((i, p.ts_ns, row));
        }
        for (k, (what, v)) in [("maps", maps), ("unmaps", unmaps)].into_iter().enumerate() {
            rate.push(Line {
                name: format!("{what}/s ({})", LEVELS[l]),
                color: COLORS[(2 * l + k) % COLORS.len()],
                values: v,
                band: None,
            });
        }
        let mut last = None;
        let filled = outst
            .into_iter()
            .map(|x| {
                last = x.or(last);
                last
            })
            .collect();
        net.push(level_line(
            format!("maps - unmaps ({})", LEVELS[l]),
            COLORS[(2 * l) % COLORS.len()],
            filled,
        ));
    }
    let mut s = String::from(
        "<h4>Map and unmap rate <small>(kernel counters between checkpoints)</small></h4>",
    );
    s.push_str(&svg::time_chart(
        &ctx.axis,
        &chart("rate", Unit::PerSec, false, rate, 110.0),
    ));
    s.push_str(
        "<h4>Maps minus unmaps since the start <small>(kernel counters: the outstanding trend; \
         mappings made before the recording are not counted)</small></h4>",
    );
    s.push_str(&svg::time_chart(
        &ctx.axis,
        &chart("outstanding", Unit::Count, false, net, 90.0),
    ));
    s
}

fn latency_charts(ctx: &Ctx, ser: &DeviceSeries, n: usize, mk: &Maker) -> String {
    let chart = |id: &str, unit, log, lines, h| mk.chart(id, unit, log, lines, h);
    let mut s = String::new();
    for (&o, v) in &ser.latency {
        let mut b = coarsen(v, ctx.factor);
        b.resize(n, LatBucket::default());
        let name = op::NAMES.get(o as usize).copied().unwrap_or("op");
        let lines = [
            ("p50", 0.5, COLORS[0]),
            ("p99", 0.99, COLORS[5]),
            ("p99.9", 0.999, COLORS[1]),
        ]
        .into_iter()
        .map(|(q, x, color)| Line {
            name: format!("{q} {name}"),
            color,
            values: b
                .iter()
                .map(|b| b.0.as_ref().and_then(|h| h.quantile(x)).map(|v| v as f64))
                .collect(),
            band: None,
        })
        .collect();
        let _ = write!(
            s,
            "<h4>{} latency over time <small>(p50, p99, p99.9 per bucket, log scale; within 19%)</small></h4>",
            esc(name)
        );
        s.push_str(&svg::time_chart(
            &ctx.axis,
            &chart(&format!("lat-{name}"), Unit::Ns, true, lines, 90.0),
        ));
    }
    s
}

fn distributions(anchor: &str, st: &DeviceStats, d: &DeviceSnapshot) -> String {
    let mut s = String::from("<div class=\"dists\">");
    for (l, level) in [&st.dma, &st.iommu, &st.coherent].into_iter().enumerate() {
        s.push_str(&dist(
            &format!("{anchor}-sizes-{l}"),
            &format!(
                "Mapped-size distribution ({}, {} entries)",
                LEVELS[l],
                level.sizes.len()
            ),
            &log2_buckets(&level.sizes),
            bytes,
            COLORS[(2 * l) % COLORS.len()],
            "mappings",
        ));
    }
    for (l, level) in [&st.dma, &st.iommu, &st.coherent].into_iter().enumerate() {
        let mut b = log2_buckets(&level.lifetimes);
        let mut src = "streamed map to unmap";
        if level.lifetimes.is_empty() && l == 0 {
            if let Some(k) = st.kernel_latency.get(&op::LIFETIME).filter(|k| k.count > 0) {
                b = log2_of(k);
                src = "kernel log2 histogram";
            }
        }
        if b.is_empty() {
            continue;
        }
        s.push_str(&dist(
            &format!("{anchor}-life-{l}"),
            &format!("Lifetime distribution ({}, {src})", LEVELS[l]),
            &b,
            ns,
            COLORS[(2 * l + 1) % COLORS.len()],
            "mappings",
        ));
    }
    for o in 0..op::COUNT {
        if o == op::LIFETIME {
            continue;
        }
        let name = op::NAMES[o as usize];
        let (b, src) = match (st.latency.get(&o), st.kernel_latency.get(&o)) {
            (Some(l), _) if !l.hist.is_empty() => (log2_buckets(&l.hist), "streamed"),
            (_, Some(k)) if k.count > 0 => (log2_of(k), "kernel log2 histogram"),
            _ => continue,
        };
        s.push_str(&dist(
            &format!("{anchor}-lat-{name}"),
            &format!("{} latency distribution ({src})", esc(name)),
            &b,
            ns,
            COLORS[6],
            "calls",
        ));
    }
    s.push_str("</div>");
    if !d.latency_ns.is_empty() || !d.invalidations.is_empty() {
        s.push_str(
            "<h4>Latency percentiles</h4><table class=\"num\"><thead><tr><th>operation</th><th>calls</th><th>p50</th>\
             <th>p90</th><th>p99</th><th>p99.9</th><th>max</th><th>source</th></tr></thead><tbody>",
        );
        for (op, l) in &d.latency_ns {
            let _ = write!(s, "<tr><td>{}</td><td>{}</td>", esc(op), l.count);
            push_percentile_cells(&mut s, l);
        }
        // Submissions to the IOMMU's invalidation queue (time:qi_submit_sync
        // and the other vendors' waits), per unit and type.
        for r in &d.invalidations {
            let l = &r.latency_ns;
            let _ = write!(
                s,
                "<tr><td>invalidation {} ({})</td><td>{}</td>",
                esc(r.kind),
                esc(&r.iommu),
                r.count
            );
            push_percentile_cells(&mut s, l);
        }
        s.push_str("</tbody></table>");
    } else {
        s.push_str(
            "<p class=\"note\">No latencies for this device: none were streamed, and a recording keeps no \
             in-kernel latency histograms.</p>",
        );
    }
    s
}

/// The latency table's p50 … max and source cells, and the row's end: the
/// same for an operation's row and an invalidation queue's.
fn push_percentile_cells(s: &mut String, l: &LatencySnapshot) {
    for v in [l.p50, l.p90, l.p99, l.p999, l.max] {
        let _ = write!(s, "<td>{}</td>", ns(v));
    }
    let _ = write!(s, "<td>{}</td></tr>", l.source);
}
