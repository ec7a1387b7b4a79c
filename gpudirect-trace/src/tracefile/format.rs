//! The bytes of a trace file (docs/trace-format.md): preamble, block framing,
//! and the payload encodings of each block type. Pure functions on byte
//! slices, shared by the writer, the reader and the fuzz target.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use super::varint::{put_varint, put_varint128, unzigzag, zigzag, Cursor, Malformed};

/// First 8 bytes of every trace file.
pub const MAGIC: [u8; 8] = *b"GDTRACE\0";
/// Format version written. A reader refuses a newer major version and reads
/// any minor version of its own major (minor versions only add block types,
/// header fields or flags that older readers may ignore).
pub const MAJOR: u16 = 1;
/// 1.1: FAULTS blocks hold typed kernel-log faults only (1.0: untyped
/// resolved faults, tracepoint ones included; see `legacy`). 1.3: blocks
/// are numbered (SEQ blocks, `sequence`), END says how many, and the
/// preamble carries its own checksum.
pub const MINOR: u16 = 3;
/// The first minor version whose preamble carries a checksum.
pub const MINOR_CHECKED: u16 = 3;
/// Magic (8) + major (2) + minor (2) + crc32c of those 12 bytes (4; 0 and
/// unchecked before 1.3).
pub const PREAMBLE_LEN: usize = 16;
/// Bytes before the payload: len u32, type u16, flags u16, crc32c u32.
pub const BLOCK_HEAD: usize = 12;
/// Head plus the trailing copy of len.
pub const BLOCK_OVERHEAD: usize = BLOCK_HEAD + 4;
/// Largest stored payload a reader accepts: above the largest raw payload
/// of any type (`max_raw`) plus zstd's worst-case expansion. It bounds what
/// a reader buffers for one block candidate (format limit since 1.0; the
/// writer stays far below: blocks are ~7 bytes per event, 65 536 events).
pub const MAX_PAYLOAD: usize = 24 << 20;
/// Events in one EVENTS block at most (the writer's batch).
pub const MAX_EVENTS_PER_BLOCK: usize = 1 << 16;
/// Most bytes one event can take in an EVENTS payload: 11 varint columns
/// (kind 3, ts 10, device 5, flags 3, dir/pid/tid 5 each, addr/phys 10 each
/// as 65-bit varints, size/aux 10 each: 76) plus the largest extra part (an
/// Xid: 5 + 5 + 2 + 160 message bytes).
pub const MAX_EVENT_BYTES: usize = 76 + 172;
/// Entries of a file's device table at most (a host has hundreds; names
/// past this are folded by the writer into one).
pub const MAX_DEVICES: usize = 1 << 16;
/// Bytes of one device name at most (the kernel's are below 32).
pub const MAX_DEVICE_NAME: usize = 256;
/// Hit counts in one CHECKPOINT at most: one per event kind (a u16).
pub const MAX_HIT_KINDS: usize = 1 << 16;
/// Faults in one FAULTS block at most (the writer splits longer lists).
pub const MAX_FAULTS_PER_BLOCK: usize = 4096;

/// Largest decompressed payload a reader accepts for a block type: what the
/// largest valid block of that type needs, so that a zstd bomb or a forged
/// length cannot make the reader allocate more (issue 19: one 9.8 KB block
/// that expanded to 24 M events made `report` use 13.4 GB).
pub const fn max_raw(typ: u16) -> usize {
    match typ {
        block::EVENTS => 16 + MAX_EVENTS_PER_BLOCK * MAX_EVENT_BYTES,
        block::DEVICES => 32 + MAX_DEVICES * (MAX_DEVICE_NAME + 2),
        block::HEADER => 8 << 20,
        block::CHECKPOINT => 4 << 20,
        block::FAULTS => 2 << 20,
        block::LOSS | block::END => 1 << 10,
        // JSON blocks: an incident, pids' names, one NVML reading of every
        // GPU, one driver change.
        block::TRIGGER | block::NVML => 1 << 20,
        block::NAMES => 4 << 20,
        block::DRIVERS => 64 << 10,
        block::STACKS => 8 << 20,
        block::SEQ => 64,
        _ => 0,
    }
}

/// Block types. Readers skip types they do not know.
pub mod block {
    pub const HEADER: u16 = 1;
    pub const DEVICES: u16 = 2;
    pub const EVENTS: u16 = 3;
    pub const LOSS: u16 = 4;
    pub const CHECKPOINT: u16 = 5;
    pub const END: u16 = 6;
    pub const FAULTS: u16 = 7;
    /// A flight-recorder trigger that fired while its snapshot was open
    /// (JSON `Trigger`); the snapshot's own trigger is in the header.
    pub const TRIGGER: u16 = 8;
    /// Names of pids seen (JSON `[ProcName]`), as the recorder looked them up.
    pub const NAMES: u16 = 9;
    /// An NVML reading of the GPUs (JSON `gpu::Sample`).
    pub const NVML: u16 = 10;
    /// A driver bound to or let go of a PCI device (JSON
    /// `model::pci::DriverChange`), recorded with `--check`.
    pub const DRIVERS: u16 = 11;
    /// Kernel stacks the misuse findings name, symbolized when taken (JSON
    /// `[model::misuse::StackFrames]`), recorded with `--stacks`.
    pub const STACKS: u16 = 12;
    /// The number of the block that follows and its checksum (1.3,
    /// `tracefile::sequence`).
    pub const SEQ: u16 = 13;
}

/// Bits of the block flags.
pub mod flag {
    /// The payload is one zstd frame.
    pub const ZSTD: u16 = 1;
    /// Flags this reader understands; a block with any other bit is skipped
    /// as unknown (a future encoding).
    pub const KNOWN: u16 = ZSTD;
}

pub fn preamble() -> [u8; PREAMBLE_LEN] {
    let mut p = [0u8; PREAMBLE_LEN];
    p[..8].copy_from_slice(&MAGIC);
    p[8..10].copy_from_slice(&MAJOR.to_le_bytes());
    p[10..12].copy_from_slice(&MINOR.to_le_bytes());
    let crc = crc32c::crc32c(&p[..12]);
    p[12..].copy_from_slice(&crc.to_le_bytes());
    p
}

/// What a preamble's checksum says about its version field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreambleCheck {
    /// The checksum matches.
    Checked,
    /// A version before checksums, reserved bytes 0: nothing to check.
    Unchecked,
    /// Wrong: the version field cannot be trusted.
    Damaged,
}

pub fn check_preamble(p: &[u8; PREAMBLE_LEN]) -> PreambleCheck {
    let stored = u32::from_le_bytes([p[12], p[13], p[14], p[15]]);
    let minor = u16::from_le_bytes([p[10], p[11]]);
    let major = u16::from_le_bytes([p[8], p[9]]);
    if stored == crc32c::crc32c(&p[..12]) {
        PreambleCheck::Checked
    } else if stored == 0 && major == 1 && minor < MINOR_CHECKED {
        PreambleCheck::Unchecked
    } else {
        PreambleCheck::Damaged
    }
}

/// The file header (block type HEADER, zstd-compressed JSON).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Header {
    pub hostname: String,
    pub kernel_release: String,
    /// /proc/sys/kernel/random/boot_id: timestamps of two files are
    /// comparable only when their boot ids are equal.
    pub boot_id: String,
    /// Always "CLOCK_MONOTONIC": the clock of every `ts_ns` in the file.
    pub clock: String,
    pub tool_version: String,
    /// CLOCK_MONOTONIC when recording started; `--from`/`--to` count from it.
    pub start_ts_ns: u64,
    /// Wall-clock time at `start_ts_ns`, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    pub aggregate_only: bool,
    /// The command traced (`record -- CMD ARGS`), if any.
    #[serde(default)]
    pub command: Vec<String>,
    /// The probe table as attached.
    pub probes: Vec<ProbeInfo>,
    /// PCI devices present when recording started.
    pub devices: Vec<PciDevice>,
    /// The host's NVIDIA GPUs (index, UUID, name, bus id).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<crate::gpu::GpuIdentity>,
    /// How DMA-API use was checked (`--check`); a report checks the same
    /// way. Absent: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<crate::model::misuse::CheckSetup>,
    /// Set in a flight-recorder snapshot: why it was written and what the
    /// in-memory ring held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotInfo>,
}

/// A trigger of the flight recorder (`record --ring`, `serve --snapshot-dir`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trigger {
    /// The trigger that matched: fault, xid, aer, map-error, signal, exit.
    pub name: String,
    /// What fired it, for file names: `xid79`, `fault`, `exit3`, ...
    pub label: String,
    /// CLOCK_MONOTONIC when it fired.
    pub at_ns: u64,
    /// The incident that fired it, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incident: Option<crate::model::Incident>,
    /// What it did when it did not start a snapshot (`open`: recorded in the
    /// open one, which it extended; `spacing`, `max-snapshots`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppressed: Option<String>,
}

/// What a snapshot is: its trigger and the ring it was cut from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    pub trigger: Trigger,
    /// CLOCK_MONOTONIC of the oldest block the ring still held.
    pub ring_from_ns: u64,
    /// The ring's bounds: duration and bytes (None: unbounded that way).
    pub ring_max_ns: Option<u64>,
    pub ring_max_bytes: Option<u64>,
    /// Events (and blocks) the ring had discarded before the trigger:
    /// history older than the snapshot holds.
    pub discarded_events: u64,
    pub discarded_blocks: u64,
    /// Recording went on this long after the trigger (`--after`).
    pub after_ns: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProbeInfo {
    pub name: String,
    pub kind: String,
    pub program: String,
    /// attached, unavailable, failed or loaded.
    pub status: String,
    pub reason: String,
    pub hot: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PciDevice {
    pub bus_id: String,
    pub vendor: String,
    pub device: String,
    pub class: String,
    pub driver: Option<String>,
    pub iommu_group: Option<u32>,
    pub numa_node: Option<i32>,
    /// The IOMMU group's default domain type (identity, DMA, DMA-FQ, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iommu_type: Option<String>,
    /// The PCI bridge (port) it hangs off, where it is not on a root bus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// The names the kernel gave the class devices on this function
    /// (`nvme0`, `nvme0n1`, `eth0`, `card0`, `mlx5_0`), sorted: `report
    /// --device nvme0n1` finds the function by them as `live` does on the
    /// host. Bounded (`MAX_CLASS_NAMES` of at most `MAX_CLASS_NAME` bytes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
}

/// Class device names kept per PCI function, and the longest kept: a
/// function has a handful (an NVMe: nvme0, nvme0n1, ng0n1; a NIC: eth0,
/// ptp0, mlx5_0, uverbs0); kernel names are short (IFNAMSIZ 16, disk 32).
pub const MAX_CLASS_NAMES: usize = 16;
pub const MAX_CLASS_NAME: usize = 64;

/// Events the kernel side dropped (ring buffer full) between two points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Loss {
    /// CLOCK_MONOTONIC when the loss was noticed (the drops happened since
    /// the previous loss record or the start).
    pub ts_ns: u64,
    /// Events dropped since the previous loss record.
    pub lost: u64,
    /// Events dropped since the start of the recording.
    pub total: u64,
}

/// One in-kernel (loss-free) counter: device, event kind, direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterRow {
    pub device: Arc<str>,
    pub kind: u32,
    pub dir: u32,
    pub count: u64,
    pub bytes: u64,
}

/// A snapshot of the kernel's per-device counters and self-statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    pub ts_ns: u64,
    /// Records streamed and written so far.
    pub events_written: u64,
    pub lost_total: u64,
    /// Tracepoint hits per event kind (index = event kind).
    pub hits: Vec<u64>,
    pub counters: Vec<CounterRow>,
}

/// The last block of a cleanly closed file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct End {
    pub ts_ns: u64,
    pub events_written: u64,
    pub lost_total: u64,
    /// Exit status of the traced command, if any (signals as 128 + n).
    pub exit_status: Option<i32>,
}

/// Frames `payload` as one block.
pub fn frame(out: &mut Vec<u8>, typ: u16, flags: u16, payload: &[u8]) {
    let len = u32::try_from(payload.len()).expect("block payloads stay below 4 GiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&typ.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&block_crc(typ, flags, payload).to_le_bytes());
    out.extend_from_slice(payload);
    out.extend_from_slice(&len.to_le_bytes());
}

/// crc32c over type, flags and payload (the lengths are checked by their
/// duplicate at the end of the block).
pub fn block_crc(typ: u16, flags: u16, payload: &[u8]) -> u32 {
    let mut tf = [0u8; 4];
    tf[..2].copy_from_slice(&typ.to_le_bytes());
    tf[2..].copy_from_slice(&flags.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&tf), payload)
}

/// Outcome of looking for a block at the start of a byte slice.
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// A complete, checksummed block; `total` bytes long.
    Valid { typ: u16, flags: u16, total: usize },
    /// Possibly a block, but the slice ends before it does.
    NeedMore(usize),
    /// Not a block.
    Invalid,
}

pub fn check_block(b: &[u8]) -> Check {
    if b.len() < BLOCK_HEAD {
        return Check::NeedMore(BLOCK_HEAD);
    }
    let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
    if len > MAX_PAYLOAD {
        return Check::Invalid;
    }
    let total = len + BLOCK_OVERHEAD;
    if b.len() < total {
        return Check::NeedMore(total);
    }
    let tail = u32::from_le_bytes([b[total - 4], b[total - 3], b[total - 2], b[total - 1]]);
    if tail as usize != len {
        return Check::Invalid;
    }
    let typ = u16::from_le_bytes([b[4], b[5]]);
    let flags = u16::from_le_bytes([b[6], b[7]]);
    let crc = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    if typ == 0 || block_crc(typ, flags, &b[BLOCK_HEAD..BLOCK_HEAD + len]) != crc {
        return Check::Invalid;
    }
    Check::Valid { typ, flags, total }
}

/// How many leading positions of `b` certainly start no block, judged from
/// the bytes present (length over the limit, type 0, trailing length
/// different): the scan over damage skips them in one tight loop (a damaged
/// 2 GB tail took 300 s in a debug build one `check_block` per byte).
pub fn implausible_prefix(b: &[u8]) -> usize {
    let mut i = 0;
    while i + BLOCK_HEAD <= b.len() {
        let len = u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]) as usize;
        let typ = u16::from_le_bytes([b[i + 4], b[i + 5]]);
        if len > MAX_PAYLOAD || typ == 0 {
            i += 1;
            continue;
        }
        let end = i + len + BLOCK_OVERHEAD;
        if end <= b.len() && b[end - 4..end] != (len as u32).to_le_bytes() {
            i += 1;
            continue;
        }
        break;
    }
    i
}

// ---- small blocks ----------------------------------------------------------

/// DEVICES: names `first..first + names.len()` of the file's device table.
pub fn encode_devices(first: u32, names: &[std::sync::Arc<str>]) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, u64::from(first));
    put_varint(&mut out, names.len() as u64);
    for n in names {
        put_varint(&mut out, n.len() as u64);
        out.extend_from_slice(n.as_bytes());
    }
    out
}

pub fn decode_devices(payload: &[u8]) -> Result<(u32, Vec<String>), Malformed> {
    let mut c = Cursor::new(payload);
    let first = c.varint_u32()?;
    let n = c.varint()? as usize;
    if n > c.remaining() {
        return Err(Malformed("device count larger than the payload"));
    }
    if first as usize + n > MAX_DEVICES {
        return Err(Malformed("device table beyond the format's limit"));
    }
    let mut names = Vec::with_capacity(n);
    for _ in 0..n {
        let len = c.varint()? as usize;
        if len > MAX_DEVICE_NAME {
            return Err(Malformed("device name longer than the format allows"));
        }
        // One field each, escaped (a name is shown on its own, in a line
        // of a report, a tag of an export).
        names.push(crate::sanitize::bytes(c.bytes(len)?).into_owned());
    }
    Ok((first, names))
}

pub fn encode_loss(l: &Loss) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [l.ts_ns, l.lost, l.total] {
        put_varint(&mut out, v);
    }
    out
}

pub fn decode_loss(payload: &[u8]) -> Result<Loss, Malformed> {
    let mut c = Cursor::new(payload);
    Ok(Loss {
        ts_ns: c.varint()?,
        lost: c.varint()?,
        total: c.varint()?,
    })
}

/// CHECKPOINT; `dev_index` maps a counter's device to the device table.
pub fn encode_checkpoint(cp: &Checkpoint, mut dev_index: impl FnMut(&str) -> u32) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [cp.ts_ns, cp.events_written, cp.lost_total] {
        put_varint(&mut out, v);
    }
    put_varint(&mut out, cp.hits.len() as u64);
    for &h in &cp.hits {
        put_varint(&mut out, h);
    }
    put_varint(&mut out, cp.counters.len() as u64);
    for r in &cp.counters {
        put_varint(&mut out, u64::from(dev_index(&r.device)));
        for v in [u64::from(r.kind), u64::from(r.dir), r.count, r.bytes] {
            put_varint(&mut out, v);
        }
    }
    out
}

pub fn decode_checkpoint(
    payload: &[u8],
    mut device: impl FnMut(u32) -> std::sync::Arc<str>,
) -> Result<Checkpoint, Malformed> {
    let mut c = Cursor::new(payload);
    let mut cp = Checkpoint {
        ts_ns: c.varint()?,
        events_written: c.varint()?,
        lost_total: c.varint()?,
        ..Default::default()
    };
    let n = c.varint()? as usize;
    if n > c.remaining() {
        return Err(Malformed("hit count larger than the payload"));
    }
    // One per event kind (u16): more is no writer's (4 MiB of hits would
    // take 32 MiB decoded).
    if n > MAX_HIT_KINDS {
        return Err(Malformed("more hit counts than there are event kinds"));
    }
    cp.hits = (0..n).map(|_| c.varint()).collect::<Result<_, _>>()?;
    let n = c.varint()? as usize;
    if n > c.remaining() {
        return Err(Malformed("counter count larger than the payload"));
    }
    for _ in 0..n {
        let dev = c.varint_u32()?;
        cp.counters.push(CounterRow {
            device: device(dev),
            kind: c.varint_u32()?,
            dir: c.varint_u32()?,
            count: c.varint()?,
            bytes: c.varint()?,
        });
    }
    Ok(cp)
}

pub fn encode_end(e: &End) -> Vec<u8> {
    let mut out = Vec::new();
    for v in [e.ts_ns, e.events_written, e.lost_total] {
        put_varint(&mut out, v);
    }
    match e.exit_status {
        Some(s) => {
            out.push(1);
            put_varint(&mut out, zigzag(i64::from(s)));
        }
        None => out.push(0),
    }
    out
}

/// END of a 1.3 writer: `encode_end`, then the count of numbered blocks
/// (older readers stop before it).
pub fn encode_end_counted(e: &End, numbered: u64) -> Vec<u8> {
    let mut out = encode_end(e);
    put_varint(&mut out, numbered);
    out
}

/// The count of numbered blocks an END says were written, if it says.
pub fn end_count(payload: &[u8]) -> Option<u64> {
    let mut c = Cursor::new(payload);
    for _ in 0..3 {
        c.varint().ok()?;
    }
    if c.varint().ok()? == 1 {
        c.varint().ok()?;
    }
    (c.remaining() > 0).then(|| c.varint().ok()).flatten()
}

pub fn decode_end(payload: &[u8]) -> Result<End, Malformed> {
    let mut c = Cursor::new(payload);
    let mut e = End {
        ts_ns: c.varint()?,
        events_written: c.varint()?,
        lost_total: c.varint()?,
        exit_status: None,
    };
    if c.varint()? == 1 {
        let s = unzigzag(c.varint()?);
        e.exit_status = Some(i32::try_from(s).map_err(|_| Malformed("exit status range"))?);
    }
    Ok(e)
}
