//! Inline SVG charts: time charts that share one time axis (the page's
//! script zooms them together and shows exact values on hover; without the
//! script they are plain drawings) and bar charts of distributions (each
//! bar's exact value in its `<title>`, which needs no script).

use std::fmt::Write as _;

use super::esc;
use crate::output::{bytes, ns};

/// Chart width and margins, px.
pub const W: f64 = 900.0;
pub const LEFT: f64 = 72.0;
pub const RIGHT: f64 = 12.0;
pub const PW: f64 = W - LEFT - RIGHT;
/// Width of the distributions (two side by side).
pub const HALF: f64 = 440.0;
pub const COLORS: [&str; 8] = [
    "#3465a4", "#cc0000", "#4e9a06", "#c4a000", "#75507b", "#ce5c00", "#06989a", "#555753",
];

/// What a series' numbers are, for axis labels and the hover text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Count,
    PerSec,
    Bytes,
    Ns,
}

impl Unit {
    fn code(self) -> &'static str {
        match self {
            Unit::Count => "n",
            Unit::PerSec => "r",
            Unit::Bytes => "b",
            Unit::Ns => "t",
        }
    }

    pub fn fmt(self, v: f64) -> String {
        match self {
            Unit::Count => si(v),
            Unit::PerSec => format!("{}/s", si(v)),
            Unit::Bytes => bytes(v.max(0.0) as u64),
            Unit::Ns => ns(v.max(0.0) as u64),
        }
    }
}

/// 1234 -> 1.2k, 2500000 -> 2.5M.
pub fn si(v: f64) -> String {
    let a = v.abs();
    let (d, s) = match a {
        _ if a >= 1e9 => (1e9, "G"),
        _ if a >= 1e6 => (1e6, "M"),
        _ if a >= 1e3 => (1e3, "k"),
        _ => (1.0, ""),
    };
    if d == 1.0 {
        if v.fract() == 0.0 {
            format!("{v}")
        } else {
            format!("{v:.2}")
        }
    } else {
        format!("{:.1}{s}", v / d)
    }
}

/// A number for the hover data: integers exactly, others to 4 digits.
pub fn num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v:.4}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// About `n` round steps (1, 2, 5 x 10^k) covering `[lo, hi]`.
pub fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag);
    let first = (lo / step - 1e-9).ceil() as i64;
    (first..)
        .map(|k| k as f64 * step)
        .take_while(|t| *t <= hi + step * 1e-9)
        .take(50)
        .collect()
}

/// The time axis every time chart of the page shares.
#[derive(Clone, Copy, Debug)]
pub struct Axis {
    /// Window, seconds on the trace clock.
    pub t0: f64,
    pub t1: f64,
}

impl Axis {
    pub fn x(&self, t: f64) -> f64 {
        PW * (t - self.t0) / (self.t1 - self.t0).max(1e-9)
    }
}

/// Marks per strip row drawn one by one with their text and link.
pub const LINKED_MARKS: usize = 400;

/// Per bucket, the lowest and highest value (gaps: `None`).
pub type Band = (Vec<Option<f64>>, Vec<Option<f64>>);

/// One line (optionally with a min..max band behind it).
pub struct Line {
    pub name: String,
    pub color: &'static str,
    pub values: Vec<Option<f64>>,
    pub band: Option<Band>,
}

/// A mark on the time axis (an incident, a loss).
pub struct Mark {
    pub t: f64,
    pub class: String,
    /// Hover text and, where set, the id of the row it links to.
    pub title: String,
    pub target: Option<String>,
}

pub struct TimeChart<'a> {
    pub id: String,
    pub unit: Unit,
    pub log: bool,
    /// Buckets: the first one's start and the width, seconds.
    pub b0: f64,
    pub bw: f64,
    pub lines: Vec<Line>,
    /// Vertical lines across the plot (the device's incidents).
    pub marks: &'a [Mark],
    pub height: f64,
}

const TOP: f64 = 8.0;
const BOTTOM: f64 = 20.0;

fn fmt_px(v: f64) -> String {
    let r = (v * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        format!("{}", r as i64)
    } else {
        format!("{r:.1}")
    }
}

/// The x-axis labels (the script redraws them when zooming).
fn x_labels(axis: &Axis, y: f64) -> String {
    let mut s = format!("<g class=\"xax\" transform=\"translate({LEFT},{y})\">");
    for t in ticks(axis.t0, axis.t1, 8) {
        let x = axis.x(t);
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"12\" text-anchor=\"middle\">{}s</text>",
            fmt_px(x),
            num(t)
        );
    }
    s.push_str("</g>");
    s
}

/// Vertical lines at the marks, one path per class, plus the linked,
/// titled marks themselves when `linked`.
fn mark_paths<'m>(
    axis: &Axis,
    marks: impl IntoIterator<Item = &'m Mark>,
    h: f64,
    linked: bool,
) -> String {
    let mut by_class: std::collections::BTreeMap<&str, String> = Default::default();
    let mut s = String::new();
    for m in marks {
        let x = fmt_px(axis.x(m.t));
        if linked {
            let line = format!(
                "<line class=\"mk {}\" x1=\"{x}\" x2=\"{x}\" y1=\"0\" y2=\"{h}\"><title>{}</title></line>",
                esc(&m.class),
                esc(&m.title)
            );
            match &m.target {
                Some(t) => {
                    let _ = write!(s, "<a href=\"#{}\">{line}</a>", esc(t));
                }
                None => s.push_str(&line),
            }
        } else {
            let _ = write!(by_class.entry(&m.class).or_default(), "M{x} 0V{h}");
        }
    }
    for (class, d) in by_class {
        let _ = write!(s, "<path class=\"mk {}\" d=\"{d}\"/>", esc(class));
    }
    s
}

/// A time chart on the page's shared axis.
pub fn time_chart(axis: &Axis, c: &TimeChart) -> String {
    let ph = c.height;
    let h = TOP + ph + BOTTOM;
    let all = c.lines.iter().flat_map(|l| {
        let band = l.band.iter().flat_map(|(a, b)| a.iter().chain(b.iter()));
        l.values.iter().chain(band).flatten().copied()
    });
    let (mut lo, mut hi) = (f64::MAX, 0.0f64);
    for v in all {
        hi = hi.max(v);
        if v > 0.0 {
            lo = lo.min(v);
        }
    }
    let log = c.log && hi > 0.0;
    if log {
        lo = 10f64.powf(lo.min(hi).log10().floor());
        hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);
    } else {
        lo = 0.0;
        hi = if hi <= 0.0 { 1.0 } else { hi * 1.05 };
    }
    let y = |v: f64| -> f64 {
        let f = if log {
            (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10())
        } else {
            v / hi
        };
        ph * (1.0 - f)
    };
    let names: Vec<String> = c.lines.iter().map(|l| esc(&l.name)).collect();
    let data: Vec<String> = c
        .lines
        .iter()
        .map(|l| {
            l.values
                .iter()
                .map(|v| v.map(num).unwrap_or_default())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    let mut s = format!(
        "<figure class=\"tc\" id=\"{}\" data-b0=\"{}\" data-bw=\"{}\" data-u=\"{}\" data-n=\"{}\" data-v=\"{}\">\
         <svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h}\" viewBox=\"0 0 {W} {h}\">",
        esc(&c.id),
        num(c.b0),
        num(c.bw),
        c.unit.code(),
        names.join("|"),
        data.join(";"),
    );
    // Y axis: a few labelled lines.
    s.push_str("<g class=\"yax\">");
    let yt: Vec<f64> = if log {
        let mut v = Vec::new();
        let mut t = lo;
        while t <= hi * 1.0001 {
            v.push(t);
            t *= 10.0;
        }
        v
    } else {
        ticks(0.0, hi, 3)
    };
    for t in yt {
        let py = fmt_px(TOP + y(t));
        let _ = write!(
            s,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{py}\" y2=\"{py}\"/><text x=\"{}\" y=\"{py}\" dy=\"3\" text-anchor=\"end\">{}</text>",
            W - RIGHT,
            LEFT - 4.0,
            esc(&c.unit.fmt(t))
        );
    }
    s.push_str("</g>");
    s.push_str(&x_labels(axis, TOP + ph + 2.0));
    let _ = write!(
        s,
        "<svg class=\"plot\" x=\"{LEFT}\" y=\"{TOP}\" width=\"{PW}\" height=\"{ph}\" viewBox=\"0 0 {PW} {ph}\" preserveAspectRatio=\"none\">\
         <rect class=\"bg\" width=\"{PW}\" height=\"{ph}\"/>"
    );
    let x = |i: usize| fmt_px(axis.x(c.b0 + (i as f64 + 0.5) * c.bw));
    for l in &c.lines {
        if let Some((mn, mx)) = &l.band {
            // One polygon per run of buckets with values: max forwards,
            // min backwards.
            let mut d = String::new();
            let mut run: Vec<(usize, f64, f64)> = Vec::new();
            let flush = |run: &mut Vec<(usize, f64, f64)>, d: &mut String| {
                if run.len() > 1 {
                    for (k, (i, _, top)) in run.iter().enumerate() {
                        let _ = write!(
                            d,
                            "{}{} {}",
                            if k == 0 { "M" } else { "L" },
                            x(*i),
                            fmt_px(y(*top))
                        );
                    }
                    for (i, bot, _) in run.iter().rev() {
                        let _ = write!(d, "L{} {}", x(*i), fmt_px(y(*bot)));
                    }
                    d.push('Z');
                }
                run.clear();
            };
            for (i, (a, b)) in mn.iter().zip(mx).enumerate() {
                match (a, b) {
                    (Some(a), Some(b)) => run.push((i, *a, *b)),
                    _ => flush(&mut run, &mut d),
                }
            }
            flush(&mut run, &mut d);
            if !d.is_empty() {
                let _ = write!(s, "<path class=\"band\" fill=\"{}\" d=\"{d}\"/>", l.color);
            }
        }
        let mut d = String::new();
        let mut pen = false;
        let mut single = Vec::new();
        for (i, v) in l.values.iter().enumerate() {
            match v {
                Some(v) => {
                    let _ = write!(
                        d,
                        "{}{} {}",
                        if pen { "L" } else { "M" },
                        x(i),
                        fmt_px(y(*v))
                    );
                    let alone = !pen && l.values.get(i + 1).is_none_or(Option::is_none);
                    if alone {
                        single.push((i, *v));
                    }
                    pen = true;
                }
                None => pen = false,
            }
        }
        let _ = write!(s, "<path class=\"ln\" stroke=\"{}\" d=\"{d}\"/>", l.color);
        // A lone bucket draws no line: a dot instead.
        for (i, v) in single {
            let _ = write!(
                s,
                "<path class=\"ln dot\" stroke=\"{}\" d=\"M{} {}h0.1\"/>",
                l.color,
                x(i),
                fmt_px(y(v))
            );
        }
    }
    s.push_str(&mark_paths(axis, c.marks, ph, false));
    s.push_str("<line class=\"cursor\" x1=\"-10\" x2=\"-10\" y1=\"0\" y2=\"100%\"/></svg></svg><figcaption>");
    for l in &c.lines {
        let _ = write!(
            s,
            "<span class=\"key\"><i style=\"background:{}\"></i>{}</span>",
            l.color,
            esc(&l.name)
        );
    }
    s.push_str("</figcaption></figure>");
    s
}

/// A strip of linked marks on the shared axis (incidents, loss records):
/// each mark's text on hover, a click goes to its row.
pub fn mark_strip(axis: &Axis, id: &str, marks: &[Mark], rows: &[(&str, &str)]) -> String {
    let ph = 14.0 * rows.len().max(1) as f64;
    let h = TOP + ph + BOTTOM;
    let mut s = format!(
        "<figure class=\"tc strip\" id=\"{}\"><svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h}\" viewBox=\"0 0 {W} {h}\">",
        esc(id)
    );
    for (k, (_, label)) in rows.iter().enumerate() {
        let _ = write!(
            s,
            "<text class=\"lab\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            LEFT - 4.0,
            fmt_px(TOP + 14.0 * k as f64 + 10.0),
            esc(label)
        );
    }
    s.push_str(&x_labels(axis, TOP + ph + 2.0));
    let _ = write!(
        s,
        "<svg class=\"plot\" x=\"{LEFT}\" y=\"{TOP}\" width=\"{PW}\" height=\"{ph}\" viewBox=\"0 0 {PW} {ph}\" preserveAspectRatio=\"none\">\
         <rect class=\"bg\" width=\"{PW}\" height=\"{ph}\"/>"
    );
    for (k, (class, _)) in rows.iter().enumerate() {
        let row: Vec<&Mark> = marks.iter().filter(|m| m.class == *class).collect();
        // Linked, titled marks cost ~250 bytes each: a storm of thousands
        // is drawn as one path (each incident is still in the table).
        let linked = row.len() <= LINKED_MARKS;
        let _ = write!(
            s,
            "<g transform=\"translate(0,{})\">{}</g>",
            14.0 * k as f64,
            mark_paths(axis, row, 12.0, linked)
        );
    }
    s.push_str(
        "<line class=\"cursor\" x1=\"-10\" x2=\"-10\" y1=\"0\" y2=\"100%\"/></svg></svg></figure>",
    );
    s
}

/// A bar chart of a distribution: one bar per bucket, its exact count in
/// its title, some labels under the bars.
pub fn bars(
    id: &str,
    labels: &[String],
    values: &[u64],
    color: &str,
    unit: &str,
    y: Unit,
    w: f64,
) -> String {
    let h = 140.0;
    let pw = w - LEFT - RIGHT;
    let (top, bottom) = (10.0, 22.0);
    let ph = h - top - bottom;
    let max = values.iter().copied().max().unwrap_or(0).max(1);
    let n = values.len().max(1) as f64;
    // Few bars stay bar-shaped.
    let bw = (pw / n).min(72.0);
    let mut s = format!(
        "<svg id=\"{}\" class=\"chart dist\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\"><g class=\"yax\">",
        esc(id)
    );
    for t in ticks(0.0, max as f64, 3) {
        let py = fmt_px(top + ph * (1.0 - t / max as f64));
        let _ = write!(
            s,
            "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{py}\" y2=\"{py}\"/><text x=\"{}\" y=\"{py}\" dy=\"3\" text-anchor=\"end\">{}</text>",
            w - RIGHT,
            LEFT - 4.0,
            esc(&y.fmt(t))
        );
    }
    s.push_str("</g>");
    let every = (values.len() / (w / 64.0).max(1.0) as usize).max(1);
    for (i, &v) in values.iter().enumerate() {
        let bh = ph * v as f64 / max as f64;
        let x = LEFT + i as f64 * bw;
        let label = labels.get(i).map(String::as_str).unwrap_or("");
        let _ = write!(
            s,
            "<rect class=\"bar\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{color}\"><title>{}: {}</title></rect>",
            fmt_px(x),
            fmt_px(top + ph - bh),
            fmt_px((bw - 1.0).max(0.5)),
            fmt_px(bh.max(if v > 0 { 1.0 } else { 0.0 })),
            esc(label),
            esc(&match y {
                Unit::Count => format!("{v} {unit}"),
                _ => format!("{} ({v} {unit})", y.fmt(v as f64)),
            })
        );
        if i % every == 0 {
            let _ = write!(
                s,
                "<text class=\"ax\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                fmt_px(x + bw / 2.0),
                h - 8.0,
                esc(label)
            );
        }
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let t = ticks(0.3, 0.9, 3);
        assert_eq!(t.len(), 3);
        for (a, b) in t.iter().zip([0.4, 0.6, 0.8]) {
            assert!((a - b).abs() < 1e-12, "{t:?}");
        }
        assert_eq!(si(1234.0), "1.2k");
        assert_eq!(num(2.0), "2");
        assert_eq!(num(0.125), "0.125");
        assert_eq!(num(1.0 / 3.0), "0.3333");
    }
}
