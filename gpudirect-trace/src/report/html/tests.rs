//! The page without a browser: self-contained, escaped, bounded in size.
//! `cargo test -p gpudirect-trace --lib report::html`.

use std::{path::Path, time::Instant};

use super::{esc, page, synthetic, SERIES_BUDGET};
use crate::report::{replay, series::MAX_BUCKETS, Window};

pub fn render(file: &Path, window: &Window) -> (String, serde_json::Value) {
    let mut r = replay(file, window).expect("replay");
    let secs = r.last_ns.saturating_sub(r.from_ns) as f64 / 1e9;
    let devices = r.analysis.agg.snapshot(secs, &window.devices);
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let html = page(&name, &r, &devices);
    let json = crate::report::json(&name, &r, &devices);
    (html, json)
}

/// Nothing outside the page: no scripts, styles, fonts or images by
/// address, no links but to its own anchors.
pub fn assert_self_contained(html: &str) {
    // The SVG namespace is a name, not an address.
    let rest = html.replace("http://www.w3.org/2000/svg", "");
    for banned in [
        "src=", "@import", "url(", "<link", "<iframe", "<object", "<embed", "http://", "https://",
    ] {
        assert!(
            !rest.contains(banned),
            "the page refers outside itself: {banned}"
        );
    }
    for (at, _) in html.match_indices("href=\"") {
        let rest = &html[at + 6..];
        assert!(
            rest.starts_with('#'),
            "a link out of the page: {}",
            &rest[..rest.len().min(60)]
        );
    }
    assert_eq!(html.matches("<script").count(), 1, "one inline script");
    let bad: Vec<char> = html
        .chars()
        .filter(|c| c.is_control() && !matches!(c, '\n' | '\t'))
        .collect();
    assert!(
        bad.is_empty(),
        "raw control characters in the page: {bad:?}"
    );
}

#[test]
fn escaping_neutralises_markup_controls_and_bidi_overrides() {
    assert_eq!(esc("<a&\"'>"), "&lt;a&amp;&quot;&#39;&gt;");
    assert_eq!(esc("x\u{1b}[31m"), "x&lt;U+001B&gt;[31m");
    assert_eq!(esc("\u{202e}evil"), "&lt;U+202E&gt;evil");
    assert_eq!(esc("a\nb\tc"), "a\nb\tc");
}

#[test]
fn the_rich_recording_gives_every_section_self_contained_and_escaped() {
    let (_dir, f) = synthetic::in_tempdir("rich.gdt", synthetic::rich);
    let (html, json) = render(&f, &Window::default());
    assert_self_contained(&html);
    for want in [
        "<section id=\"summary\"",
        "<h2 id=\"verdict\">",
        "<section id=\"incidents\"",
        "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\"",
        "id=\"timeline\"",
        "<table id=\"incident-table\"",
        "<section id=\"devices\"",
        "<section id=\"processes\"",
        "<table id=\"process-table\"",
        "<section id=\"losses\"",
        "id=\"checkpoints-chart\"",
        "id=\"probes\"",
        "GPU0 (bus order)",
        "DMA after unmap",
        "swiotlb bounces",
        "dma_map latency over time",
        "pid 4242",
    ] {
        assert!(html.contains(want), "missing {want}");
    }
    assert!(!html.contains(synthetic::HOSTILE) && !html.contains("<script>alert"));
    assert!(
        // The reader shows ESC as text (`\x1b`) before the page escapes.
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[31m&lt;U+202E&gt;evil")
    );
    let ids: Vec<u64> = json["incidents"]
        .as_array()
        .expect("incidents")
        .iter()
        .map(|i| i["id"].as_u64().expect("id"))
        .collect();
    assert!(ids.len() >= 8, "{ids:?}");
    for id in ids {
        assert_eq!(
            html.matches(&format!("<tr id=\"inc-{id}\"")).count(),
            1,
            "incident {id} once"
        );
    }
}

#[test]
fn windows_and_device_filters_carry_over_to_the_page() {
    let (_dir, f) = synthetic::in_tempdir("rich.gdt", synthetic::rich);
    let w = Window {
        from: Some(std::time::Duration::from_secs(2)),
        to: Some(std::time::Duration::from_secs(5)),
        devices: vec![synthetic::NIC.to_owned()],
    };
    let (html, json) = render(&f, &w);
    assert!(html.contains("2.000 s to 5.000 s of the recording (window --from 2s --to 5s)"));
    assert!(html.contains("only --device 0000:41:00.0"));
    assert_eq!(html.matches("<section class=\"device\"").count(), 1);
    assert!(
        html.contains("data-t0=\"2\" data-t1=\"5\""),
        "the time axes span the window"
    );
    let n = json["incidents"].as_array().expect("incidents").len();
    assert_eq!(
        n, 2,
        "the NIC's VT-d fault at 3.1 s and io_page_fault at 4 s"
    );
}

/// The size budget: a 10-minute recording at 100 k events/s (60 M events,
/// generated here with the real writer) gives a page under 2 MB, because
/// every series has at most `MAX_BUCKETS` buckets whose width doubles as
/// the recording grows (here 469 of 1.28 s), drawn with at most as many
/// points as `SERIES_BUDGET` allows for the page's lines together.
#[test]
fn a_ten_minute_recording_at_100k_events_per_second_gives_a_page_under_2_mb() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("long.gdt");
    let t = Instant::now();
    let n = synthetic::long(&f, 600, 100_000);
    let written = t.elapsed();
    assert!(n >= 60_000_000, "{n} events");
    let t = Instant::now();
    let mut r = replay(&f, &Window::default()).expect("replay");
    let replayed = t.elapsed();
    assert_eq!(r.series.width_ns, 1_280_000_000, "10 ms doubled 7 times");
    assert!(r.series.len <= MAX_BUCKETS, "{}", r.series.len);
    let devices = r.analysis.agg.snapshot(600.0, &[]);
    let html = page("long.gdt", &r, &devices);
    eprintln!(
        "{n} events: written in {written:?}, replayed in {replayed:?}; file {} MB; page {} bytes, {} buckets",
        std::fs::metadata(&f).map(|m| m.len() >> 20).unwrap_or(0),
        html.len(),
        r.series.len
    );
    assert!(html.len() < 2_000_000, "page is {} bytes", html.len());
    assert!(
        html.len() > SERIES_BUDGET / 4,
        "the charts are drawn: {} bytes",
        html.len()
    );
    assert_eq!(devices.len(), 4);
    assert_self_contained(&html);
}

/// Aggregate-only: no streamed mappings, so the rates and the outstanding
/// trend come from the checkpoints' kernel counters.
#[test]
fn aggregate_only_recordings_draw_from_the_kernel_counters() {
    let (_dir, f) = synthetic::in_tempdir("agg.gdt", synthetic::aggregate_only);
    let (html, json) = render(&f, &Window::default());
    assert_self_contained(&html);
    assert!(html.contains("aggregate-only (in-kernel counters"));
    assert!(
        html.contains("Map and unmap rate <small>(kernel counters between checkpoints)</small>")
    );
    assert!(html.contains("<figure class=\"tc\" id=\"dev-0-outstanding\""));
    // 5000 maps/s and 4000 unmaps/s in the second half; 10 000 maps minus
    // unmaps at the end.
    let fig = html.split("id=\"dev-0-rate\"").nth(1).expect("rate chart");
    let data = fig
        .split("data-v=\"")
        .nth(1)
        .and_then(|d| d.split('"').next())
        .expect("data");
    let unmaps: Vec<&str> = data.split(';').nth(1).expect("unmaps").split(',').collect();
    assert_eq!(unmaps.last(), Some(&"4000"), "{unmaps:?}");
    let out = html
        .split("id=\"dev-0-outstanding\"")
        .nth(1)
        .expect("outstanding");
    let v = out
        .split("data-v=\"")
        .nth(1)
        .and_then(|d| d.split('"').next())
        .expect("data");
    assert_eq!(v.split(',').rfind(|x| !x.is_empty()), Some("10000"));
    assert_eq!(json["incidents"].as_array().map(Vec::len), Some(1));
}

/// An incident storm: the ledger keeps the newest 4096 incidents, the page
/// lists each of them once and says how many were not kept. Rows cost
/// about 550 bytes each (2.3 MB here); marks beyond `LINKED_MARKS` a row
/// are drawn as one path, so the charts add little.
#[test]
fn an_incident_storm_is_listed_once_each_and_the_rest_counted() {
    use gpudirect_trace_common::{kind, Event};

    use crate::{
        decode::Record,
        tracefile::{tests::header, End, TraceWriter},
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("storm.gdt");
    let h = header();
    let t0 = h.start_ts_ns;
    let mut w = TraceWriter::new(std::fs::File::create(&f).expect("create"), &h).expect("header");
    for i in 0..5000u64 {
        let e = Event {
            kind: kind::IO_PAGE_FAULT,
            ts_ns: t0 + i * 1_000_000,
            addr: 0x10_0000 + i * 0x1000,
            aux: 1,
            ..Default::default()
        };
        w.push(&Record::Event(e), synthetic::NIC).expect("fault");
    }
    w.finish(&End {
        ts_ns: t0 + 5_000_000_000,
        ..Default::default()
    })
    .expect("finish");
    let (html, json) = render(&f, &Window::default());
    assert_self_contained(&html);
    assert_eq!(json["incidents"].as_array().map(Vec::len), Some(4096));
    assert_eq!(html.matches("<tr id=\"inc-").count(), 4096);
    // The summary and the incident section, in one sentence.
    assert_eq!(
        html.matches("904 earlier incidents were not kept (the report keeps the newest 4096)")
            .count(),
        2
    );
    eprintln!("storm page: {} bytes", html.len());
    assert!(html.len() < 3_000_000, "{} bytes", html.len());
}
