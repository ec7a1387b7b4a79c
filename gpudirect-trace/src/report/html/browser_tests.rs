//! The page in a real browser: Debian's headless Chromium (installed by
//! `cargo xtask bootstrap`; missing, these tests fail) loads it from a file
//! with no network, and the tests read its DOM, its console and network
//! log, drive it with real mouse and keyboard events and check a screenshot.
//! On the committed 2x H200 recording, on the format-1.0 file (a VT-d fault
//! after an unmap, an Xid, an io_page_fault) and on a synthetic recording
//! with everything the page shows.
//!
//! `GDT_SCREENSHOT_DIR=dir` keeps the pages and their screenshots there;
//! README's docs/report-h200.png is `report-h200.png` of
//! `GDT_SCREENSHOT_DIR=/tmp/shots cargo test -p gpudirect-trace --lib
//! report::html::browser_tests::h200`.

use std::{
    path::{Path, PathBuf},
    sync::{Mutex, MutexGuard},
};

use serde_json::Value;

use super::{
    cdp::{ink, near, Browser, Image},
    synthetic,
    tests::{assert_self_contained, render},
};
use crate::report::Window;

/// One Chromium at a time: the machines running these have 2 cores.
static BROWSER: Mutex<()> = Mutex::new(());
const WIDTH: u32 = 1280;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(rel)
}

struct Loaded {
    b: Browser,
    json: Value,
    _dir: tempfile::TempDir,
    page: PathBuf,
    // Last, so that the browser has quit before the next test starts one.
    _one: MutexGuard<'static, ()>,
}

/// `file`'s page in a browser, checked for what every page must show
/// (`common`); the browser lock is taken here, so that no test can start a
/// second Chromium beside it.
fn load(file: &Path, scripts: bool, name: &str) -> (Loaded, Image) {
    let one = BROWSER.lock().unwrap_or_else(|e| e.into_inner());
    let (html, json) = render(file, &Window::default());
    assert_self_contained(&html);
    let dir = tempfile::tempdir().expect("tempdir");
    let page = dir.path().join("report.html");
    std::fs::write(&page, &html).expect("write the page");
    let mut b = Browser::launch(WIDTH, 900, scripts);
    b.open(&page);
    let mut l = Loaded {
        b,
        json,
        _dir: dir,
        page,
        _one: one,
    };
    let img = common(&mut l, name);
    (l, img)
}

/// The rectangle of the element `sel`, in page coordinates.
fn rect(b: &mut Browser, sel: &str) -> [f64; 4] {
    let v = b.eval(&format!(
        "(() => {{ const e = document.querySelector({sel:?}); if (!e) return null; \
         const r = e.getBoundingClientRect(); return [r.left + scrollX, r.top + scrollY, r.width, r.height]; }})()"
    ));
    let a = v.as_array().unwrap_or_else(|| panic!("no element {sel}"));
    let f = |i: usize| a[i].as_f64().expect("number");
    [f(0), f(1), f(2), f(3)]
}

/// What every page must show, whatever the recording.
fn common(l: &mut Loaded, name: &str) -> Image {
    let b = &mut l.b;
    let problems = b.problems();
    assert!(problems.is_empty(), "console errors: {problems:#?}");
    let url = format!("file://{}", l.page.display());
    let other: Vec<String> = b.requests().into_iter().filter(|u| *u != url).collect();
    assert!(other.is_empty(), "the page fetched {other:?}");
    for id in [
        "summary",
        "verdict",
        "incidents",
        "devices",
        "processes",
        "losses",
        "probes",
    ] {
        let r = rect(b, &format!("#{id}"));
        assert!(r[3] > 15.0, "section #{id} does not render: {r:?}");
    }
    // One panel per device of `report --json`, in its order.
    let want: Vec<&str> = l.json["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .filter_map(|d| d["device"].as_str())
        .collect();
    let got = b.eval("[...document.querySelectorAll('section.device')].map(s => s.dataset.device)");
    assert_eq!(got, serde_json::json!(want), "device panels");
    // The incidents table holds exactly the incidents of `report --json`:
    // same ids, categories and times, each once.
    let rows = b.eval(
        "[...document.querySelectorAll('#incident-table tbody tr')].map(r => [r.id, r.dataset.cat, +r.cells[1].dataset.k])",
    );
    let triple = |v: &Value| {
        (
            v[0].as_str().unwrap_or("").to_owned(),
            v[1].as_str().unwrap_or("").to_owned(),
            v[2].as_f64().unwrap_or(f64::NAN),
        )
    };
    let rows: Vec<_> = rows.as_array().expect("rows").iter().map(triple).collect();
    let want: Vec<_> = l.json["incidents"]
        .as_array()
        .expect("incidents")
        .iter()
        .map(|i| {
            triple(&serde_json::json!([
                format!("inc-{}", i["id"]),
                i["category"],
                i["t_s"]
            ]))
        })
        .collect();
    assert_eq!(rows, want, "incident rows");
    for i in l.json["incidents"].as_array().expect("incidents") {
        let Some(raw) = i["fault"]["raw"].as_str() else {
            continue;
        };
        let probe: String = raw.chars().take(50).collect();
        let n = b.eval(&format!(
            "[...document.querySelectorAll('#incident-table tbody tr')].filter(r => r.textContent.includes({probe:?})).length"
        ));
        assert_eq!(n, 1, "{} {probe:?} appears once", i["category"]);
    }
    // The verdict counts every category of the table.
    let verdict = b.eval("document.getElementById('verdict').nextElementSibling.textContent");
    let cats: std::collections::BTreeMap<String, usize> = l.json["incidents"]
        .as_array()
        .expect("incidents")
        .iter()
        .fold(Default::default(), |mut m, i| {
            *m.entry(i["category"].as_str().unwrap_or("").to_owned())
                .or_default() += 1;
            m
        });
    for (c, n) in &cats {
        let text = verdict.as_str().unwrap_or("");
        assert!(
            text.contains(&format!("{n} ")),
            "verdict lacks {n} {c}: {text}"
        );
    }
    // The screenshot: not blank, every section and each device's first
    // chart drawn.
    let h = b
        .eval("document.documentElement.scrollHeight")
        .as_f64()
        .expect("height")
        .min(20000.0);
    let png = b.screenshot(f64::from(WIDTH), h);
    if let Some(dir) = std::env::var_os("GDT_SCREENSHOT_DIR") {
        let p = Path::new(&dir).join(format!("{name}-full.png"));
        std::fs::write(&p, &png).expect("keep the screenshot");
        std::fs::copy(&l.page, p.with_file_name(format!("{name}.html"))).expect("keep the page");
        eprintln!("screenshot: {}", p.display());
    }
    let img = Image::decode(&png);
    assert_eq!(img.width, WIDTH as usize);
    let all = img.count([0.0, 0.0, img.width as f64, img.height as f64], ink);
    assert!(
        all * 50 > img.width * img.height,
        "blank: {all} drawn pixels of {}x{}",
        img.width,
        img.height
    );
    for id in ["summary", "devices", "losses"] {
        let r = rect(b, &format!("#{id}"));
        let n = img.count(r, ink);
        assert!(n > 2000, "#{id}: {n} drawn pixels in {r:?}");
    }
    for (k, _) in want_devices(&l.json).iter().enumerate() {
        let sel = format!("#dev-{k} svg.plot > rect.bg");
        let r = rect(b, &sel);
        assert!(r[2] > 500.0, "{sel}: {r:?}");
        let bg = img.count(r, near("#fcfcfc", 2));
        assert!(bg > 1000, "{sel}: plot background drawn ({bg} px)");
    }
    img
}

fn want_devices(json: &Value) -> Vec<String> {
    json["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .filter_map(|d| d["device"].as_str().map(str::to_owned))
        .collect()
}

/// Pixels of the DMA-API maps/s line (the first series colour) in the
/// device's rate chart.
fn rate_line_pixels(b: &mut Browser, img: &Image, dev: usize) -> usize {
    let r = rect(b, &format!("#dev-{dev}-rate svg.plot > rect.bg"));
    img.count(r, near("#3465a4", 40))
}

#[test]
fn h200_recording_renders_every_section() {
    let f = fixture("gpu-host-h200x2-trace/session2/record/gpu-h200x2.gdt");
    let (mut l, img) = load(&f, true, "report-h200");
    let b = &mut l.b;
    for dev in 0..2 {
        let n = rate_line_pixels(b, &img, dev);
        assert!(n > 30, "GPU {dev}: map rate line drawn ({n} px)");
    }
    let gpus =
        b.eval("[...document.querySelectorAll('#device-table .gpu')].map(e => e.textContent)");
    assert_eq!(gpus, serde_json::json!(["GPU0", "GPU1"]));
    let verdict = b.eval("document.querySelector('ul.verdict').textContent");
    assert!(
        verdict.as_str().unwrap_or("").contains("No IOMMU faults"),
        "{verdict}"
    );
    let procs = b.eval("document.querySelectorAll('#process-table tbody tr').length");
    assert_eq!(procs, 2, "pid 700 on both GPUs");
    let probes = b.eval("document.getElementById('probes').nextElementSibling.textContent");
    assert_eq!(
        probes,
        "46 probes in the header: 17 attached, 29 unavailable."
    );
    if let Some(dir) = std::env::var_os("GDT_SCREENSHOT_DIR") {
        // The README's picture: the summary and the first GPU's panel.
        let top = rect(b, "#dev-0-outstanding-bytes")[1] + 130.0;
        let png = b.screenshot(f64::from(WIDTH), top);
        std::fs::write(Path::new(&dir).join("report-h200.png"), png).expect("keep the screenshot");
    }
}

#[test]
fn format_1_0_recording_shows_the_fault_after_unmap_the_xid_and_the_page_fault_once_each() {
    let f = fixture("format-1.0/dma-after-unmap.gdt");
    let (mut l, img) = load(&f, true, "report-format-1.0");
    let b = &mut l.b;
    let cats = b
        .eval("[...document.querySelectorAll('#incident-table tbody tr')].map(r => r.dataset.cat)");
    assert_eq!(
        cats,
        serde_json::json!(["iommu-fault", "xid", "iommu-fault"])
    );
    let state = b.eval("document.querySelector('#inc-1 .ms').textContent");
    assert!(
        state.as_str().unwrap_or("").contains("DMA after unmap"),
        "{state}"
    );
    let xid = b.eval("document.querySelector('#inc-2').textContent");
    assert!(
        xid.as_str().unwrap_or("").contains("pid 619 (xid)"),
        "{xid}"
    );
    // The timeline marks the two faults in red and the Xid in orange.
    let r = rect(b, "#timeline svg.plot > rect.bg");
    assert!(img.count(r, near("#cc0000", 30)) >= 10, "fault marks");
    assert!(img.count(r, near("#ce5c00", 30)) >= 5, "Xid mark");
    let losses = b.eval("document.querySelectorAll('#loss-table tbody tr').length");
    assert_eq!(losses, 1);
}

#[test]
fn synthetic_recording_renders_and_its_page_responds_to_hover_zoom_sort_and_filter() {
    let (_recording, f) = synthetic::in_tempdir("rich.gdt", synthetic::rich);
    let (mut l, img) = load(&f, true, "report-synthetic");
    let n = l.json["incidents"].as_array().map_or(0, Vec::len);
    let b = &mut l.b;
    let xids = b.eval("document.querySelectorAll('#incident-table tr.c-xid').length");
    assert_eq!(
        xids, 1,
        "the Xid's tracepoint and log line are one incident"
    );
    let hostile = b.eval("document.body.innerHTML.includes('<script>alert')");
    assert_eq!(hostile, false, "the crafted log line stays text");
    let nvme = want_devices(&l.json)
        .iter()
        .position(|d| d == synthetic::NVME)
        .expect("the NVMe panel");
    assert!(rate_line_pixels(b, &img, nvme) > 30);
    for chart in [
        "rate",
        "outstanding",
        "outstanding-bytes",
        "lat-dma_map",
        "lat-iotlb_sync",
    ] {
        rect(
            b,
            &format!("#dev-{nvme} [id$='-{chart}'] svg.plot > rect.bg"),
        );
    }
    let nic = want_devices(&l.json)
        .iter()
        .position(|d| d == synthetic::NIC)
        .expect("the NIC panel");
    rect(b, &format!("#dev-{nic}-bounces svg.plot > rect.bg"));

    // Hover: the tooltip tells the exact values of the chart's bucket.
    let sel = format!("#dev-{nvme}-rate svg.plot > rect.bg");
    b.eval(&format!(
        "document.querySelector({sel:?}).scrollIntoView({{block: 'center'}})"
    ));
    let v = b.eval(&format!("(() => {{ const r = document.querySelector({sel:?}).getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; }})()"));
    let r: Vec<f64> = v
        .as_array()
        .expect("rect")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    let (x, y) = (r[0] + r[2] * 0.3, r[1] + r[3] * 0.5);
    b.mouse("mouseMoved", x, y, 0);
    let tip = b.eval("(() => { const t = document.getElementById('tip'); return t.hidden ? '' : t.textContent; })()");
    let tip = tip.as_str().unwrap_or("");
    assert!(
        tip.contains("maps/s (DMA-API): ") && tip.contains("/s"),
        "tooltip: {tip:?}"
    );

    // Zoom: drag across 30%..60% of one chart; every time axis follows.
    b.mouse("mousePressed", x, y, 1);
    b.mouse("mouseMoved", r[0] + r[2] * 0.6, y, 1);
    b.mouse("mouseReleased", r[0] + r[2] * 0.6, y, 0);
    let boxes = b.eval("[...new Set([...document.querySelectorAll('svg.plot')].map(p => p.getAttribute('viewBox').split(' ').slice(0, 3).map(v => (+v).toFixed(1)).join(' ')))]");
    let boxes = boxes.as_array().expect("viewBoxes");
    assert_eq!(boxes.len(), 1, "one zoom for all: {boxes:?}");
    let vb: Vec<f64> = boxes[0]
        .as_str()
        .unwrap_or("")
        .split(' ')
        .filter_map(|v| v.parse().ok())
        .collect();
    let pw = super::svg::PW;
    assert!(
        (vb[0] - 0.3 * pw).abs() < 3.0 && (vb[2] - 0.3 * pw).abs() < 3.0,
        "{vb:?}"
    );
    let labels =
        b.eval("[...document.querySelector('.xax').children].map(t => parseFloat(t.textContent))");
    let labels: Vec<f64> = labels
        .as_array()
        .expect("labels")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    assert!(
        labels.len() >= 4 && labels.iter().all(|t| (2.9..=6.1).contains(t)),
        "the labels follow the zoom to 3 s..6 s: {labels:?}"
    );
    let zoom = b.eval("document.getElementById('zoom').hidden");
    assert_eq!(zoom, false);
    b.eval("document.getElementById('zoom-reset').click()");
    let vb = b.eval("document.querySelector('svg.plot').getAttribute('viewBox')");
    assert!(vb.as_str().unwrap_or("").starts_with("0 0 "), "reset: {vb}");

    // Sort by time, newest first: the headers are real buttons.
    b.eval("document.querySelector('#incident-table th:nth-child(2)').click()");
    b.eval("document.querySelector('#incident-table th:nth-child(2)').click()");
    let times = b.eval("[...document.querySelectorAll('#incident-table tbody tr')].map(r => +r.cells[1].dataset.k)");
    let t: Vec<f64> = times
        .as_array()
        .expect("times")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    assert_eq!(t.len(), n);
    assert!(t.windows(2).all(|w| w[0] >= w[1]), "descending: {t:?}");

    // Filter: typed text, then a category from the verdict's link.
    b.eval("document.getElementById('inc-q').focus()");
    b.call("Input.insertText", serde_json::json!({"text": "trainer"}));
    let shown = b.eval("[...document.querySelectorAll('#incident-table tbody tr')].filter(r => !r.hidden).map(r => r.dataset.cat)");
    assert_eq!(
        shown,
        serde_json::json!(["xid"]),
        "only the Xid names the trainer"
    );
    let count = b.eval("document.getElementById('inc-count').textContent");
    assert_eq!(count, format!("1 of {n} incidents shown").as_str());
    b.eval("document.querySelector('a[data-cat=\"iommu-fault\"]').click()");
    let shown = b.eval("[...document.querySelectorAll('#incident-table tbody tr')].filter(r => !r.hidden).map(r => r.dataset.cat)");
    let shown: Vec<&str> = shown
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(shown, ["iommu-fault"; 3], "the NIC's three IOMMU faults");
    // A link to a hidden row shows every row again.
    b.eval("location.hash = '#inc-1'");
    let hidden = b.eval("document.querySelectorAll('#incident-table tbody tr[hidden]').length");
    assert_eq!(hidden, 0);
    let problems = b.problems();
    assert!(
        problems.is_empty(),
        "console errors while interacting: {problems:#?}"
    );
}

/// A ticket viewer may block scripts: the page still has every section,
/// every incident and every chart, and the script-only filters stay hidden.
#[test]
fn synthetic_recording_reads_without_scripts() {
    let (_recording, f) = synthetic::in_tempdir("rich.gdt", synthetic::rich);
    let (mut l, img) = load(&f, false, "report-synthetic-noscript");
    let b = &mut l.b;
    let filters = b.eval("document.getElementById('inc-filters').getBoundingClientRect().height");
    assert_eq!(filters, 0, "filters need the script");
    let tip = b.eval("document.getElementById('tip')");
    assert_eq!(tip, Value::Null, "the script did not run");
    let r = rect(b, "#timeline svg.plot > rect.bg");
    assert!(
        img.count(r, near("#cc0000", 30)) >= 10,
        "fault marks drawn without a script"
    );
}

/// Aggregate-only: the rates and the outstanding trend come from the
/// checkpoints' kernel counters, and the page says so.
#[test]
fn aggregate_only_recording_renders_from_the_kernel_counters() {
    let (_recording, f) = synthetic::in_tempdir("agg.gdt", synthetic::aggregate_only);
    let (mut l, img) = load(&f, true, "report-aggregate-only");
    let b = &mut l.b;
    assert!(
        rate_line_pixels(b, &img, 0) > 30,
        "maps/s from the counters"
    );
    let title = b.eval("document.querySelector('#dev-0 h4').textContent");
    assert_eq!(
        title,
        "Map and unmap rate (kernel counters between checkpoints)"
    );
}
