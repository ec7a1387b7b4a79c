//! Round trips, damage tolerance and size/speed measurements of the trace
//! file. `cargo test -p gpudirect-trace --lib tracefile`.

use std::{sync::Arc, time::Instant};

use gpudirect_trace_common::{kind, Event, SgEvent, XidEvent, SG_LENS, XID_MSG_LEN};

use super::{
    format::{self, block, Checkpoint, CounterRow, End, Header, Loss, ProbeInfo},
    Item, OpenError, ReadStats, TraceReader, TraceWriter,
};
use crate::decode::Record;

/// xorshift64*: deterministic pseudo-random numbers without a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub fn header() -> Header {
    Header {
        hostname: "testhost".into(),
        kernel_release: "6.18.0-test".into(),
        boot_id: "0f0e0d0c-0000-4000-8000-000000000000".into(),
        clock: "CLOCK_MONOTONIC".into(),
        tool_version: "0.1.0".into(),
        start_ts_ns: 1_000_000_000,
        probes: vec![ProbeInfo {
            name: "dma:dma_map_phys".into(),
            status: "attached".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

const DEVS: [&str; 3] = [
    "0000:00:04.0",
    "0000:41:00.0",
    crate::aggregate::UNATTRIBUTED,
];

/// A DMA map/unmap stream shaped like an NVMe or NIC driver's: IOVAs from a
/// recycled pool, page-aligned physical addresses scattered over 64 GiB,
/// mostly 4 KiB..128 KiB sizes, sub-microsecond spacing, a few threads;
/// every mapping is unmapped a little later.
pub fn map_unmap_stream(n: usize, seed: u64) -> Vec<(Record, &'static str)> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(n);
    let mut live: Vec<(u64, u64, u32, usize)> = Vec::new();
    let mut ts = 5_000_000_000u64;
    while out.len() < n {
        ts += 200 + rng.below(800);
        let tid = 1000 + rng.below(8) as u32;
        if live.len() > 64 || (!live.is_empty() && rng.below(2) == 0) {
            let (addr, size, dir, d) = live.swap_remove(rng.below(live.len() as u64) as usize);
            let e = Event {
                kind: kind::DMA_UNMAP,
                dir,
                ts_ns: ts,
                pid: tid,
                tid,
                addr,
                size,
                ..Default::default()
            };
            out.push((Record::Event(e), DEVS[d]));
        } else {
            let pages = [1, 1, 1, 2, 4, 8, 32][rng.below(7) as usize];
            let size = pages * 4096;
            let addr = 0xffff_0000 - (rng.below(256) << 17);
            let phys = rng.below(64 << 18) << 12;
            let dir = 1 + rng.below(2) as u32;
            let d = rng.below(2) as usize;
            let e = Event {
                kind: kind::DMA_MAP,
                dir,
                ts_ns: ts,
                pid: tid,
                tid,
                addr,
                phys,
                size,
                ..Default::default()
            };
            live.push((addr, size, dir, d));
            out.push((Record::Event(e), DEVS[d]));
        }
    }
    out
}

/// A mix of every record layout, including extreme values.
fn mixed(seed: u64) -> Vec<(Record, &'static str)> {
    let mut out = map_unmap_stream(300, seed);
    let mut sg = SgEvent {
        event: Event {
            kind: kind::DMA_MAP_SG,
            ts_ns: 1,
            addr: u64::MAX,
            phys: 0x8000_0000_0000_0000,
            size: u64::MAX,
            aux: (-12i64) as u64,
            ..Default::default()
        },
        nents: 20,
        ents: 3,
        n_lens: SG_LENS as u32,
        ..Default::default()
    };
    for (i, l) in sg.lens.iter_mut().enumerate() {
        *l = 4096 << (i % 8);
    }
    out.push((Record::Sg(sg), DEVS[1]));
    let mut xid = XidEvent {
        event: Event {
            kind: kind::NV_XID,
            ts_ns: u64::MAX,
            ..Default::default()
        },
        xid: 79,
        msg_truncated: 1,
        msg: [b'x'; XID_MSG_LEN],
    };
    xid.msg[..5].copy_from_slice(b"GPU h");
    out.push((Record::Xid(xid), DEVS[1]));
    out.push((
        Record::Event(Event {
            kind: kind::IO_PAGE_FAULT,
            ts_ns: 0,
            addr: 0x123000,
            aux: 1,
            ..Default::default()
        }),
        DEVS[0],
    ));
    out
}

fn write_file(events: &[(Record, &str)], per_block: usize) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &header()).expect("header");
    for (i, (r, d)) in events.iter().enumerate() {
        w.push(r, d).expect("push");
        if (i + 1) % per_block == 0 {
            w.flush().expect("flush");
            w.loss(&Loss {
                ts_ns: r.event().ts_ns,
                lost: 1,
                total: (i / per_block + 1) as u64,
            })
            .expect("loss");
        }
    }
    w.log_fault(&crate::model::Fault::new(
        crate::model::Source::Vtd,
        "PTE Read access is not set",
        "",
    ))
    .expect("faults");
    w.checkpoint(&Checkpoint {
        ts_ns: 9,
        events_written: events.len() as u64,
        lost_total: 2,
        hits: vec![0, 5, 6],
        counters: vec![CounterRow {
            device: Arc::from("0000:99:00.0"),
            kind: u32::from(kind::DMA_MAP),
            dir: 1,
            count: 7,
            bytes: 28672,
        }],
    })
    .expect("checkpoint");
    w.finish(&End {
        ts_ns: 10,
        events_written: events.len() as u64,
        lost_total: 2,
        exit_status: Some(-3),
    })
    .expect("finish")
}

fn read_all(bytes: &[u8]) -> Result<(Vec<Item>, ReadStats), OpenError> {
    let mut r = TraceReader::new(bytes)?;
    let mut items = Vec::new();
    while let Some(i) = r.next_item().expect("in-memory reads do not fail") {
        items.push(i);
    }
    Ok((items, r.stats().clone()))
}

/// The record as the file gives it back: `dev` is not stored (the device
/// name is), and Xid messages end at their first NUL.
fn normalized(r: &Record) -> Record {
    let mut r = *r;
    match &mut r {
        Record::Event(e) => e.dev = 0,
        Record::Sg(s) => s.event.dev = 0,
        Record::Xid(x) => {
            x.event.dev = 0;
            let end = x.msg.iter().position(|&b| b == 0).unwrap_or(XID_MSG_LEN);
            x.msg[end..].fill(0);
        }
    }
    r
}

fn events_of(items: &[Item]) -> Vec<(Record, String)> {
    items
        .iter()
        .filter_map(|i| match i {
            Item::Event { record, device } => Some((normalized(record), device.to_string())),
            _ => None,
        })
        .collect()
}

#[test]
fn round_trip_of_every_layout_and_block_type() {
    let events = mixed(7);
    let bytes = write_file(&events, 100);
    let (items, stats) = read_all(&bytes).expect("readable");
    let want: Vec<_> = events
        .iter()
        .map(|(r, d)| (normalized(r), d.to_string()))
        .collect();
    assert_eq!(events_of(&items), want);
    let losses: Vec<_> = items
        .iter()
        .filter_map(|i| match i {
            Item::Loss(l) => Some(l.total),
            _ => None,
        })
        .collect();
    assert_eq!(losses, vec![1, 2, 3]);
    assert!(items
        .iter()
        .any(|i| matches!(i, Item::LogFault(f) if f.reason == "PTE Read access is not set")));
    let Some(Item::Checkpoint(cp)) = items.iter().rev().nth(1) else {
        panic!("checkpoint before the end block: {:?}", items.last());
    };
    assert_eq!(
        (&*cp.counters[0].device, cp.counters[0].count),
        ("0000:99:00.0", 7)
    );
    assert_eq!(cp.hits, vec![0, 5, 6]);
    let Some(Item::End(end)) = items.last() else {
        panic!("end block last");
    };
    assert_eq!(end.exit_status, Some(-3));
    assert!(stats.clean_end);
    assert_eq!(stats.truncated_at, None);
    assert_eq!(stats.version, (format::MAJOR, format::MINOR));
    assert_eq!(
        (
            stats.corrupt_regions,
            stats.unknown_blocks,
            stats.undecodable_blocks
        ),
        (0, 0, 0)
    );
}

#[test]
fn header_round_trips_and_newer_major_is_refused() {
    let bytes = write_file(&[], 1);
    let r = TraceReader::new(&bytes[..]).expect("readable");
    assert_eq!(r.header(), &header());
    // A preamble as a newer writer makes it: its checksum over the rest.
    let with_version = |major: u16, minor: u16| {
        let mut b = bytes.clone();
        b[8..10].copy_from_slice(&major.to_le_bytes());
        b[10..12].copy_from_slice(&minor.to_le_bytes());
        let crc = crc32c::crc32c(&b[..12]);
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        b
    };
    let newer = with_version(format::MAJOR + 1, 0);
    let err = TraceReader::new(&newer[..]).err().expect("refused");
    assert!(matches!(err, OpenError::NewerMajor { .. }), "{err}");
    assert!(err.to_string().contains("newer"), "{err}");
    // A newer minor version of our major reads.
    let minor = with_version(format::MAJOR, format::MINOR + 1);
    let r = TraceReader::new(&minor[..]).expect("reads");
    assert!(!r.stats().preamble_damaged);
}

/// Issue 30: the preamble was not checksummed, so a damaged version field
/// was believed. Now it is said, and the file read as this version; a
/// 1.2 file (reserved bytes 0) is read as it always was.
#[test]
fn a_damaged_preamble_is_named_and_an_unchecked_old_one_reads() {
    let bytes = write_file(&[], 1);
    assert_eq!(
        format::check_preamble(&bytes[..16].try_into().expect("16 bytes")),
        format::PreambleCheck::Checked
    );
    // The major version flipped to 3: not "newer", damaged.
    let mut flipped = bytes.clone();
    flipped[8] ^= 2;
    let r = TraceReader::new(&flipped[..]).expect("read as this version");
    assert!(r.stats().preamble_damaged);
    assert_eq!(r.stats().version, (format::MAJOR, format::MINOR));
    // A 1.2 preamble: no checksum, read unchecked.
    let mut old = bytes;
    old[10..12].copy_from_slice(&2u16.to_le_bytes());
    old[12..16].fill(0);
    let r = TraceReader::new(&old[..]).expect("1.2 reads");
    assert!(!r.stats().preamble_damaged);
    assert_eq!(r.stats().version, (1, 2));
}

#[test]
fn empty_and_foreign_files_get_one_clear_error_each() {
    let e = TraceReader::new(&b""[..]).err().expect("empty");
    assert!(matches!(e, OpenError::Empty), "{e}");
    let e = TraceReader::new(&b"{\"not\": \"a trace\"}"[..])
        .err()
        .expect("json");
    assert!(matches!(e, OpenError::NotATrace), "{e}");
    assert!(e.to_string().contains("not a gpudirect-trace recording"));
}

#[test]
fn every_truncation_reads_a_prefix_and_says_where_it_ends() {
    let events = mixed(3);
    let bytes = write_file(&events, 40);
    let (full, _) = read_all(&bytes).expect("full file");
    let header_end = format::PREAMBLE_LEN + header_block_len(&bytes);
    let boundaries: Vec<usize> = block_offsets(&bytes).iter().map(|b| b.0).collect();
    let mut last_len = 0;
    for cut in 0..bytes.len() {
        let part = &bytes[..cut];
        match read_all(part) {
            Err(e) => assert!(cut < header_end, "cut at {cut}: {e}"),
            Ok((items, stats)) => {
                assert!(cut >= header_end, "cut at {cut} inside the header read");
                // A prefix of the complete file's items, never more, never
                // different, and monotonically growing with the cut.
                assert!(items.len() <= full.len());
                assert_eq!(
                    format!("{:?}", &items[..]),
                    format!("{:?}", &full[..items.len()]),
                    "cut at {cut}"
                );
                assert!(items.len() >= last_len, "cut at {cut}");
                last_len = items.len();
                assert!(!stats.clean_end);
                match stats.truncated_at {
                    Some(at) => {
                        let at = at as usize;
                        assert!(boundaries.contains(&at) && at < cut, "cut {cut}, at {at}");
                    }
                    None => assert!(
                        boundaries.contains(&cut),
                        "cut {cut} inside a block unnoticed"
                    ),
                }
            }
        }
    }
}

fn header_block_len(bytes: &[u8]) -> usize {
    let p = format::PREAMBLE_LEN;
    u32::from_le_bytes([bytes[p], bytes[p + 1], bytes[p + 2], bytes[p + 3]]) as usize
        + format::BLOCK_OVERHEAD
}

/// Offsets of the blocks after the header.
fn block_offsets(bytes: &[u8]) -> Vec<(usize, u16)> {
    let mut at = format::PREAMBLE_LEN;
    let mut out = Vec::new();
    while at < bytes.len() {
        let len =
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
        out.push((at, u16::from_le_bytes([bytes[at + 4], bytes[at + 5]])));
        at += len + format::BLOCK_OVERHEAD;
    }
    out
}

#[test]
fn a_corrupt_block_in_the_middle_is_skipped_and_counted() {
    let events = map_unmap_stream(1000, 11);
    let bytes = write_file(&events, 100);
    let blocks = block_offsets(&bytes);
    let events_blocks: Vec<_> = blocks.iter().filter(|b| b.1 == block::EVENTS).collect();
    let (at, _) = *events_blocks[3];
    let mut bad = bytes.clone();
    bad[at + 30] ^= 0x40;
    let (items, stats) = read_all(&bad).expect("readable");
    assert_eq!(stats.corrupt_regions, 1);
    assert!(stats.skipped_bytes > 0);
    assert!(stats.clean_end, "reading went on to the end block");
    assert_eq!(
        events_of(&items).len(),
        900,
        "exactly one block of 100 lost"
    );
}

#[test]
fn unknown_block_types_and_flags_are_skipped() {
    let events = map_unmap_stream(10, 5);
    let mut w = TraceWriter::new(Vec::new(), &header()).expect("header");
    w.push(&events[0].0, events[0].1).expect("push");
    w.raw_block(999, 0, b"from the future").expect("raw");
    w.raw_block(block::EVENTS, 0x8000, b"future encoding")
        .expect("raw");
    w.push(&events[1].0, events[1].1).expect("push");
    let bytes = w.finish(&End::default()).expect("finish");
    let (items, stats) = read_all(&bytes).expect("readable");
    assert_eq!(stats.unknown_blocks, 2);
    assert_eq!(events_of(&items).len(), 2);
    assert!(stats.clean_end);
}

#[test]
fn random_damage_never_panics() {
    let base = write_file(&mixed(9), 50);
    let mut rng = Rng::new(0x5eed);
    for round in 0..400 {
        let mut b = base.clone();
        match round % 4 {
            0 => b.truncate(rng.below(b.len() as u64) as usize),
            1 => {
                for _ in 0..=rng.below(8) {
                    let i = rng.below(b.len() as u64) as usize;
                    b[i] ^= 1 << rng.below(8);
                }
            }
            2 => {
                let i = rng.below(b.len() as u64) as usize;
                let n = rng.below(64) as usize;
                let end = (i + n).min(b.len());
                b.drain(i..end);
            }
            _ => {
                let i = rng.below(b.len() as u64) as usize;
                for x in &mut b[i..(i + 16).min(base.len())] {
                    *x = rng.next() as u8;
                }
            }
        }
        if let Ok(mut r) = TraceReader::new(&b[..]) {
            while let Ok(Some(_)) = r.next_item() {}
        }
    }
}

/// The seed corpus of the fuzz target is a small valid file of this format.
#[test]
fn fuzz_seed_is_a_readable_trace() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/reader/small.gdt");
    if std::env::var_os("GDT_WRITE_SEED").is_some() {
        std::fs::write(path, write_file(&mixed(1)[290..], 4)).expect("write seed");
    }
    let bytes = std::fs::read(path).expect("seed corpus file");
    let (items, stats) = read_all(&bytes).expect("seed reads");
    assert!(stats.clean_end && items.len() > 10, "{stats:?}");
}

/// Size and speed of map/unmap streams (docs/benchmarks.md):
/// `cargo test -p gpudirect-trace --release --lib tracefile::tests::bench -- --ignored --nocapture`
#[test]
#[ignore = "measurement; run in release mode"]
fn bench_map_unmap_bytes_per_event_and_write_rate() {
    let n = 2_000_000;
    let events = map_unmap_stream(n, 42);
    let mut best = f64::MAX;
    let mut size = 0;
    for _ in 0..3 {
        let t = Instant::now();
        let mut w = TraceWriter::new(Vec::with_capacity(64 << 20), &header()).expect("header");
        for (r, d) in &events {
            w.push(r, d).expect("push");
        }
        let out = w.finish(&End::default()).expect("finish");
        best = best.min(t.elapsed().as_secs_f64());
        size = out.len();
    }
    let t = Instant::now();
    let (items, _) = read_all(&write_file(&events, 1 << 16)).expect("readable");
    let read_s = t.elapsed().as_secs_f64();
    assert_eq!(events_of(&items).len(), n);
    println!(
        "map/unmap stream: {n} events, {size} bytes, {:.2} bytes/event; \
         write {:.2} M events/s (one core); write+read {:.2} M events/s",
        size as f64 / n as f64,
        n as f64 / best / 1e6,
        n as f64 / read_s / 1e6
    );
}

/// `push_shared` knows the last name by its allocation: names that are
/// equal but apart, names that differ, and a name cut to the format's
/// bound must each read back as `push` would have written them.
#[test]
fn push_shared_names_each_device_as_push_does() {
    let long: Arc<str> = Arc::from("d".repeat(format::MAX_DEVICE_NAME + 40));
    let a: Arc<str> = Arc::from("0000:41:00.0");
    let a_again: Arc<str> = Arc::from("0000:41:00.0");
    let b: Arc<str> = Arc::from("0000:42:00.0");
    let order = [&a, &a, &b, &a_again, &long, &a, &long, &b, &b];
    let events: Vec<(Record, Arc<str>)> = map_unmap_stream(order.len(), 3)
        .into_iter()
        .zip(order)
        .map(|((r, _), d)| (r, d.clone()))
        .collect();
    let mut shared = TraceWriter::new(Vec::new(), &header()).expect("header");
    let mut plain = TraceWriter::new(Vec::new(), &header()).expect("header");
    for (r, d) in &events {
        shared.push_shared(r, d).expect("push_shared");
        plain.push(r, d).expect("push");
    }
    let end = End::default();
    let shared = shared.finish(&end).expect("finish");
    let plain = plain.finish(&end).expect("finish");
    assert_eq!(shared, plain);
    let (items, _) = read_all(&shared).expect("readable");
    let cut = "d".repeat(format::MAX_DEVICE_NAME);
    let want: Vec<_> = events
        .iter()
        .map(|(r, d)| {
            let name = if d.len() > format::MAX_DEVICE_NAME {
                cut.clone()
            } else {
                d.to_string()
            };
            (normalized(r), name)
        })
        .collect();
    assert_eq!(events_of(&items), want);
}
