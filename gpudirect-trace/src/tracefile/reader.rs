//! Reading a trace file block by block, tolerating damage: a file cut at any
//! byte reads up to its last complete block; a corrupt block is skipped by
//! scanning for the next valid one; unknown block types are skipped.
//! Nothing in a file can make the reader panic (fuzzed: gpudirect-trace/fuzz).

use std::{collections::VecDeque, fmt, io, io::Read, sync::Arc};

use serde::Serialize;

use super::{
    columns,
    format::{self, block, flag, Check, Checkpoint, End, Header, Loss, Malformed},
};
use crate::decode::Record;

/// Why a file cannot be read at all.
#[derive(Debug)]
pub enum OpenError {
    Empty,
    NotATrace,
    NewerMajor {
        major: u16,
        minor: u16,
    },
    /// The preamble is there but the header block is cut or damaged.
    BadHeader(String),
    Io(io::Error),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::Empty => write!(f, "the file is empty (the recorder never wrote its header)"),
            OpenError::NotATrace => write!(
                f,
                "not a gpudirect-trace recording (no GDTRACE magic; make one with `gpudirect-trace record -o FILE`)"
            ),
            OpenError::NewerMajor { major, minor } => write!(
                f,
                "trace format version {major}.{minor} is newer than this gpudirect-trace reads ({}.x); \
                 use a newer gpudirect-trace",
                format::MAJOR
            ),
            OpenError::BadHeader(why) => write!(f, "the trace header is unreadable: {why}"),
            OpenError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for OpenError {}

impl From<io::Error> for OpenError {
    fn from(e: io::Error) -> Self {
        OpenError::Io(e)
    }
}

/// What reading found besides the data.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ReadStats {
    pub version: (u16, u16),
    pub blocks: u64,
    /// Damaged regions skipped in the middle of the file.
    pub corrupt_regions: u64,
    pub skipped_bytes: u64,
    pub unknown_blocks: u64,
    /// Blocks whose checksum was right but whose payload did not decode.
    pub undecodable_blocks: u64,
    /// Set when the file ends inside a block: the offset where the readable
    /// part ends (a recorder killed or a disk full).
    pub truncated_at: Option<u64>,
    /// The END block was read: the recorder closed the file.
    pub clean_end: bool,
    /// Strings of the file's JSON blocks clipped at
    /// `sanitize::json::TEXT_MAX` bytes, and list elements left out past
    /// `sanitize::json::LIST_MAX` (crafted files: no writer makes them).
    pub clipped_strings: u64,
    pub cut_list_items: u64,
    /// The preamble's checksum (1.3) is wrong: its version field was not
    /// trusted, the file was read as this reader's version.
    pub preamble_damaged: bool,
    /// What the blocks' sequence numbers said (1.3): missing, repeated,
    /// reordered blocks.
    pub sequence: super::sequence::SequenceStats,
}

#[derive(Clone, Debug)]
pub enum Item {
    Event {
        record: Record,
        device: Arc<str>,
    },
    Loss(Loss),
    Checkpoint(Checkpoint),
    End(End),
    /// A fault decoded from the kernel log, as the recorder took it (before
    /// the ledger): in arrival order among the events (boxed: a block's
    /// 65 536 events wait as items, each as large as the largest kind).
    LogFault(Box<crate::model::Fault>),
    /// A flight-recorder trigger that fired while the snapshot was written
    /// (rare: boxed, so the common items stay small).
    Trigger(Box<super::format::Trigger>),
    /// Names of pids seen.
    Names(Vec<crate::aggregate::ProcName>),
    /// A driver bound to or let go of a device (`--check`).
    Driver(crate::model::pci::DriverChange),
    /// Symbolized kernel stacks (`--stacks`).
    Stacks(Vec<crate::model::misuse::StackFrames>),
    /// An NVML reading of the GPUs.
    Nvml(Box<crate::gpu::Sample>),
}

/// A block as found: its type, flags, stored payload, stored checksum and
/// offset in the file.
struct RawBlock {
    typ: u16,
    flags: u16,
    payload: Vec<u8>,
    crc: u32,
    offset: u64,
}

const READ_CHUNK: usize = 256 << 10;
/// Bytes one block candidate may need from its first byte.
const WINDOW: usize = format::MAX_PAYLOAD + format::BLOCK_OVERHEAD;
/// The reader's buffer never holds more: a candidate needs at most
/// `WINDOW` bytes after `pos`, and twice that keeps compaction rare (each
/// byte is moved O(1) times). A file cannot raise it: damage is scanned
/// with `pos` moving forward, so scanned bytes are dropped (issue 19: a
/// damaged 2 GB tail used to be held in memory whole).
pub const MAX_BUFFER: usize = 2 * WINDOW + READ_CHUNK;

pub struct TraceReader<R: Read> {
    src: R,
    /// File bytes from offset `buf_off`; `pos` indexes the next unread one.
    buf: Vec<u8>,
    buf_off: u64,
    pos: usize,
    eof: bool,
    header: Header,
    devices: Vec<Arc<str>>,
    pending: VecDeque<Item>,
    stats: ReadStats,
    done: bool,
    /// Reused for every compressed block.
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    /// The blocks' sequence numbers as read so far.
    seq: super::sequence::Sequence,
    /// The next block repeats one read before: skipped.
    skip_next: bool,
}

impl<R: Read> TraceReader<R> {
    pub fn new(src: R) -> Result<Self, OpenError> {
        let mut r = Self {
            src,
            buf: Vec::new(),
            buf_off: 0,
            pos: 0,
            eof: false,
            header: Header::default(),
            devices: Vec::new(),
            pending: VecDeque::new(),
            stats: ReadStats::default(),
            done: false,
            zstd: None,
            seq: Default::default(),
            skip_next: false,
        };
        r.fill(format::PREAMBLE_LEN)?;
        if r.buf.is_empty() {
            return Err(OpenError::Empty);
        }
        let n = r.buf.len().min(8);
        if r.buf[..n] != format::MAGIC[..n] {
            return Err(OpenError::NotATrace);
        }
        if r.buf.len() < format::PREAMBLE_LEN {
            return Err(OpenError::BadHeader(format!(
                "the file ends after {} bytes, inside the preamble",
                r.buf.len()
            )));
        }
        let mut major = u16::from_le_bytes([r.buf[8], r.buf[9]]);
        let mut minor = u16::from_le_bytes([r.buf[10], r.buf[11]]);
        let mut pre = [0u8; format::PREAMBLE_LEN];
        pre.copy_from_slice(&r.buf[..format::PREAMBLE_LEN]);
        if format::check_preamble(&pre) == format::PreambleCheck::Damaged {
            // The version field cannot be trusted: read as this reader's
            // version (one before checksums where the checksum is 0), and
            // say so.
            r.stats.preamble_damaged = true;
            major = format::MAJOR;
            minor = if pre[12..] == [0; 4] {
                format::MINOR_CHECKED - 1
            } else {
                format::MINOR
            };
        }
        if major > format::MAJOR {
            return Err(OpenError::NewerMajor { major, minor });
        }
        r.stats.version = (major, minor);
        r.pos = format::PREAMBLE_LEN;
        match r.block_at_pos()? {
            Some(RawBlock {
                typ: block::HEADER,
                flags,
                payload,
                ..
            }) => {
                let raw = r
                    .payload_bytes(block::HEADER, flags, &payload)
                    .map_err(|e| OpenError::BadHeader(e.to_string()))?;
                let json = r
                    .clean_json(&raw)
                    .map_err(|e| OpenError::BadHeader(e.to_string()))?;
                r.header = serde_json::from_slice(&json)
                    .map_err(|e| OpenError::BadHeader(format!("header JSON: {e}")))?;
                r.stats.blocks += 1;
                Ok(r)
            }
            Some(RawBlock { typ, .. }) => Err(OpenError::BadHeader(format!(
                "the first block has type {typ}, not the header"
            ))),
            None => Err(OpenError::BadHeader(format!(
                "no complete header block at offset {} (file cut while it was being created?)",
                format::PREAMBLE_LEN
            ))),
        }
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn stats(&self) -> &ReadStats {
        &self.stats
    }

    /// Capacity of the read buffer (tests of its bound).
    #[cfg(test)]
    pub(crate) fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The file's device table as read so far.
    pub fn devices(&self) -> &[Arc<str>] {
        &self.devices
    }

    /// Makes at least `n` (at most `WINDOW`) bytes available from `pos`,
    /// unless the file ends. The buffer stays within `MAX_BUFFER`.
    fn fill(&mut self, n: usize) -> io::Result<()> {
        debug_assert!(n <= WINDOW);
        while !self.eof && self.buf.len() - self.pos < n {
            let full = self.buf.len() + READ_CHUNK > MAX_BUFFER;
            if full || (self.pos > READ_CHUNK && self.pos * 2 > self.buf.len()) {
                self.buf.drain(..self.pos);
                self.buf_off += self.pos as u64;
                self.pos = 0;
            }
            // A chunk at a time: a damaged length field may ask for up to
            // MAX_PAYLOAD bytes that the file does not have. Capacity grows
            // by doubling but never past MAX_BUFFER.
            let old = self.buf.len();
            let need = old + READ_CHUNK;
            if self.buf.capacity() < need {
                let target = (self.buf.capacity() * 2).clamp(need, MAX_BUFFER.max(need));
                self.buf.reserve_exact(target - old);
            }
            self.buf.resize(need, 0);
            let got = loop {
                match self.src.read(&mut self.buf[old..]) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    other => break other,
                }
            };
            match got {
                Ok(0) => {
                    self.buf.truncate(old);
                    self.eof = true;
                }
                Ok(k) => self.buf.truncate(old + k),
                Err(e) => {
                    self.buf.truncate(old);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Checks for a block at `pos`, reading as needed.
    fn check_at_pos(&mut self) -> io::Result<Check> {
        loop {
            match format::check_block(&self.buf[self.pos..]) {
                // fill() reads enough or reaches the end of the file.
                Check::NeedMore(n) if !self.eof => self.fill(n)?,
                other => return Ok(other),
            }
        }
    }

    /// The next valid block from `pos`, skipping damage. None at the end.
    /// While scanning, `pos` moves one byte at a time past the damage (so
    /// the buffer can drop what was scanned); `start_off` remembers where
    /// the damage began.
    fn block_at_pos(&mut self) -> io::Result<Option<RawBlock>> {
        self.fill(format::BLOCK_HEAD)?;
        if self.pos == self.buf.len() {
            return Ok(None);
        }
        let start_off = self.buf_off + self.pos as u64;
        loop {
            match self.check_at_pos()? {
                Check::Valid { typ, flags, total } => {
                    let at = self.pos;
                    let payload = self.buf[at + format::BLOCK_HEAD..at + total - 4].to_vec();
                    let crc = u32::from_le_bytes([
                        self.buf[at + 8],
                        self.buf[at + 9],
                        self.buf[at + 10],
                        self.buf[at + 11],
                    ]);
                    let offset = self.buf_off + at as u64;
                    let skipped = offset - start_off;
                    if skipped > 0 {
                        self.stats.corrupt_regions += 1;
                        self.stats.skipped_bytes += skipped;
                    }
                    self.pos = at + total;
                    return Ok(Some(RawBlock {
                        typ,
                        flags,
                        payload,
                        crc,
                        offset,
                    }));
                }
                Check::NeedMore(_) | Check::Invalid => {
                    // No block here: scan on. At the end of the file, the
                    // readable part ended where the damage began.
                    if self.pos + 1 >= self.buf.len() && self.eof {
                        self.stats.truncated_at = Some(start_off);
                        self.pos = self.buf.len();
                        return Ok(None);
                    }
                    self.pos += 1;
                    self.pos += format::implausible_prefix(&self.buf[self.pos..]);
                    if self.buf.len() - self.pos < format::BLOCK_HEAD {
                        self.fill(format::BLOCK_HEAD)?;
                    }
                }
            }
        }
    }

    /// The payload of a block, decompressed; bounded by the block type's
    /// limit (`format::max_raw`) before anything is allocated.
    fn payload_bytes(
        &mut self,
        typ: u16,
        flags: u16,
        payload: &[u8],
    ) -> Result<Vec<u8>, Malformed> {
        let limit = format::max_raw(typ);
        if flags & flag::ZSTD == 0 {
            if payload.len() > limit {
                return Err(Malformed("payload larger than its block type allows"));
            }
            return Ok(payload.to_vec());
        }
        // One frame, exactly the payload; its declared size within the limit.
        let frame = zstd::zstd_safe::find_frame_compressed_size(payload)
            .map_err(|_| Malformed("payload is not a zstd frame"))?;
        if frame != payload.len() {
            return Err(Malformed("payload is not exactly one zstd frame"));
        }
        let declared = match zstd::zstd_safe::get_frame_content_size(payload) {
            Ok(Some(n)) if n > limit as u64 => {
                return Err(Malformed(
                    "declared decompressed size over the block type's limit",
                ))
            }
            Ok(n) => n,
            Err(_) => return Err(Malformed("zstd frame header")),
        };
        let capacity = declared.map_or(limit, |n| n as usize);
        let dec = match &mut self.zstd {
            Some(d) => d,
            none => {
                none.insert(zstd::bulk::Decompressor::new().map_err(|_| Malformed("zstd init"))?)
            }
        };
        let mut out = Vec::with_capacity(capacity);
        // The output cannot grow past `capacity`: a frame that expands
        // beyond its declared size fails here, for this block only.
        let n = dec
            .decompress_to_buffer(payload, &mut out)
            .map_err(|_| Malformed("zstd frame does not decompress within its declared size"))?;
        if declared.is_some_and(|d| d != n as u64) {
            return Err(Malformed("zstd frame size differs from its declaration"));
        }
        Ok(out)
    }

    /// The next item; None at the end of the readable data. Damage is
    /// counted in `stats`, never returned as an error; an I/O error ends the
    /// reading and is returned.
    pub fn next_item(&mut self) -> io::Result<Option<Item>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Ok(Some(item));
            }
            if self.done {
                return Ok(None);
            }
            let Some(RawBlock {
                typ,
                flags,
                payload,
                crc,
                offset,
            }) = self.block_at_pos()?
            else {
                self.done = true;
                self.stats.sequence = self.seq.finish();
                return Ok(None);
            };
            self.stats.blocks += 1;
            if typ == block::SEQ {
                match super::sequence::decode(&payload) {
                    Ok((n, named)) => {
                        let from_start = self.header.snapshot.is_none();
                        self.skip_next = !self.seq.seq(n, named, offset, from_start);
                    }
                    Err(_) => self.stats.undecodable_blocks += 1,
                }
                continue;
            }
            if std::mem::take(&mut self.skip_next) {
                // A copy of a block read before: no phantom events.
                continue;
            }
            self.seq.block(typ, crc);
            if typ == block::END {
                let raw = self.payload_bytes(typ, flags, &payload).unwrap_or_default();
                self.seq.end(format::end_count(&raw), offset);
            }
            if flags & !flag::KNOWN != 0 {
                self.stats.unknown_blocks += 1;
                continue;
            }
            let known = matches!(
                typ,
                block::HEADER
                    | block::DEVICES
                    | block::EVENTS
                    | block::LOSS
                    | block::CHECKPOINT
                    | block::END
                    | block::FAULTS
                    | block::TRIGGER
                    | block::NAMES
                    | block::NVML
                    | block::DRIVERS
                    | block::STACKS
                    | block::SEQ
            );
            if !known {
                self.stats.unknown_blocks += 1;
                continue;
            }
            if let Err(e) = self.process(typ, flags, &payload) {
                log::debug!("block of type {typ}: {e}");
                self.stats.undecodable_blocks += 1;
            }
        }
    }

    fn device(&self, i: u32) -> Arc<str> {
        match self.devices.get(i as usize) {
            Some(n) => n.clone(),
            None => Arc::from(format!("(device #{i}: name lost)")),
        }
    }

    /// A JSON block's bytes with every string escaped and clipped and every
    /// list cut (`sanitize::json`): nothing a file names reaches a view raw
    /// or unbounded.
    fn clean_json(&mut self, raw: &[u8]) -> Result<Vec<u8>, Malformed> {
        let mut cut = crate::sanitize::json::Cut::default();
        let json = crate::sanitize::json::clean(raw, &mut cut)
            .map_err(|_| Malformed("JSON nested too deep"))?;
        self.stats.clipped_strings += cut.strings;
        self.stats.cut_list_items += cut.list_items;
        Ok(json)
    }

    fn process(&mut self, typ: u16, flags: u16, payload: &[u8]) -> Result<(), Malformed> {
        let mut raw = self.payload_bytes(typ, flags, payload)?;
        if matches!(
            typ,
            block::FAULTS
                | block::TRIGGER
                | block::NAMES
                | block::NVML
                | block::STACKS
                | block::DRIVERS
        ) {
            raw = self.clean_json(&raw)?;
        }
        match typ {
            block::DEVICES => {
                // decode_devices bounds `first + names` by MAX_DEVICES.
                let (first, names) = format::decode_devices(&raw)?;
                let first = first as usize;
                for (k, name) in names.into_iter().enumerate() {
                    let i = first + k;
                    while self.devices.len() < i {
                        let gap = self.devices.len();
                        self.devices
                            .push(Arc::from(format!("(device #{gap}: name lost)")));
                    }
                    let name: Arc<str> = Arc::from(name);
                    if i < self.devices.len() {
                        self.devices[i] = name;
                    } else {
                        self.devices.push(name);
                    }
                }
            }
            block::EVENTS => {
                for (record, d) in columns::decode_events(&raw)? {
                    let device = self.device(d);
                    self.pending.push_back(Item::Event { record, device });
                }
            }
            block::LOSS => self
                .pending
                .push_back(Item::Loss(format::decode_loss(&raw)?)),
            block::CHECKPOINT => {
                let cp = format::decode_checkpoint(&raw, |i| self.device(i))?;
                self.pending.push_back(Item::Checkpoint(cp));
            }
            block::TRIGGER => {
                let t = json(&raw, "trigger JSON")?;
                self.pending.push_back(Item::Trigger(Box::new(t)));
            }
            block::NAMES => self
                .pending
                .push_back(Item::Names(json(&raw, "names JSON")?)),
            block::NVML => {
                let s = json(&raw, "NVML JSON")?;
                self.pending.push_back(Item::Nvml(Box::new(s)));
            }
            block::STACKS => self
                .pending
                .push_back(Item::Stacks(json(&raw, "stacks JSON")?)),
            block::DRIVERS => self
                .pending
                .push_back(Item::Driver(json(&raw, "driver JSON")?)),
            block::END => {
                self.stats.clean_end = true;
                self.pending.push_back(Item::End(format::decode_end(&raw)?));
            }
            block::FAULTS => {
                let list: Vec<serde_json::Value> = json(&raw, "faults JSON")?;
                if list.len() > format::MAX_FAULTS_PER_BLOCK {
                    return Err(Malformed("more faults than a block may hold"));
                }
                let mut faults = Vec::with_capacity(list.len());
                for v in &list {
                    if self.stats.version.1 == 0 {
                        faults.extend(super::legacy::log_fault_1_0(v));
                    } else {
                        let f = serde_json::from_value(v.clone())
                            .map_err(|_| Malformed("fault record"))?;
                        faults.push(f);
                    }
                }
                self.pending
                    .extend(faults.into_iter().map(|f| Item::LogFault(Box::new(f))));
            }
            _ => {} // a second header: ignored
        }
        Ok(())
    }
}

/// A JSON block's payload (cleaned by `clean_json`) as `T`; `what` names the
/// block in the error, as every JSON block's parse reports it.
fn json<T: serde::de::DeserializeOwned>(raw: &[u8], what: &'static str) -> Result<T, Malformed> {
    serde_json::from_slice(raw).map_err(|_| Malformed(what))
}
