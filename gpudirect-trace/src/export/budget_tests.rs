//! `export` within the readers' memory budget (issue 30): open spans and
//! pseudonyms past it are counted, and no event is lost (a map whose span
//! is not kept is an instant). The budget is made small here; the real
//! binary under the real one is measured by the host test `hostile_budget`.

use gpudirect_trace_common::{kind, Event};

use super::{run, ExportOptions, Format};
use crate::{
    decode::Record,
    memory_budget::{self, Keeper},
    tracefile::{tests::header, End, TraceWriter},
};

#[test]
fn export_keeps_open_spans_and_pseudonyms_within_and_loses_no_event() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("spans.gdt");
    let h = header();
    let file = std::fs::File::create(&f).expect("create");
    let mut w = TraceWriter::new(std::io::BufWriter::new(file), &h).expect("header");
    let n = 30_000u64;
    for i in 0..n {
        let e = Event {
            kind: kind::DMA_MAP,
            ts_ns: h.start_ts_ns + i,
            addr: 0x1000 + (i << 12),
            phys: 0x1000 + (i << 12),
            size: 4096,
            pid: 7,
            ..Default::default()
        };
        w.push(&Record::Event(e), "0000:01:00.0").expect("push");
    }
    w.finish(&End::default()).expect("finish");
    let out = dir.path().join("out.json");
    memory_budget::set_test_reader_limit(Some(2 << 20));
    run(&ExportOptions::whole(&f, Format::Chrome, &out, true)).expect("export");
    memory_budget::set_test_reader_limit(None);
    assert!(memory_budget::dropped_by(Keeper::Spans) > 0);
    assert!(memory_budget::dropped_by(Keeper::Pseudonyms) > 0);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("out")).expect("json");
    let ev = doc["traceEvents"].as_array().expect("events");
    let spans = ev.iter().filter(|e| e["ph"] == "X").count() as u64;
    let instants = ev
        .iter()
        .filter(|e| e["ph"] == "i" && e["name"] == "dma_map")
        .count() as u64;
    assert!(spans > 0 && instants > 0, "{spans} {instants}");
    assert_eq!(spans + instants, n, "every map is a span or an instant");
    assert!(doc.to_string().contains("p-more"));
}
