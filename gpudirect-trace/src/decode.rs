//! Ring buffer records to typed events. The first u16 of every record is its
//! kind, which fixes the record's layout (gpudirect-trace-common).

use std::fmt;

use gpudirect_trace_common::{
    kind::{self, Layout},
    Event, SgEvent, XidEvent,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    Event(Event),
    Sg(SgEvent),
    Xid(XidEvent),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    TooShort { kind: u16, len: usize, need: usize },
    UnknownKind(u16),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::TooShort { kind, len, need } => {
                write!(f, "record of kind {kind} is {len} bytes, expected {need}")
            }
            DecodeError::UnknownKind(k) => write!(f, "unknown record kind {k}"),
        }
    }
}

impl std::error::Error for DecodeError {}

fn read<T: Copy>(bytes: &[u8], kind: u16) -> Result<T, DecodeError> {
    let need = std::mem::size_of::<T>();
    if bytes.len() < need {
        return Err(DecodeError::TooShort {
            kind,
            len: bytes.len(),
            need,
        });
    }
    // SAFETY: length checked; T is a repr(C) struct of integers, valid for
    // any bit pattern; read_unaligned tolerates any alignment.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
    let mut r = Record::Event(Event::default());
    decode_into(bytes, &mut r).map(|()| r)
}

/// `decode` into a record the caller keeps across records (the session's
/// drain): a `Record` is 240 bytes (an Xid's message), and moving the
/// decoded value out of a `Result` cost a 240-byte copy per record, ~3% of
/// the reader's CPU per event (perf, bench_reader_cpu). On an error `out`
/// is left as it was.
pub fn decode_into(bytes: &[u8], out: &mut Record) -> Result<(), DecodeError> {
    if bytes.len() < 2 {
        return Err(DecodeError::TooShort {
            kind: 0,
            len: bytes.len(),
            need: 2,
        });
    }
    let k = u16::from_ne_bytes([bytes[0], bytes[1]]);
    // Counter-only kinds (and kind 0, and kinds past the ABI) are never
    // records. Each arm writes its variant alone: only the bytes it has.
    match kind::info(k).layout {
        _ if k == 0 || u32::from(k) >= kind::COUNT => return Err(DecodeError::UnknownKind(k)),
        Layout::Sg => *out = Record::Sg(read::<SgEvent>(bytes, k)?),
        Layout::Xid => *out = Record::Xid(read::<XidEvent>(bytes, k)?),
        Layout::Event => *out = Record::Event(read::<Event>(bytes, k)?),
        Layout::CounterOnly => return Err(DecodeError::UnknownKind(k)),
    }
    Ok(())
}

impl Record {
    pub fn event(&self) -> &Event {
        match self {
            Record::Event(e) => e,
            Record::Sg(s) => &s.event,
            Record::Xid(x) => &x.event,
        }
    }
}

pub use gpudirect_trace_common::kind_name;

/// `enum dma_data_direction` names.
pub fn dir_name(dir: u32) -> &'static str {
    gpudirect_trace_common::dir::NAMES
        .get(dir as usize)
        .copied()
        .unwrap_or("invalid")
}

/// The text of a NUL-terminated byte buffer.
pub fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// A NUL-terminated message from the kernel or a trace file (an Xid's) as
/// one field: control characters shown as `\xNN` (`sanitize::text`), so a
/// line feed in it cannot start a line of its own in any view.
pub fn c_text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    crate::sanitize::bytes(&bytes[..end]).into_owned()
}

/// A process-exit record's (`kind::PROC_EXIT`) pid and name; control
/// characters (a name is whatever prctl(PR_SET_NAME) set) become `?`. Its
/// cgroup v2 id is the record's `size`.
pub fn process_exit(record: &Record) -> Option<(u32, String)> {
    let ev = record.event();
    if ev.kind != kind::PROC_EXIT || ev.pid == 0 {
        return None;
    }
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&ev.addr.to_le_bytes());
    b[8..].copy_from_slice(&ev.phys.to_le_bytes());
    let name: String = c_string(&b)
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    (!name.is_empty()).then_some((ev.pid, name))
}

#[cfg(test)]
mod tests {
    use gpudirect_trace_common::{SG_LENS, XID_MSG_LEN};

    use super::*;

    fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
        // SAFETY: reading the bytes of a repr(C) POD value.
        unsafe {
            std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>())
        }
        .to_vec()
    }

    #[test]
    fn round_trips_each_layout() {
        let ev = Event {
            kind: kind::DMA_MAP,
            dir: 2,
            ts_ns: 42,
            dev: 0xffff_8880_0000_1000,
            addr: 0xfff0_0000,
            size: 4096,
            ..Default::default()
        };
        assert_eq!(decode(&bytes_of(&ev)), Ok(Record::Event(ev)));

        let mut sg = SgEvent {
            event: Event {
                kind: kind::DMA_MAP_SG,
                ..Default::default()
            },
            nents: 3,
            ents: 2,
            n_lens: 3,
            _pad: 0,
            lens: [0; SG_LENS],
        };
        sg.lens[..3].copy_from_slice(&[4096, 8192, 512]);
        assert_eq!(decode(&bytes_of(&sg)), Ok(Record::Sg(sg)));

        let mut xid = XidEvent {
            event: Event {
                kind: kind::NV_XID,
                ..Default::default()
            },
            xid: 79,
            msg_truncated: 0,
            msg: [0; XID_MSG_LEN],
        };
        xid.msg[..5].copy_from_slice(b"hello");
        let Ok(Record::Xid(got)) = decode(&bytes_of(&xid)) else {
            panic!("xid record did not decode as Xid");
        };
        assert_eq!(got.xid, 79);
        assert_eq!(c_string(&got.msg), "hello");
    }

    #[test]
    fn rejects_short_and_unknown_records() {
        assert!(matches!(decode(&[1]), Err(DecodeError::TooShort { .. })));
        let mut b = vec![0u8; 64];
        b[0] = kind::DMA_MAP_SG as u8;
        assert!(matches!(
            decode(&b),
            Err(DecodeError::TooShort { need: 144, .. })
        ));
        b[0] = kind::LATENCY as u8;
        assert!(
            matches!(decode(&b), Ok(Record::Event(_))),
            "latency records decode"
        );
        b[0] = 200;
        assert_eq!(decode(&b), Err(DecodeError::UnknownKind(200)));
    }

    #[test]
    fn a_process_exit_names_its_pid_without_control_bytes() {
        let mut w = [0u8; 16];
        w[..7].copy_from_slice(b"dd\x1b[2Jx");
        let ev = Event {
            kind: kind::PROC_EXIT,
            pid: 180,
            addr: u64::from_le_bytes(w[..8].try_into().expect("8 bytes")),
            phys: u64::from_le_bytes(w[8..].try_into().expect("8 bytes")),
            ..Default::default()
        };
        let r = decode(&bytes_of(&ev)).expect("decodes");
        assert_eq!(process_exit(&r), Some((180, "dd?[2Jx".to_owned())));
        let full = Event {
            addr: u64::from_le_bytes(*b"abcdefgh"),
            phys: u64::from_le_bytes(*b"ijklmno\0"),
            ..ev
        };
        let r = decode(&bytes_of(&full)).expect("decodes");
        assert_eq!(process_exit(&r), Some((180, "abcdefghijklmno".to_owned())));
        let other = Event {
            kind: kind::DMA_MAP,
            ..ev
        };
        assert_eq!(
            process_exit(&decode(&bytes_of(&other)).expect("decodes")),
            None
        );
    }
}
