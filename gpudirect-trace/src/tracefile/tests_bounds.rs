//! The reader's memory bound: what a crafted or damaged file may ask for
//! (issue 19). `cargo test -p gpudirect-trace --lib tracefile::tests_bounds`.

use std::{io::Read, sync::Arc};

use gpudirect_trace_common::{kind, Event};

use super::{
    format::{self, block, flag, put_varint, End},
    reader::MAX_BUFFER,
    tests::{header, Rng},
    Item, TraceReader, TraceWriter,
};
use crate::decode::Record;

/// A valid file (preamble, header) followed by `tail`, then an END block.
fn file_with(blocks: &[(u16, u16, Vec<u8>)]) -> Vec<u8> {
    let mut bytes = TraceWriter::new(Vec::new(), &header())
        .expect("header")
        .finish(&End::default())
        .expect("finish");
    // Drop the END block (16 + payload) to append the crafted ones first.
    // The writer's END says how many numbered blocks came before (none).
    let end_len = format::BLOCK_OVERHEAD + format::encode_end_counted(&End::default(), 0).len();
    bytes.truncate(bytes.len() - end_len);
    for (typ, flags, payload) in blocks {
        format::frame(&mut bytes, *typ, *flags, payload);
    }
    format::frame(
        &mut bytes,
        block::END,
        0,
        &format::encode_end(&End::default()),
    );
    bytes
}

fn read(bytes: impl Read) -> (Vec<Item>, super::ReadStats) {
    let mut r = TraceReader::new(bytes).expect("opens");
    let mut items = Vec::new();
    while let Some(i) = r.next_item().expect("reads") {
        items.push(i);
    }
    (items, r.stats().clone())
}

/// An EVENTS payload of `n` all-zero events (11 one-byte columns each).
fn zero_events(n: usize) -> Vec<u8> {
    let mut raw = Vec::new();
    put_varint(&mut raw, n as u64);
    raw.resize(raw.len() + n * 11, 0);
    raw
}

#[test]
fn a_block_with_more_events_than_the_format_allows_is_refused() {
    // 65 537 events: the old reader decoded them (24 M from a 9.8 KB file
    // made `report` use 13.4 GB); now the block is undecodable, skipped.
    let over = zero_events(format::MAX_EVENTS_PER_BLOCK + 1);
    let z = zstd::bulk::compress(&over, 3).expect("compress");
    let ok = zstd::bulk::compress(&zero_events(10), 3).expect("compress");
    let bytes = file_with(&[
        (block::EVENTS, flag::ZSTD, z),
        (block::EVENTS, flag::ZSTD, ok),
    ]);
    let (items, stats) = read(&bytes[..]);
    let events = items
        .iter()
        .filter(|i| matches!(i, Item::Event { .. }))
        .count();
    assert_eq!(events, 10);
    assert_eq!(stats.undecodable_blocks, 1);
    assert!(stats.clean_end);
}

#[test]
fn a_zstd_bomb_is_refused_from_its_declared_size() {
    // 200 MiB of zeros in a few KB: declared in the frame header, refused
    // before any allocation (the limit for EVENTS is ~16 MiB).
    let raw = vec![0u8; 200 << 20];
    let z = zstd::bulk::compress(&raw, 3).expect("compress");
    drop(raw);
    assert!(z.len() < 64 << 10, "{}", z.len());
    let bytes = file_with(&[(block::EVENTS, flag::ZSTD, z)]);
    let (_, stats) = read(&bytes[..]);
    assert_eq!(stats.undecodable_blocks, 1);
}

/// The Frame_Content_Size field of a single-segment zstd frame (RFC 8878
/// 3.1.1.1): its offset and width.
fn fcs_field(z: &[u8]) -> (usize, usize) {
    let fhd = z[4];
    let single = fhd & 0x20 != 0;
    assert!(single, "small inputs compress to single-segment frames");
    let did = [0, 1, 2, 4][usize::from(fhd & 3)];
    let width = [1, 2, 4, 8][usize::from(fhd >> 6)];
    (5 + did, width)
}

#[test]
fn a_frame_that_expands_past_its_declared_size_is_an_error_for_that_block() {
    let payload = zero_events(1000);
    let mut z = zstd::bulk::compress(&payload, 3).expect("compress");
    let (at, width) = fcs_field(&z);
    assert_eq!(width, 2, "11 001 bytes: a 2-byte field holding size - 256");
    // Declare 500 bytes fewer than the frame holds.
    let lie = (payload.len() - 256 - 500) as u16;
    z[at..at + 2].copy_from_slice(&lie.to_le_bytes());
    // Two frames in one payload: more than the one frame the format allows.
    let mut two = zstd::bulk::compress(&zero_events(3), 3).expect("compress");
    two.extend(zstd::bulk::compress(&zero_events(3), 3).expect("compress"));
    let good = zstd::bulk::compress(&zero_events(7), 3).expect("compress");
    let bytes = file_with(&[
        (block::EVENTS, flag::ZSTD, z),
        (block::EVENTS, flag::ZSTD, two),
        (block::EVENTS, flag::ZSTD, good),
    ]);
    let (items, stats) = read(&bytes[..]);
    assert_eq!(stats.undecodable_blocks, 2, "{stats:?}");
    assert_eq!(
        items
            .iter()
            .filter(|i| matches!(i, Item::Event { .. }))
            .count(),
        7
    );
}

#[test]
fn uncompressed_payloads_and_tables_beyond_the_limits_are_refused() {
    let mut loss = Vec::new();
    put_varint(&mut loss, 1);
    loss.resize(format::max_raw(block::LOSS) + 1, 0);
    let mut devices = Vec::new();
    put_varint(&mut devices, 1 << 20); // first index far past MAX_DEVICES
    put_varint(&mut devices, 1);
    put_varint(&mut devices, 1);
    devices.push(b'x');
    let mut far = zero_events(1);
    // The device column of the one event: index MAX_DEVICES.
    let mut dev = Vec::new();
    put_varint(&mut dev, format::MAX_DEVICES as u64);
    far.splice(3..4, dev);
    let bytes = file_with(&[
        (block::LOSS, 0, loss),
        (block::DEVICES, 0, devices),
        (block::EVENTS, 0, far),
    ]);
    let (_, stats) = read(&bytes[..]);
    assert_eq!(stats.undecodable_blocks, 3, "{stats:?}");
}

/// Pseudo-random bytes, `n` of them (or endless), then `tail`.
struct Garbage {
    rng: Rng,
    left: Option<u64>,
    tail: std::io::Cursor<Vec<u8>>,
}

impl Read for Garbage {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = match self.left {
            Some(0) => return self.tail.read(buf),
            Some(left) => buf.len().min(left as usize),
            None => buf.len(),
        };
        for chunk in buf[..n].chunks_mut(8) {
            let v = self.rng.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        if let Some(left) = &mut self.left {
            *left -= n as u64;
        }
        Ok(n)
    }
}

#[test]
fn damage_is_scanned_in_bounded_memory_and_the_next_block_found() {
    // 96 MiB of garbage after the header, then a valid END block: the old
    // reader held all of it (pos stayed where the damage began).
    let file = file_with(&[]);
    let end_at = file.len() - format::BLOCK_OVERHEAD - format::encode_end(&End::default()).len();
    let garbage = 96u64 << 20;
    let src = std::io::Cursor::new(file[..end_at].to_vec()).chain(Garbage {
        rng: Rng::new(19),
        left: Some(garbage),
        tail: std::io::Cursor::new(file[end_at..].to_vec()),
    });
    let mut r = TraceReader::new(src).expect("opens");
    while r.next_item().expect("reads").is_some() {}
    assert!(
        r.buffer_capacity() <= MAX_BUFFER,
        "{} > {MAX_BUFFER}",
        r.buffer_capacity()
    );
    let stats = r.stats();
    assert!(stats.clean_end, "{stats:?}");
    assert_eq!((stats.corrupt_regions, stats.skipped_bytes), (1, garbage));
}

#[test]
fn writer_splits_long_fault_lists_and_folds_devices_beyond_the_table() {
    let mut w = TraceWriter::new(Vec::new(), &header()).expect("header");
    let faults: Vec<_> = (0..10_000)
        .map(|i| {
            crate::model::Fault::new(
                crate::model::Source::Vtd,
                format!("n {i}"),
                &"x".repeat(200),
            )
        })
        .collect();
    w.log_faults(&faults).expect("faults");
    let n_dev = format::MAX_DEVICES + 10;
    let e = Record::Event(Event {
        kind: kind::DMA_MAP,
        ..Default::default()
    });
    w.push(&e, &"é".repeat(1000)).expect("push a long name");
    for i in 0..n_dev {
        w.push(&e, &format!("dev{i}")).expect("push");
    }
    let bytes = w.finish(&End::default()).expect("finish");
    let (items, stats) = read(&bytes[..]);
    assert_eq!(stats.undecodable_blocks, 0, "{stats:?}");
    let n_faults = items
        .iter()
        .filter(|i| matches!(i, Item::LogFault(_)))
        .count();
    assert_eq!(n_faults, 10_000);
    let names: Vec<Arc<str>> = items
        .iter()
        .filter_map(|i| match i {
            Item::Event { device, .. } => Some(device.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(names.len(), n_dev + 1);
    assert_eq!(&*names[0], "é".repeat(format::MAX_DEVICE_NAME / 2));
    assert_eq!(&*names[1], "dev0");
    assert_eq!(&*names[n_dev], super::writer::FOLDED_DEVICES);
}

/// The seeds of the `memory` fuzz target (gpudirect-trace/fuzz): the first
/// byte is the mode (bit 0: repeat the rest up to 1 MiB).
fn memory_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let with_mode = |mode: u8, rest: &[u8]| {
        let mut v = vec![mode];
        v.extend_from_slice(rest);
        v
    };
    // The 9.8 KB file of issue 19: one EVENTS block of 24 M events.
    let bomb = zstd::bulk::compress(&zero_events(24_000_000), 19).expect("compress");
    let bomb_file = file_with(&[(block::EVENTS, flag::ZSTD, bomb)]);
    let header_only = file_with(&[]);
    let end_len = format::encode_end_counted(&End::default(), 0).len();
    let head = &header_only[..header_only.len() - 16 - end_len];
    let mut damaged = head.to_vec();
    damaged.extend((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    let storm = "[ 1.0] DMAR: [DMA Read NO_PASID] Request device [00:02.0] fault addr 0x9c000 \
                 [fault reason 0x06] PTE Read access is not set\n";
    let aer = "pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0\n\
               nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer\n\
               nvidia 0000:01:00.0:    [ 0] RxErr\n";
    vec![
        ("events-bomb.gdt", with_mode(0, &bomb_file)),
        ("damaged-tail-repeated.gdt", with_mode(1, &damaged)),
        ("zeros-repeated", with_mode(1, &[0u8; 64])),
        ("fault-storm-repeated.log", with_mode(1, storm.as_bytes())),
        (
            "aer-continuations-repeated.log",
            with_mode(1, aer.as_bytes()),
        ),
    ]
}

#[test]
fn memory_fuzz_seeds_are_what_they_claim() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/memory");
    let seeds = memory_seeds();
    if std::env::var_os("GDT_WRITE_SEED").is_some() {
        std::fs::create_dir_all(dir).expect("mkdir");
        for (name, bytes) in &seeds {
            std::fs::write(format!("{dir}/{name}"), bytes).expect("write seed");
        }
    }
    for (name, bytes) in &seeds {
        let stored = std::fs::read(format!("{dir}/{name}")).expect("seed file");
        assert_eq!(
            &stored, bytes,
            "{name} is stale: GDT_WRITE_SEED=1 rewrites it"
        );
    }
    // The bomb is small, and refused as a block, not decoded.
    let bomb = &seeds[0].1;
    assert!(bomb.len() < 16 << 10, "{}", bomb.len());
    let (items, stats) = read(&bomb[1..]);
    assert_eq!(stats.undecodable_blocks, 1);
    assert!(items.iter().all(|i| !matches!(i, Item::Event { .. })));
}
