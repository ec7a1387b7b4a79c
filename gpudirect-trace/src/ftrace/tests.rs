//! The importer end to end: ftrace text in, a trace file out, read back by
//! `report`'s replay.

use std::path::{Path, PathBuf};

use super::*;
use crate::report::{replay, Window};

fn import_to_file(text: &[u8], name: &str) -> (tempfile::TempDir, PathBuf, ImportStats) {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join(name);
    let f = std::fs::File::create(&out).expect("create");
    let (_, stats) = import(text, io::BufWriter::new(f), "test").expect("import");
    (dir, out, stats)
}

/// The text the 2x H200 host's tracefs printed during scripts/gpu-host/
/// workload.py (../shared/fixtures, kernel 6.18, no IOMMU): the same
/// story the eBPF recording of that host tells (report/tests.rs), every
/// map of both GPUs unmapped, scatterlists' unmaps found by their pages.
/// The error of an import that must fail, with its causes.
fn refusal(text: &[u8]) -> String {
    let err = import(text, Vec::new(), "t.txt").expect_err("refused");
    format!("{err:#}")
}

#[test]
fn gpu_host_ftrace_text_reads_like_a_recording() {
    let gz = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/ftrace/h200x2-nvidia-dma.txt.gz");
    let bytes = std::fs::read(&gz).expect("fixture");
    let (_dir, out, stats) = import_to_file(&bytes, "h200.gdt");
    assert_eq!((stats.events, stats.devices, stats.lost), (4358, 2, 0));
    assert_eq!(
        (stats.unreadable, stats.not_ftrace, stats.unmap_sg_unpaired),
        (0, 0, 0),
        "{stats:?}"
    );
    assert!(stats.other_events.is_empty(), "{stats:?}");
    let mut r = replay(&out, &Window::default()).expect("replay");
    assert_eq!(r.losses_total(), 0);
    let devices = r.analysis.agg.snapshot(1.0, &[]);
    for (bdf, maps, sg) in [("0000:00:06.0", 1089, 22), ("0000:00:07.0", 1090, 23)] {
        let d = devices
            .iter()
            .find(|d| d.device == bdf)
            .unwrap_or_else(|| panic!("no {bdf} in {devices:?}"));
        assert_eq!((d.maps, d.unmaps, d.sg_maps), (maps, maps, sg), "{bdf}");
        assert_eq!(d.dma.lifetime_ns.count, maps, "{bdf}: every unmap paired");
        assert_eq!(d.outstanding_mappings, 0, "{bdf}");
    }
    let names = &r.analysis.agg.names;
    assert_eq!(
        names.get(&1220).and_then(|n| n.comm.as_deref()),
        Some("python3")
    );
}

/// What the text says it lost becomes loss records; what cannot be read is
/// counted, never dropped without a word.
#[test]
fn losses_faults_and_unread_lines_are_counted() {
    let text = b"# tracer: nop\n\
# entries-in-buffer/entries-written: 6/106   #P:4\n\
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n\
   nvme-1 [000] ..... 10.000000: dma_map_phys: 0000:00:04.0 dir=FROM_DEVICE dma_addr=ffe00000 size=4096 phys_addr=1234000 attrs=\n\
CPU:1 [LOST 5 EVENTS]\n\
   nvme-1 [000] ..s1. 10.000100: dma_unmap_phys: 0000:00:04.0 dir=FROM_DEVICE dma_addr=ffe00000 size=4096 attrs=\n\
   edu-7 (    7) [001] d.h1. 10.5: io_page_fault: IOMMU:dmar0 0000:00:03.0 iova=0x0000000000123000 flags=0x0002\n\
   dd-9 [001] ..... 10.6: dma_unmap_sg: 0000:00:04.0 dir=TO_DEVICE phys_addrs={0x5000} attrs=\n\
   dd-9 [001] ..... 10.7: sched_switch: prev_comm=dd\n\
   dd-9 [001] ..... 10.8: dma_map_phys: 0000:00:04.0 dir=TO_DEVICE size=4096\n\
Dec  5 10:00:00 host kernel: not ftrace\n";
    let (_dir, out, stats) = import_to_file(text, "t.gdt");
    assert_eq!(stats.events, 4, "{stats:?}");
    assert_eq!(stats.lost, 105, "100 overwritten, 5 dropped");
    assert_eq!((stats.unreadable, stats.not_ftrace), (1, 1));
    assert_eq!(stats.unmap_sg_unpaired, 1);
    assert_eq!(stats.other_events.get("sched_switch"), Some(&1));
    let s = summary(&stats, "t.gdt");
    for want in [
        "imported 4 events of 2 devices (11 lines)",
        "105 events lost",
        "sched_switch 1",
        "1 line that is not ftrace",
        "1 dma_unmap_sg without its map",
    ] {
        assert!(s.contains(want), "{want}: {s}");
    }
    let mut r = replay(&out, &Window::default()).expect("replay");
    assert_eq!(r.losses_total(), 105);
    assert!(
        r.incidents().any(|i| i.device == "0000:00:03.0"),
        "the IOMMU fault is an incident"
    );
    let devices = r.analysis.agg.snapshot(1.0, &[]);
    let nvme = devices
        .iter()
        .find(|d| d.device == "0000:00:04.0")
        .expect("nvme");
    assert_eq!((nvme.maps, nvme.dma.lifetime_ns.count), (1, 1));
    assert_eq!(r.clock().rel_s(10_000_100_000), 0.0001);
}

#[test]
fn text_without_events_is_an_error_and_compressed_text_reads() {
    let msg = refusal(b"hello\nworld\n");
    assert!(
        msg.contains("no events") && msg.contains("(2 lines, 2 not ftrace text)"),
        "{msg}"
    );
    assert!(msg.contains("events/dma/enable"), "how to capture: {msg}");
    let plain = b"  a-1 [000] 1.0: dma_map_phys: 0000:00:04.0 dir=TO_DEVICE dma_addr=1000 size=8 phys_addr=1000\n";
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    io::Write::write_all(&mut gz, plain).expect("gzip");
    let (_, stats) = import(&gz.finish().expect("gzip")[..], Vec::new(), "x.gz").expect("gz");
    assert_eq!(stats.events, 1);
}

/// Text that has the events in a form import does not read says which
/// trace option printed it and how to turn it off, not "no events".
#[test]
fn text_of_another_trace_option_says_which() {
    // `echo 1 > options/latency-format`: print_trace_header() and the
    // latency help header, no CPU column, microseconds since the start.
    let latency = b"# tracer: nop\n\
#\n\
# nop latency trace v1.1.5 on 6.18.15\n\
#  cmd     pid     |||||| time  |   caller\n\
 python3-1220   31d..1.  123us : dma_map_phys: 0000:00:06.0 dir=BIDIRECTIONAL dma_addr=10b000000 size=4096 phys_addr=10b000000 attrs=\n";
    let msg = refusal(latency);
    assert!(
        msg.contains("`latency-format`") && msg.contains("echo nolatency-format"),
        "{msg}"
    );
    assert!(msg.contains("(5 lines, 1 not ftrace text)"), "{msg}");
    // A body cut short (an editor, a pager): said, with the first one.
    let cut = b"  python3-1220 [031] ..... 49.123419: dma_map_phys: 0000:00:06.0 dir=BIDIRECTIONAL dma_a\n";
    let msg = refusal(cut);
    for want in [
        "(1 line, 0 not ftrace text, 1 event with a body that could not be read",
        "`dma_map_phys: 0000:00:06.0 dir=BIDIRECTIONAL dma_a`",
        "echo noraw",
    ] {
        assert!(msg.contains(want), "{want}: {msg}");
    }
    assert!(!msg.contains("events/dma/enable"), "{msg}");
}

/// The same events printed by their print formats and by their fields
/// (`options/fields`, or a persistent ring buffer read after a reboot)
/// import to the same records: 6.18's field names and encodings.
#[test]
fn the_fields_form_imports_as_the_print_format_does() {
    let printed = "\
  fio-7 [001] ..... 5.000001: dma_map_phys: 0000:00:04.0 dir=FROM_DEVICE dma_addr=ffffe000 size=4096 phys_addr=1234000 attrs=\n\
  fio-7 [001] ..... 5.000002: dma_map_sg: 0000:00:04.0 dir=TO_DEVICE nents=2/2 ents=1/1 dma_addrs={0xfff00000} sizes={0x3000} phys_addrs={0x5000,0x6000} attrs=\n\
  fio-7 [001] ..s1. 5.000003: dma_unmap_phys: 0000:00:04.0 dir=FROM_DEVICE dma_addr=ffffe000 size=4096 attrs=\n\
  fio-7 [001] ..... 5.000004: dma_unmap_sg: 0000:00:04.0 dir=TO_DEVICE phys_addrs={0x5000,0x6000} attrs=\n\
  fio-7 [001] ..... 5.000005: map: IOMMU: iova=0x00000000fff00000 - 0x00000000fff03000 paddr=0x0000000000005000 size=12288\n\
  fio-7 [001] ..... 5.000006: unmap: IOMMU: iova=0x00000000fff00000 - 0x00000000fff03000 size=12288 unmapped_size=12288\n\
  fio-7 [001] d.h1. 5.000007: io_page_fault: IOMMU:intel-iommu 0000:00:03.0 iova=0x0000000000123000 flags=0x0002\n\
  fio-7 [001] ..... 5.000008: dma_map_sg_err: 0000:00:04.0 dir=TO_DEVICE dma_addrs={0x5000} err=-12 attrs=\n\
  fio-7 [001] ..... 5.000009: swiotlb_bounced: dev_name: 0000:00:05.0 dma_mask=ffffffff dev_addr=7000 size=512 NORMAL\n";
    let fields = "\
  fio-7 [001] ..... 5.000001: dma_map_phys: device=0000:00:04.0 phys_addr=0x1234000 (19087360) dma_addr=0xffffe000 (4294959104) size=0x1000 (4096) dir=0x2 (2) attrs=0x0 (0)\n\
  fio-7 [001] ..... 5.000002: dma_map_sg: device=0000:00:04.0 full_nents=0x2 (2) full_ents=0x1 (1) truncated=(0) phys_addrs=00,50,00,00,00,00,00,00,00,60,00,00,00,00,00,00 dma_addrs=00,00,f0,ff,00,00,00,00 lengths=00,30,00,00 dir=0x1 (1) attrs=0x0 (0)\n\
  fio-7 [001] ..s1. 5.000003: dma_unmap_phys: device=0000:00:04.0 addr=0xffffe000 (4294959104) size=0x1000 (4096) dir=0x2 (2) attrs=0x0 (0)\n\
  fio-7 [001] ..... 5.000004: dma_unmap_sg: device=0000:00:04.0 addrs=00,50,00,00,00,00,00,00,00,60,00,00,00,00,00,00 dir=0x1 (1) attrs=0x0 (0)\n\
  fio-7 [001] ..... 5.000005: map: iova=0xfff00000 (4293918720) paddr=0x5000 (20480) size=0x3000 (12288)\n\
  fio-7 [001] ..... 5.000006: unmap: iova=0xfff00000 (4293918720) size=0x3000 (12288) unmapped_size=0x3000 (12288)\n\
  fio-7 [001] d.h1. 5.000007: io_page_fault: device=0000:00:03.0 driver=intel-iommu iova=0x123000 (1191936) flags=0x2 (2)\n\
  fio-7 [001] ..... 5.000008: dma_map_sg_err: device=0000:00:04.0 phys_addrs=00,50,00,00,00,00,00,00 err=0xfffffff4 (-12) dir=0x1 (1) attrs=0x0 (0)\n\
  fio-7 [001] ..... 5.000009: swiotlb_bounced: dev_name=0000:00:05.0 dma_mask=0xffffffff (4294967295) dev_addr=0x7000 (28672) size=0x200 (512) force=(0)\n";
    let (_a, a, sa) = import_to_file(printed.as_bytes(), "printed.gdt");
    let (_b, b, sb) = import_to_file(fields.as_bytes(), "fields.gdt");
    assert_eq!((sa.events, sa.unreadable), (9, 0), "{sa:?}");
    assert_eq!(
        (sb.events, sb.unreadable, sb.unmap_sg_unpaired),
        (9, 0, 0),
        "{sb:?}"
    );
    let records = |p: &Path| {
        let mut r = crate::tracefile::open(p).expect("open");
        let mut out = Vec::new();
        while let Some(item) = r.next_item().expect("item") {
            out.push(format!("{item:?}"));
        }
        out
    };
    let (ra, rb) = (records(&a), records(&b));
    assert!(ra.len() >= 9, "{ra:#?}");
    assert_eq!(ra, rb);
}

/// A body that could not be read is shown (the first), escaped and cut.
#[test]
fn the_first_unreadable_body_is_shown_escaped_and_cut() {
    let mut text = String::from(
        "  a-1 [000] 1.0: dma_map_phys: 0000:00:04.0 dir=TO_DEVICE dma_addr=1000 size=8 phys_addr=1000\n",
    );
    text.push_str("  a-1 [000] 1.1: dma_unmap_phys: \x1b[31m");
    text.push_str(&"x".repeat(1000));
    text.push('\n');
    text.push_str("  a-1 [000] 1.2: dma_unmap_phys: another\n");
    let (_, stats) = import(text.as_bytes(), Vec::new(), "t").expect("import");
    assert_eq!(stats.unreadable, 2);
    let first = stats.first_unreadable.as_deref().expect("first");
    assert!(first.starts_with("dma_unmap_phys: \\x1b[31mxxx"), "{first}");
    // Cut to 160 bytes, then escaped (the ESC's three more).
    assert!(first.len() == 163 && !first.contains('\x1b'), "{first}");
    let s = summary(&stats, "t.gdt");
    assert!(
        s.contains("2 events of a known tracepoint with a body that could not be read")
            && s.contains(&format!("the first body not read: `{first}`")),
        "{s}"
    );
}

/// A crafted text naming more devices than the reader's budget keeps:
/// the rest are the folded row, and memory stays bounded.
#[test]
fn device_names_are_bounded() {
    crate::memory_budget::set_test_reader_limit(Some(200_000));
    let mut text = String::new();
    for i in 0..2000 {
        text.push_str(&format!(
            "a-1 [000] 1.{i:06}: dma_map_phys: {i}{} dir=TO_DEVICE dma_addr={i:x} size=8\n",
            "d".repeat(1000)
        ));
    }
    let (_dir, out, stats) = import_to_file(text.as_bytes(), "many.gdt");
    crate::memory_budget::set_test_reader_limit(None);
    assert_eq!(stats.events, 2000);
    assert!(stats.devices < 2000, "{}", stats.devices);
    let mut reader = crate::tracefile::open(&out).expect("open");
    let mut names = std::collections::BTreeSet::new();
    while let Some(item) = reader.next_item().expect("read") {
        if let crate::tracefile::Item::Event { device, .. } = item {
            names.insert(device.to_string());
        }
    }
    assert!(
        names.contains(crate::tracefile::writer::FOLDED_DEVICES),
        "{}",
        names.len()
    );
    assert!(names
        .iter()
        .all(|n| n.len() <= crate::tracefile::format::MAX_DEVICE_NAME));
}

/// Names from the text are cut and escaped before they are kept or shown.
#[test]
fn names_are_cut_and_escaped() {
    let long = "x".repeat(100_000);
    let text = format!(
        "a\u{1b}[2J{long}-5 [000] 1.0: dma_map_phys: 0000:00:04.0 dir=TO_DEVICE dma_addr=1000 size=8\n\
         a-5 [000] 1.1: weird\u{7}{long}: x\n\
         a-5 [000] 1.2: weird\u{7}{long}: y\n"
    );
    let (_dir, out, stats) = import_to_file(text.as_bytes(), "names.gdt");
    assert_eq!(stats.events, 1);
    let (name, count) = stats.other_events.iter().next().expect("one other name");
    assert_eq!(*count, 2, "one row for the same name");
    assert!(
        name.len() <= MAX_NAME + 8 && !name.contains('\u{7}'),
        "{name:?}"
    );
    let r = replay(&out, &Window::default()).expect("replay");
    let comm = r.analysis.agg.names[&5].comm.clone().expect("a name");
    assert!(
        comm.len() <= MAX_NAME + 8 && !comm.contains('\u{1b}'),
        "{comm:?}"
    );
}

/// The memory fuzz target's seed (fuzz/corpus/memory/ftrace-repeated.txt)
/// read as the target reads it: repeated to 1 MiB through a boxed reader
/// into a sink. Every shape of line, cut anywhere at the end.
#[test]
fn fuzz_seed_repeated_imports() {
    let seed = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/memory/ftrace-repeated.txt"),
    )
    .expect("seed");
    let body = &seed[1..];
    let repeated: Vec<u8> = body.iter().copied().cycle().take(1 << 20).collect();
    let src: Box<dyn io::Read> = Box::new(&repeated[..]);
    let (_, stats) = import(io::BufReader::new(src), io::sink(), "seed").expect("import");
    assert!(stats.events > 5000, "{stats:?}");
    assert!(stats.lost > 0 && stats.unmap_sg_unpaired == 0, "{stats:?}");
    // Both forms of body, the print format's and the fields option's.
    assert_eq!(stats.unreadable, 0, "{stats:?}");
}
