//! `export`'s exact bytes (issue 31): one recording with every record shape
//! (plain, interrupt, stack id, scatterlist, Xid, process exit, fault,
//! loss, decoded fault with and without a time, stacks; a span closed, one
//! left open, an IOMMU-level map), exported as JSON lines and Chrome JSON,
//! plain and redacted, must give the files in tests/fixtures/export byte
//! for byte. Their consumers parse them, but a diff of two exports (and
//! anything that hashes them) sees every key moved or number reformatted.
//! `GDT_BLESS=1 cargo test -p gpudirect-trace export::golden` rewrites them.

use std::path::{Path, PathBuf};

use gpudirect_trace_common::{
    flags, kind, Event, SgEvent, XidEvent, AUX_STACK_SHIFT, SG_LENS, XID_MSG_LEN,
};

use super::{run, ExportOptions, Format};
use crate::{
    decode::Record,
    model::{misuse::StackFrames, Process},
    tracefile::{tests::header, End, Loss, PciDevice, TraceWriter},
};

const GPU: &str = "0000:41:00.0";
const NIC: &str = "0000:00:04.0";

fn recording(path: &Path) {
    let mut h = header();
    // The GPU has no IOMMU group (its DMA addresses are physical: redacted
    // too), the NIC has one; --stacks was on.
    h.devices = vec![
        PciDevice {
            bus_id: GPU.into(),
            ..Default::default()
        },
        PciDevice {
            bus_id: NIC.into(),
            iommu_group: Some(7),
            ..Default::default()
        },
    ];
    h.checks = Some(crate::model::misuse::CheckSetup {
        kernel_image: Vec::new(),
        stacks: true,
    });
    let t0 = h.start_ts_ns;
    let file = std::fs::File::create(path).expect("create");
    let mut w = TraceWriter::new(std::io::BufWriter::new(file), &h).expect("header");
    let ev = |k: u16, dt: u64, addr: u64, phys: u64, size: u64| Event {
        kind: k,
        ts_ns: t0 + dt,
        addr,
        phys,
        size,
        pid: 42,
        tid: 43,
        dir: 1,
        ..Default::default()
    };
    // Mapped (with a stack id), unmapped: a span.
    let mut map = ev(
        kind::DMA_MAP,
        1_234_567_891,
        0xffff_0000,
        0x1_2345_6000,
        8192,
    );
    map.aux = (5 + 1) << AUX_STACK_SHIFT | 3; // stack 5, 3 in the low half
    w.push(&Record::Event(map), NIC).expect("map");
    // Before the start (t_s 0), in interrupt context, the same page: one
    // pseudonym.
    let mut irq = ev(kind::DMA_MAP, 0, 0x1_2345_6000, 0x1_2345_6000, 4096);
    irq.ts_ns = t0 - 5;
    irq.flags = flags::IN_INTERRUPT;
    w.push(&Record::Event(irq), GPU).expect("irq map");
    w.push(
        &Record::Event(ev(kind::DMA_UNMAP, 2_000_000_000, 0xffff_0000, 0, 8192)),
        NIC,
    )
    .expect("unmap");
    // A process exit (its name packed in addr and phys, its cgroup in
    // size), recorded under dev 0's name: a name, a cgroup id and a track
    // of its own in the export.
    let mut exit = ev(kind::PROC_EXIT, 2_100_000_000, 0, 0, 77);
    exit.addr = u64::from_le_bytes(*b"dd\0\0\0\0\0\0");
    w.push(&Record::Event(exit), crate::aggregate::UNATTRIBUTED)
        .expect("exit");
    // A scatterlist never unmapped: a span to the end.
    let mut sg = SgEvent {
        event: ev(
            kind::DMA_MAP_SG,
            2_500_000_000,
            0xfe00_0000,
            0x9_0000_0000,
            12288,
        ),
        nents: 3,
        ents: 2,
        n_lens: 2,
        ..Default::default()
    };
    sg.lens[0] = 4096;
    sg.lens[1] = 8192;
    sg.lens[SG_LENS - 1] = 77; // past n_lens: not shown
    w.push(&Record::Sg(sg), GPU).expect("sg");
    // An IOMMU-level map: its addr is an IOVA, kept under --redact.
    w.push(
        &Record::Event(ev(
            kind::IOMMU_MAP,
            2_600_000_000,
            0xfe00_0000,
            0x9_0000_0000,
            4096,
        )),
        GPU,
    )
    .expect("iommu map");
    let mut xid = XidEvent {
        event: ev(kind::NV_XID, 3_000_000_000, 0, 0, 0),
        xid: 79,
        msg_truncated: 1,
        msg: [0; XID_MSG_LEN],
    };
    xid.msg[..21].copy_from_slice(b"GPU has fallen \"off\"\n");
    w.push(&Record::Xid(xid), GPU).expect("xid");
    let mut fault = ev(kind::IO_PAGE_FAULT, 3_100_000_000, 0xdead_0000, 0, 0);
    fault.aux = 1;
    w.push(&Record::Event(fault), GPU).expect("fault");
    w.loss(&Loss {
        ts_ns: t0 + 3_500_000_000,
        lost: 42,
        total: 50,
    })
    .expect("loss");
    let mut vtd = crate::faults::parse_line(
        "DMAR: [DMA Write NO_PASID] Request device [41:00.0] fault addr 0xbeef000 [fault reason 0x05] PTE Write access is not set",
    )
    .expect("VT-d line");
    vtd.timestamp_ns = Some(t0 + 4_000_000_001);
    vtd.process = Some(Process::reported(1130, Some("xid31".into())));
    w.log_fault(&vtd).expect("fault with a time");
    vtd.timestamp_ns = None;
    vtd.process = None;
    w.log_fault(&vtd).expect("fault without");
    w.stacks(&[StackFrames {
        id: 5,
        frames: vec![
            "dma_map_page_attrs+0x1c [kernel]".into(),
            "0xffffffffc0001234".into(),
        ],
    }])
    .expect("stacks");
    w.push(
        &Record::Event(ev(kind::DMA_UNMAP, 4_500_000_000, 0x1_2345_6000, 0, 4096)),
        GPU,
    )
    .expect("irq unmap");
    w.finish(&End {
        ts_ns: t0 + 5_000_000_000,
        ..Default::default()
    })
    .expect("finish");
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/export")
        .join(name)
}

fn same_bytes(format: Format, redact: bool, golden: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("shapes.gdt");
    recording(&f);
    let out = dir.path().join("out");
    run(&ExportOptions::whole(&f, format, &out, redact)).expect("export");
    let got = std::fs::read_to_string(&out).expect("output");
    keys_sorted(&got, format);
    let path = fixture(golden);
    if std::env::var_os("GDT_BLESS").is_some() {
        std::fs::write(&path, &got).expect("bless");
        return;
    }
    let want = std::fs::read_to_string(&path).expect("golden export");
    // Line by line first: a differing line says more than two whole files.
    for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
        assert_eq!(g, w, "{golden}: line {}", i + 1);
    }
    assert_eq!(got, want, "{golden}");
}

/// Every object's keys in alphabetical order, as the records' maps wrote
/// them (export/records.rs): a field added to a record out of order would
/// otherwise be blessed into the golden files unnoticed. A `Value` sorts
/// its keys, so an export that it writes back unchanged had them sorted.
fn keys_sorted(got: &str, format: Format) {
    for line in got.lines() {
        // Chrome's: the document's head (closed here), one trace event a
        // line, its tail.
        let doc = match format {
            Format::Chrome if line.ends_with('[') => format!("{line}]}}"),
            Format::Chrome if line == "]}" => continue,
            Format::Chrome => line.trim_end_matches(',').to_owned(),
            _ => line.to_owned(),
        };
        let v: serde_json::Value = serde_json::from_str(&doc).expect("JSON");
        assert_eq!(v.to_string(), doc, "keys out of order");
    }
}

#[test]
fn golden_jsonl() {
    same_bytes(Format::Jsonl, false, "shapes.jsonl");
}

#[test]
fn golden_jsonl_redacted() {
    same_bytes(Format::Jsonl, true, "shapes-redact.jsonl");
}

#[test]
fn golden_chrome() {
    same_bytes(Format::Chrome, false, "shapes-chrome.json");
}

#[test]
fn golden_chrome_redacted() {
    same_bytes(Format::Chrome, true, "shapes-chrome-redact.json");
}

/// `export FILE --format jsonl -o OUT`, nothing else asked.
fn jsonl_of(file: &Path, out: &Path) -> ExportOptions {
    ExportOptions::whole(file, Format::Jsonl, out, false)
}

/// `--from 2s --to 3.2s`: exactly the lines of the whole export whose time
/// is in [2 s, 3.2 s) of the recording (events, the loss, faults), and
/// those without one (a fault without a time, the stacks); `--to` not
/// after `--from` is refused before any output exists.
#[test]
fn a_window_keeps_what_happened_inside_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("shapes.gdt");
    recording(&f);
    let export = |from: Option<u64>, to: Option<u64>, out: &Path| {
        run(&ExportOptions {
            from: from.map(std::time::Duration::from_millis),
            to: to.map(std::time::Duration::from_millis),
            ..jsonl_of(&f, out)
        })
    };
    let (all, part) = (dir.path().join("all"), dir.path().join("part"));
    export(None, None, &all).expect("whole");
    export(Some(2_000), Some(3_200), &part).expect("window");
    let read = |p: &Path| std::fs::read_to_string(p).expect("output");
    let want: Vec<String> = read(&all)
        .lines()
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON");
            // Every record's time is its `t_s` (null: a fault without one).
            match v["t_s"].as_f64() {
                Some(t) => (2.0..3.2).contains(&t),
                None => true,
            }
        })
        .map(str::to_owned)
        .collect();
    let got: Vec<String> = read(&part).lines().map(str::to_owned).collect();
    assert_eq!(got, want);
    assert!(
        got.len() >= 4 && got.len() < read(&all).lines().count(),
        "{got:#?}"
    );
    let refused = dir.path().join("refused");
    let e = export(Some(3_000), Some(2_000), &refused).expect_err("to before from");
    assert!(
        e.to_string().contains("--to must be later than --from"),
        "{e}"
    );
    assert!(!refused.exists(), "no output for a refused window");
}

/// `--device 0000:41:00.0`: exactly the whole export's lines of that
/// device (its events and decoded faults) and the recording's own (the
/// loss, the stacks); the other device's events and the processes' record
/// are left out. A device the recording never saw leaves only those.
#[test]
fn a_device_filter_keeps_that_devices_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("shapes.gdt");
    recording(&f);
    let export = |wanted: &[&str], out: &Path| {
        run(&ExportOptions {
            devices: super::DeviceFilter {
                wanted: wanted.iter().map(|w| w.to_string()).collect(),
                typed: Vec::new(),
            },
            ..jsonl_of(&f, out)
        })
        .expect("export")
    };
    let read = |p: &Path| std::fs::read_to_string(p).expect("output");
    let (all, gpu, none) = (
        dir.path().join("all"),
        dir.path().join("gpu"),
        dir.path().join("none"),
    );
    export(&[], &all);
    export(&["0000:41:00.0"], &gpu);
    export(&["0000:99:00.0"], &none);
    let of = |keep: &dyn Fn(&serde_json::Value) -> bool| -> Vec<String> {
        read(&all)
            .lines()
            .filter(|l| keep(&serde_json::from_str(l).expect("JSON")))
            .map(str::to_owned)
            .collect()
    };
    let recordings_own =
        |v: &serde_json::Value| matches!(v["kind"].as_str(), Some("lost_events" | "stacks"));
    let want = of(&|v| v["device"] == "0000:41:00.0" || recordings_own(v));
    let got: Vec<String> = read(&gpu).lines().map(str::to_owned).collect();
    assert_eq!(got, want);
    assert!(got.iter().any(|l| l.contains("decoded_fault")), "{got:#?}");
    assert!(!got.iter().any(|l| l.contains("0000:00:04.0")), "{got:#?}");
    let got: Vec<String> = read(&none).lines().map(str::to_owned).collect();
    assert_eq!(got, of(&recordings_own));
}
