//! `report --html`: the page people attach to a bug report. One
//! self-contained file: inline CSS, inline SVG drawn here and a small inline
//! script (hover values, one zoom for every time axis, sorting and
//! filtering the incidents); nothing is fetched. Everything is in the HTML
//! itself, so the page reads the same where a ticket viewer blocks scripts.
//!
//! Sections: summary and verdict (`summary`), incidents (`incidents`),
//! per-device panels (`device`), per-process view (`process`), losses,
//! self-metrics and probes (`losses`). The time series come from the
//! replay (`report::series`), drawn at a resolution chosen here so that the
//! page stays small (`coarsening`). Every string from the trace goes
//! through `esc`.

mod device;
mod incidents;
mod losses;
mod process;
mod summary;
pub(crate) mod svg;

#[cfg(test)]
mod browser_tests;
#[cfg(test)]
mod cdp;
#[cfg(test)]
pub(crate) mod synthetic;
#[cfg(test)]
mod tests;

use std::{collections::BTreeMap, fmt::Write as _};

use self::svg::Axis;
use super::{series::MAX_BUCKETS, Replay};
use crate::{aggregate::DeviceSnapshot, model::Incident};

const CSS: &str = include_str!("html/page.css");
const SCRIPT: &str = include_str!("html/page.js");

/// Bytes the time charts may take together (paths and hover data); the
/// page picks the number of points per series from it (`coarsening`).
pub const SERIES_BUDGET: usize = 1_200_000;
/// What one point of one line costs, about: "L123.4 56.7" in the path and
/// "12345," in the hover data.
const POINT_BYTES: usize = 20;
/// Fewest points a series is drawn with, however many series there are.
const MIN_POINTS: usize = 32;

/// Text safe inside HTML and SVG elements and attributes: markup
/// characters become entities; control characters (but newline and tab)
/// and bidirectional overrides become visible `<U+XXXX>` text, so a
/// crafted log line can neither break the page nor disguise itself.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            '\n' | '\t' => o.push(c),
            c if c.is_control()
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                let _ = write!(o, "&lt;U+{:04X}&gt;", c as u32);
            }
            c => o.push(c),
        }
    }
    o
}

/// What every section needs.
pub(crate) struct Ctx<'a> {
    pub path: &'a str,
    pub r: &'a Replay,
    pub devices: &'a [DeviceSnapshot],
    pub incidents: Vec<&'a Incident>,
    pub axis: Axis,
    /// Buckets of `r.series` merged into one point.
    pub factor: usize,
    /// Anchor of each device's panel.
    pub anchors: BTreeMap<String, String>,
    /// `GPU0`, `GPU1`, ... by bus order among the NVIDIA GPUs of the header.
    pub gpus: BTreeMap<String, String>,
}

impl Ctx<'_> {
    /// The device, linked to its panel, with its GPU index where it is one.
    pub fn device_link(&self, device: &str) -> String {
        let gpu = self
            .gpus
            .get(device)
            .map(|g| format!(" <span class=\"gpu\">{g}</span>"))
            .unwrap_or_default();
        match self.anchors.get(device) {
            Some(a) => format!("<a href=\"#{a}\">{}</a>{gpu}", esc(device)),
            None => format!("{}{gpu}", esc(device)),
        }
    }

    /// Seconds on the trace clock.
    pub fn t(&self, ts_ns: u64) -> f64 {
        self.r.seconds(ts_ns)
    }
}

/// Each GPU as its users know it: the recording's GPU identities (index,
/// name, UUID) where the header has them; for older files, bus order among
/// the GPUs the NVIDIA driver manages (what NVML numbers without NVML).
fn gpu_labels(r: &Replay) -> BTreeMap<String, String> {
    if !r.header.gpus.is_empty() {
        return r
            .header
            .gpus
            .iter()
            .map(|g| (g.bus_id.clone(), g.short()))
            .collect();
    }
    let mut gpus: Vec<&str> = r
        .header
        .devices
        .iter()
        .filter(|d| {
            d.vendor.eq_ignore_ascii_case("0x10de")
                && d.class.starts_with("0x03")
                && d.driver.as_deref() == Some("nvidia")
        })
        .map(|d| d.bus_id.as_str())
        .collect();
    gpus.sort_unstable();
    gpus.into_iter()
        .enumerate()
        .map(|(i, b)| (b.to_owned(), format!("GPU{i}")))
        .collect()
}

/// How many buckets make one drawn point: the smallest power of two that
/// keeps every line of the page within `SERIES_BUDGET`.
pub fn coarsening(len: usize, lines: usize) -> usize {
    let points = (SERIES_BUDGET / (POINT_BYTES * lines.max(1))).max(MIN_POINTS);
    let mut f = 1;
    while len.div_ceil(f) > points.min(MAX_BUCKETS) {
        f *= 2;
    }
    f
}

pub fn page(path: &str, r: &Replay, devices: &[DeviceSnapshot]) -> String {
    let incidents: Vec<&Incident> = r.incidents().collect();
    let anchors = devices
        .iter()
        .enumerate()
        .map(|(i, d)| (d.device.clone(), format!("dev-{i}")))
        .collect();
    let t0 = r.seconds(r.from_ns);
    let axis = Axis {
        t0,
        t1: r.seconds(r.last_ns).max(t0 + 1e-3),
    };
    let lines = device::lines(r, devices) + losses::LINES;
    let ctx = Ctx {
        path,
        r,
        devices,
        incidents,
        axis,
        factor: coarsening(r.series.len, lines),
        anchors,
        gpus: gpu_labels(r),
    };
    let mut s = String::with_capacity(256 << 10);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>gpudirect-trace report: {}</title><style>{CSS}</style></head>\
         <body data-t0=\"{}\" data-t1=\"{}\" data-pw=\"{}\">",
        esc(&r.header.hostname),
        svg::num(axis.t0),
        svg::num(axis.t1),
        svg::PW
    );
    s.push_str(
        "<nav><b>gpudirect-trace report</b> <a href=\"#summary\">Summary</a>\
         <a href=\"#incidents\">Incidents</a><a href=\"#devices\">Devices</a>\
         <a href=\"#processes\">Processes</a><a href=\"#losses\">Losses and probes</a>\
         <span id=\"zoom\" hidden><span id=\"zoom-range\"></span> <button type=\"button\" id=\"zoom-reset\">reset zoom</button></span></nav><main>",
    );
    s.push_str(&summary::section(&ctx));
    s.push_str(&incidents::section(&ctx));
    s.push_str(&device::section(&ctx));
    s.push_str(&process::section(&ctx));
    s.push_str(&losses::section(&ctx));
    let _ = writeln!(
        s,
        "</main><footer><p>Time is seconds since the recording started (the trace clock; \
         CLOCK_MONOTONIC of {}). Time charts draw {} buckets of {} each{}: sums per bucket for \
         counts, minimum/maximum/last for levels, quarter-octave histograms for latencies. \
         With scripts, hover a chart for exact values and drag across any time chart to zoom \
         all of them (double-click to reset).</p></footer><script>{SCRIPT}</script></body></html>",
        esc(&r.header.hostname),
        r.series.len.div_ceil(ctx.factor),
        crate::output::ns(r.series.width_ns * ctx.factor as u64),
        if ctx.factor > 1 {
            format!(
                " (recorded at {}, merged to fit the page)",
                crate::output::ns(r.series.width_ns)
            )
        } else {
            String::new()
        }
    );
    s
}
