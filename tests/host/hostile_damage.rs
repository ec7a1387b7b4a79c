//! Hostile and damaged input, round 2 (issue 30), what the reader says:
//! whole blocks removed, repeated or swapped (block numbers, format 1.3),
//! a `--from` past the recording's end, `export --redact` of a host whose
//! DMA addresses are physical, a snapshot cut short. Files are made here,
//! with the real writer, and cut with the real framing.
//!
//! `cargo test -p gpudirect-trace --test host hostile_damage`

use std::{fs, path::Path};

use gpudirect_trace::{
    decode::Record,
    tracefile::{format, End, Header, PciDevice},
};
use gpudirect_trace_common::{kind, Event};

use crate::{
    crafted::{base_header, writer},
    hostile::{assert_stderr_has, bin, run, stderr, succeeds},
};

const DEV: &str = "0000:01:00.0";

/// `blocks` EVENTS blocks of 10 maps each, every map unmapped in the same
/// block, then END: numbered blocks 0..blocks.
fn numbered_file(path: &Path, header: &Header, blocks: u64) {
    let mut w = writer(path, header);
    for b in 0..blocks {
        for i in 0..10u64 {
            let n = b * 10 + i;
            for k in [kind::DMA_MAP, kind::DMA_UNMAP] {
                let e = Event {
                    kind: k,
                    ts_ns: header.start_ts_ns + n * 1_000_000 + u64::from(k),
                    addr: 0x10_0000 + (n << 12),
                    phys: 0x8000_0000 + (n << 12),
                    size: 4096,
                    pid: 5,
                    ..Default::default()
                };
                w.push(&Record::Event(e), DEV).expect("push");
            }
        }
        w.flush().expect("flush");
    }
    w.finish(&End::default()).expect("finish");
}

/// The file's blocks after the preamble: (offset, length, type).
fn blocks(bytes: &[u8]) -> Vec<(usize, usize, u16)> {
    let mut out = Vec::new();
    let mut at = format::PREAMBLE_LEN;
    while at < bytes.len() {
        match format::check_block(&bytes[at..]) {
            format::Check::Valid { typ, total, .. } => {
                out.push((at, total, typ));
                at += total;
            }
            other => panic!("no block at {at}: {other:?}"),
        }
    }
    out
}

/// Each numbered block with its SEQ in front: (SEQ start, block start,
/// end) byte offsets.
fn pairs(bytes: &[u8]) -> Vec<(usize, usize, usize)> {
    let b = blocks(bytes);
    b.windows(2)
        .filter(|w| w[0].2 == format::block::SEQ)
        .map(|w| (w[0].0, w[1].0, w[1].0 + w[1].1))
        .collect()
}

fn report_json(path: &Path) -> (serde_json::Value, String) {
    let out = succeeds(bin().arg("report").arg(path).arg("--json"));
    let v = serde_json::from_slice(&out.stdout).expect("json");
    (v, stderr(&out))
}

fn maps(v: &serde_json::Value) -> u64 {
    v["devices"][0]["dma"]["maps"].as_u64().expect("maps")
}

#[test]
fn whole_blocks_removed_repeated_or_swapped_are_named_and_not_counted_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let orig = dir.path().join("orig.gdt");
    numbered_file(&orig, &base_header(), 6);
    let bytes = fs::read(&orig).expect("read");
    let p = pairs(&bytes);
    // 6 EVENTS blocks (the DEVICES block before the first is not numbered).
    assert_eq!(p.len(), 6, "{:?}", blocks(&bytes));
    let (v, err) = report_json(&orig);
    assert_eq!(maps(&v), 60);
    assert!(!err.contains("missing") && !err.contains("again"), "{err}");
    let seg = |i: usize| &bytes[p[i].0..p[i].2];
    let head = &bytes[..p[0].0];
    let tail = &bytes[p[5].2..];
    // The numbered blocks (with their SEQ) in this order.
    let numbered = |order: &[usize]| order.iter().map(|&i| seg(i)).collect::<Vec<_>>();
    // A file of the head, these blocks and the tail.
    let save = |name: &str, middle: &[&[u8]]| {
        let f = dir.path().join(name);
        fs::write(&f, [&[head][..], middle, &[tail]].concat().concat()).expect("write");
        f
    };

    // Blocks #2 and #3 cut out: named with where, the stream short.
    let removed = save("removed.gdt", &numbered(&[0, 1, 4, 5]));
    let (v, err) = report_json(&removed);
    assert_eq!(maps(&v), 40);
    assert!(
        err.contains("2 numbered block(s) are missing (#2..#3"),
        "{err}"
    );
    assert_eq!(v["read"]["sequence"]["missing"], 2);

    // The last two cut out before END: END's count names them.
    let tail_cut = save("tail.gdt", &numbered(&[0, 1, 2, 3]));
    let (_, err) = report_json(&tail_cut);
    assert!(
        err.contains("2 numbered block(s) are missing (#4..#5"),
        "{err}"
    );

    // Block #1 twice: said, and its maps not counted again (no phantoms).
    let dup = save("dup.gdt", &numbered(&[0, 1, 1, 2, 3, 4, 5]));
    let (v, err) = report_json(&dup);
    assert_eq!(maps(&v), 60, "the copy adds nothing");
    assert_eq!(v["devices"][0]["dma"]["outstanding_mappings"], 0);
    assert!(err.contains("1 block(s) appear again"), "{err}");

    // #2 and #3 swapped: out of order, nothing missing.
    let swapped = save("swap.gdt", &numbered(&[0, 1, 3, 2, 4, 5]));
    let (v, err) = report_json(&swapped);
    assert_eq!(maps(&v), 60);
    assert!(
        err.contains("1 block(s) are out of order") && !err.contains("missing"),
        "{err}"
    );

    // A block without its SEQ (copied alone): unnumbered, named.
    let lone = &bytes[p[2].1..p[2].2];
    let mut with_lone = numbered(&[0, 1, 2, 3, 4, 5]);
    with_lone.insert(1, lone);
    let inserted = save("inserted.gdt", &with_lone);
    let (_, err) = report_json(&inserted);
    assert!(
        err.contains("1 block(s) have no valid sequence number"),
        "{err}"
    );
}

/// Files of the versions before numbering read as they always did: no
/// warning about numbers (the fixtures are real recordings).
#[test]
fn recordings_before_block_numbers_read_without_number_warnings() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let f = fixtures.join("gpu-host-h200x2-trace/session2/record/gpu-h200x2.gdt");
    let (v, err) = report_json(&f);
    assert_eq!(v["read"]["sequence"]["numbered"], false);
    assert!(
        !err.contains("sequence") && !err.contains("missing"),
        "{err}"
    );
    assert!(v["read"]["version"][1].as_u64().expect("minor") < 3);
}

#[test]
fn a_from_past_the_recording_s_end_is_said() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("t.gdt");
    numbered_file(&f, &base_header(), 2);
    let out = succeeds(bin().arg("report").arg(&f).args(["--from", "100s"]));
    assert_stderr_has(&out, "--from 100.000s is past the recording's end");
    let (v, _) = {
        let out = run(bin()
            .arg("report")
            .arg(&f)
            .args(["--from", "100s", "--json"]));
        (
            serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json"),
            (),
        )
    };
    assert!(
        v["warnings"]
            .to_string()
            .contains("past the recording's end"),
        "{v}"
    );
    // A window inside the recording says nothing of the kind.
    let out = run(bin().arg("report").arg(&f).args(["--from", "1ms"]));
    assert!(
        !stderr(&out).contains("past the recording"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn redact_pseudonymizes_dma_addresses_that_are_physical() {
    let dir = tempfile::tempdir().expect("tempdir");
    let device = |group: Option<u32>, ty: Option<&str>| PciDevice {
        bus_id: DEV.into(),
        iommu_group: group,
        iommu_type: ty.map(str::to_owned),
        ..Default::default()
    };
    for (name, dev, physical) in [
        ("no-iommu", device(None, None), true),
        ("identity", device(Some(3), Some("identity")), true),
        ("translated", device(Some(3), Some("DMA-FQ")), false),
    ] {
        let f = dir.path().join(format!("{name}.gdt"));
        let header = Header {
            devices: vec![dev],
            ..base_header()
        };
        numbered_file(&f, &header, 1);
        let out = succeeds(
            bin()
                .arg("export")
                .arg(&f)
                .args(["--format", "jsonl", "--redact"]),
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let first: serde_json::Value =
            serde_json::from_str(text.lines().next().expect("a line")).expect("json");
        let addr = first["addr"].as_str().expect("addr");
        assert_eq!(addr.starts_with('p'), physical, "{name}: {first}");
        if physical {
            assert!(
                !text.contains("0x100000"),
                "{name}: a DMA address left: {text}"
            );
        }
        assert_eq!(
            stderr(&out).contains("`addr` was pseudonymized"),
            physical,
            "{name}"
        );
    }
}

#[test]
fn a_snapshot_cut_short_states_the_span_it_holds() {
    use gpudirect_trace::tracefile::{SnapshotInfo, Trigger};
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("snap.gdt");
    let start = 1_000_000_000u64;
    let header = Header {
        start_ts_ns: start,
        snapshot: Some(SnapshotInfo {
            trigger: Trigger {
                name: "signal".into(),
                label: "signal".into(),
                at_ns: start + 1_000_000,
                incident: None,
                suppressed: None,
            },
            ring_from_ns: start,
            ring_max_ns: None,
            ring_max_bytes: None,
            discarded_events: 0,
            discarded_blocks: 0,
            after_ns: 10_000_000_000,
        }),
        ..base_header()
    };
    // Events up to 20 ms, then an END at 2 s: SIGTERM 2 s after the trigger.
    let mut w = writer(&f, &header);
    let e = Event {
        kind: kind::DMA_MAP,
        ts_ns: start + 20_000_000,
        addr: 0x1000,
        size: 4096,
        ..Default::default()
    };
    w.push(&Record::Event(e), DEV).expect("push");
    w.finish(&End {
        ts_ns: start + 2_001_000_000,
        ..Default::default()
    })
    .expect("finish");
    let out = run(bin().arg("report").arg(&f));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("recording went on 2.00s after it (cut short: 10.00s asked)"),
        "{text}"
    );
}
