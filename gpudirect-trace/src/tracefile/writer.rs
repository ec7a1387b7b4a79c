//! Appending blocks to a trace file.
//!
//! Durability: every `flush` hands complete blocks to the kernel (`write` +
//! `flush` of the buffered writer, no fsync). A killed recorder loses at most
//! what was not yet flushed; a power loss loses what the page cache had not
//! written back. Either way the file reads up to its last complete block.

use std::{collections::HashMap, io, io::Write, sync::Arc};

use super::{
    columns::EventBatch,
    format::{self, block, flag, Checkpoint, End, Header, Loss},
    sequence,
};
use crate::decode::Record;

/// Events per EVENTS block at most (bounds memory and the reader's work per
/// block); the recorder also flushes every second.
pub const MAX_BATCH: u64 = format::MAX_EVENTS_PER_BLOCK as u64;
/// FAULTS blocks are cut at about this much JSON (half the reader's limit,
/// `format::max_raw(FAULTS)`).
const FAULTS_BLOCK_BYTES: usize = format::max_raw(block::FAULTS) / 2;
/// The device-table entry that names beyond `format::MAX_DEVICES` share.
pub const FOLDED_DEVICES: &str = "(devices beyond the file's table limit)";
/// zstd level 1, as `perf record -z` defaults to: measured on the H200
/// (docs/gpu-host.md session 12, 12 interleaved rounds) it takes the
/// record path from 155 to 124 ns per event against level 3 (zstd's own
/// default), for files 8.5% larger on the bench's synthetic stream and
/// 0.9% on a real H200 recording. The tracer's CPU at line rate is what
/// perturbs the workload; the disk is not. The fast levels go no further:
/// -1, -3 and -5 took 0-3 ns per event off the record path on the CI host
/// (bench_reader_cpu, two rounds, 78.3-78.7 ns at level 1) for files 32%,
/// 37% and 41% larger.
pub const ZSTD_LEVEL: i32 = 1;

/// Where a writer's bytes go: a file (any `Write`), or the flight
/// recorder's ring, which keeps blocks whole and needs to know what each
/// holds. Every call hands over the preamble (`typ` 0) or one complete
/// framed block.
pub trait BlockOut {
    fn put(&mut self, typ: u16, bytes: &[u8], events: u64) -> io::Result<()>;
    fn flush_out(&mut self) -> io::Result<()>;
}

impl<W: Write> BlockOut for W {
    fn put(&mut self, _typ: u16, bytes: &[u8], _events: u64) -> io::Result<()> {
        self.write_all(bytes)
    }

    fn flush_out(&mut self) -> io::Result<()> {
        self.flush()
    }
}

pub struct TraceWriter<W: BlockOut> {
    out: W,
    compressor: zstd::bulk::Compressor<'static>,
    devices: HashMap<Arc<str>, u32>,
    /// Names given an index but not yet written in a DEVICES block.
    new_devices: Vec<Arc<str>>,
    /// The last name looked up and its index.
    last_device: Option<(Arc<str>, u32)>,
    /// The caller's own name of the last [`TraceWriter::push_shared`] and
    /// its index: held, so the same address is the same name.
    last_shared: Option<(Arc<str>, u32)>,
    batch: EventBatch,
    scratch: Vec<u8>,
    /// The number of the next numbered block (`sequence`).
    next_number: u64,
    bytes_written: u64,
    events_written: u64,
}

impl<W: BlockOut> TraceWriter<W> {
    /// Writes the preamble and the header block.
    pub fn new(out: W, header: &Header) -> io::Result<Self> {
        let mut w = Self {
            out,
            compressor: zstd::bulk::Compressor::new(ZSTD_LEVEL)?,
            devices: HashMap::new(),
            new_devices: Vec::new(),
            last_device: None,
            last_shared: None,
            batch: EventBatch::default(),
            scratch: Vec::new(),
            next_number: 0,
            bytes_written: 0,
            events_written: 0,
        };
        let pre = format::preamble();
        w.out.put(0, &pre, 0)?;
        w.bytes_written += pre.len() as u64;
        let json = serde_json::to_vec(header)?;
        w.block(block::HEADER, &json, true, 0)?;
        w.out.flush_out()?;
        Ok(w)
    }

    /// Where the blocks go.
    pub fn out(&self) -> &W {
        &self.out
    }

    pub fn out_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Bytes written so far (including what is still buffered in `W`).
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Events handed to `push` so far.
    pub fn events_written(&self) -> u64 {
        self.events_written
    }

    fn block(&mut self, typ: u16, payload: &[u8], compress: bool, events: u64) -> io::Result<()> {
        if compress {
            let z = self.compressor.compress(payload)?;
            self.put_numbered(typ, flag::ZSTD, &z, events)
        } else {
            self.put_numbered(typ, 0, payload, events)
        }
    }

    /// Frames one block and hands it over, a numbered type with its SEQ
    /// block in front, in the same write (a ring keeps the pair whole).
    fn put_numbered(&mut self, typ: u16, flags: u16, body: &[u8], events: u64) -> io::Result<()> {
        self.scratch.clear();
        if sequence::numbered(typ) {
            let crc = format::block_crc(typ, flags, body);
            let seq = sequence::encode(self.next_number, crc);
            format::frame(&mut self.scratch, block::SEQ, 0, &seq);
            self.next_number += 1;
        }
        format::frame(&mut self.scratch, typ, flags, body);
        self.out.put(typ, &self.scratch, events)?;
        self.bytes_written += self.scratch.len() as u64;
        Ok(())
    }

    /// The device's index in the file's device table (new names are written
    /// in a DEVICES block before the next block that uses them).
    pub fn device_index(&mut self, name: &str) -> u32 {
        // The format bounds names and the table (the reader refuses more).
        let name = crate::sanitize::cut(name, format::MAX_DEVICE_NAME);
        // Records come in runs of one device: comparing with the last name
        // spares hashing the string per event (SipHash of the name was ~10%
        // of the record path's CPU, `cargo xtask bench` reader_cpu).
        if let Some((last, i)) = &self.last_device {
            if **last == *name {
                return *i;
            }
        }
        if let Some((n, &i)) = self.devices.get_key_value(name) {
            self.last_device = Some((n.clone(), i));
            return i;
        }
        // The last entry is kept for the names that do not fit.
        if self.devices.len() >= format::MAX_DEVICES - 1 && name != FOLDED_DEVICES {
            return self.device_index(FOLDED_DEVICES);
        }
        let i = self.devices.len() as u32;
        let name: Arc<str> = Arc::from(name);
        self.devices.insert(name.clone(), i);
        self.last_device = Some((name.clone(), i));
        self.new_devices.push(name);
        i
    }

    fn write_new_devices(&mut self) -> io::Result<()> {
        if self.new_devices.is_empty() {
            return Ok(());
        }
        let first = (self.devices.len() - self.new_devices.len()) as u32;
        let payload = format::encode_devices(first, &self.new_devices);
        self.new_devices.clear();
        self.block(block::DEVICES, &payload, true, 0)
    }

    /// Adds one event; writes a block when the batch is full.
    pub fn push(&mut self, record: &Record, device: &str) -> io::Result<()> {
        let i = self.device_index(device);
        self.push_at(record, i)
    }

    /// [`TraceWriter::push`] for a session's records, whose device names
    /// are shared: the same name is the same allocation, so the last one is
    /// recognised by its address (comparing the name's bytes was 2-8% of the
    /// record path's CPU per event, `bench_reader_cpu` under perf).
    pub fn push_shared(&mut self, record: &Record, device: &Arc<str>) -> io::Result<()> {
        let i = match &self.last_shared {
            Some((last, i)) if Arc::ptr_eq(last, device) => *i,
            _ => {
                let i = self.device_index(device);
                self.last_shared = Some((device.clone(), i));
                i
            }
        };
        self.push_at(record, i)
    }

    fn push_at(&mut self, record: &Record, i: u32) -> io::Result<()> {
        self.batch.push(record, i);
        self.events_written += 1;
        if self.batch.len() >= MAX_BATCH {
            self.write_events()?;
        }
        Ok(())
    }

    fn write_events(&mut self) -> io::Result<()> {
        self.write_new_devices()?;
        if self.batch.is_empty() {
            return Ok(());
        }
        let events = self.batch.len();
        let payload = self.batch.take_payload();
        self.block(block::EVENTS, &payload, true, events)
    }

    /// Writes the pending events as a block and flushes `W`.
    pub fn flush(&mut self) -> io::Result<()> {
        self.write_events()?;
        self.out.flush_out()
    }

    pub fn loss(&mut self, loss: &Loss) -> io::Result<()> {
        self.write_events()?;
        self.block(block::LOSS, &format::encode_loss(loss), false, 0)
    }

    pub fn checkpoint(&mut self, cp: &Checkpoint) -> io::Result<()> {
        self.write_events()?;
        // Indexes through device_index (names may be cut or folded), in
        // the order encode_checkpoint asks for them: one per row.
        let idx: Vec<u32> = cp
            .counters
            .iter()
            .map(|r| self.device_index(&r.device))
            .collect();
        self.write_new_devices()?;
        let mut idx = idx.into_iter();
        let payload = format::encode_checkpoint(cp, |_| idx.next().unwrap_or(0));
        self.block(block::CHECKPOINT, &payload, true, 0)
    }

    /// FAULTS: faults decoded from the kernel log, typed, as decoded (the
    /// ledger's conclusions are re-derived on reading). The events before
    /// it are written first, so the file keeps the arrival order.
    pub fn log_faults(&mut self, faults: &[crate::model::Fault]) -> io::Result<()> {
        if faults.is_empty() {
            return Ok(());
        }
        self.write_events()?;
        // Several blocks when the list is long: each within what a reader
        // accepts (format::MAX_FAULTS_PER_BLOCK, max_raw(FAULTS)).
        let mut json = vec![b'['];
        let mut n = 0;
        for f in faults {
            let one = serde_json::to_vec(f)?;
            if n > 0
                && (json.len() + one.len() + 1 > FAULTS_BLOCK_BYTES
                    || n == format::MAX_FAULTS_PER_BLOCK)
            {
                json.push(b']');
                self.block(block::FAULTS, &json, true, 0)?;
                json.truncate(1);
                n = 0;
            }
            if n > 0 {
                json.push(b',');
            }
            json.extend_from_slice(&one);
            n += 1;
        }
        json.push(b']');
        self.block(block::FAULTS, &json, true, 0)
    }

    /// One fault from the kernel log (see `log_faults`).
    pub fn log_fault(&mut self, fault: &crate::model::Fault) -> io::Result<()> {
        self.log_faults(std::slice::from_ref(fault))
    }

    /// Writes what is pending and the END block; returns the sink.
    pub fn finish(mut self, end: &End) -> io::Result<W> {
        self.write_events()?;
        let payload = format::encode_end_counted(end, self.next_number);
        self.block(block::END, &payload, false, 0)?;
        self.out.flush_out()?;
        Ok(self.out)
    }

    /// NAMES: names of pids seen.
    pub fn names(&mut self, names: &[crate::aggregate::ProcName]) -> io::Result<()> {
        self.json_lists(block::NAMES, names)
    }

    /// A JSON list as blocks of `typ`, each within half what a reader
    /// accepts of the type (`format::max_raw`): a long list (a fork storm's
    /// names) is split, never written as one block every reader refuses.
    fn json_lists<T: serde::Serialize>(&mut self, typ: u16, items: &[T]) -> io::Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        self.write_events()?;
        let limit = format::max_raw(typ) / 2;
        let mut json = vec![b'['];
        for item in items {
            let one = serde_json::to_vec(item)?;
            if json.len() > 1 && json.len() + one.len() + 1 > limit {
                json.push(b']');
                self.block(typ, &json, true, 0)?;
                json.truncate(1);
            }
            if json.len() > 1 {
                json.push(b',');
            }
            json.extend_from_slice(&one);
        }
        json.push(b']');
        self.block(typ, &json, true, 0)
    }

    /// DRIVERS: a driver bound to or let go of a device, after the events
    /// before it.
    pub fn driver(&mut self, c: &crate::model::pci::DriverChange) -> io::Result<()> {
        self.write_events()?;
        let json = serde_json::to_vec(c)?;
        self.block(block::DRIVERS, &json, true, 0)
    }

    /// STACKS: symbolized kernel stacks the findings name.
    pub fn stacks(&mut self, list: &[crate::model::misuse::StackFrames]) -> io::Result<()> {
        self.json_lists(block::STACKS, list)
    }

    /// NVML: one reading of the GPUs.
    pub fn nvml(&mut self, s: &crate::gpu::Sample) -> io::Result<()> {
        self.write_events()?;
        let json = serde_json::to_vec(s)?;
        self.block(block::NVML, &json, true, 0)
    }

    /// TRIGGER: a flight-recorder trigger recorded in an open snapshot.
    pub fn trigger(&mut self, t: &super::format::Trigger) -> io::Result<()> {
        self.write_events()?;
        let json = serde_json::to_vec(t)?;
        self.block(block::TRIGGER, &json, true, 0)
    }

    /// Every device name the file has used, in index order (a snapshot
    /// starts with them: the ring may have dropped the DEVICES blocks that
    /// first named them).
    pub fn device_names(&self) -> Vec<Arc<str>> {
        let mut v: Vec<(u32, Arc<str>)> =
            self.devices.iter().map(|(n, &i)| (i, n.clone())).collect();
        v.sort_by_key(|(i, _)| *i);
        v.into_iter().map(|(_, n)| n).collect()
    }

    /// Writes a block of a type this version does not define (tests of
    /// forward compatibility).
    pub fn raw_block(&mut self, typ: u16, flags: u16, payload: &[u8]) -> io::Result<()> {
        self.write_events()?;
        self.put_numbered(typ, flags, payload, 0)
    }
}

/// A complete framed block (for writers that assemble files from parts:
/// a flight-recorder snapshot's header and device table).
pub fn framed_block(typ: u16, payload: &[u8]) -> io::Result<Vec<u8>> {
    let z = zstd::bulk::compress(payload, ZSTD_LEVEL)?;
    let mut out = Vec::with_capacity(z.len() + format::BLOCK_OVERHEAD);
    format::frame(&mut out, typ, flag::ZSTD, &z);
    Ok(out)
}
