//! The EVENTS block payload: events stored column by column as varints
//! (docs/trace-format.md, "EVENTS"), which zstd then compresses.

use gpudirect_trace_common::{
    kind::{self, Layout},
    Event, SgEvent, XidEvent, SG_LENS, XID_MSG_LEN,
};

use super::format::{put_varint, put_varint128, unzigzag, zigzag, Cursor, Malformed};
use crate::decode::Record;

/// An address column: 0 is stored as 0, anything else as 1 + zigzag of the
/// difference to the previous non-zero value (map/unmap streams revisit
/// nearby addresses, so differences are short).
#[derive(Default)]
struct AddrCol {
    prev: u64,
}

impl AddrCol {
    fn put(&mut self, out: &mut Vec<u8>, v: u64) {
        if v == 0 {
            out.push(0);
            return;
        }
        let d = zigzag(v.wrapping_sub(self.prev) as i64);
        self.prev = v;
        // The same bytes either way; 128-bit arithmetic only for the one
        // value past u64.
        match d.checked_add(1) {
            Some(t) => put_varint(out, t),
            None => put_varint128(out, u128::from(d) + 1),
        }
    }

    fn get(&mut self, c: &mut Cursor<'_>) -> Result<u64, Malformed> {
        let t = c.varint128(65)?;
        if t == 0 {
            return Ok(0);
        }
        let d = u64::try_from(t - 1).map_err(|_| Malformed("address delta out of range"))?;
        let v = self.prev.wrapping_add(unzigzag(d) as u64);
        self.prev = v;
        Ok(v)
    }
}

/// Events being collected for one EVENTS block, one byte column per field
/// (columns compress far better than rows). Device indexes refer to the
/// file's device table (DEVICES blocks).
#[derive(Default)]
pub struct EventBatch {
    n: u64,
    kinds: Vec<u8>,
    ts: Vec<u8>,
    dev: Vec<u8>,
    flags: Vec<u8>,
    dir: Vec<u8>,
    pid: Vec<u8>,
    tid: Vec<u8>,
    addr: Vec<u8>,
    phys: Vec<u8>,
    size: Vec<u8>,
    aux: Vec<u8>,
    extra: Vec<u8>,
    prev_ts: u64,
    addr_col: AddrCol,
    phys_col: AddrCol,
}

impl EventBatch {
    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn push(&mut self, record: &Record, dev_index: u32) {
        let e = record.event();
        self.n += 1;
        put_varint(&mut self.kinds, u64::from(e.kind));
        put_varint(
            &mut self.ts,
            zigzag(e.ts_ns.wrapping_sub(self.prev_ts) as i64),
        );
        self.prev_ts = e.ts_ns;
        put_varint(&mut self.dev, u64::from(dev_index));
        put_varint(&mut self.flags, u64::from(e.flags));
        put_varint(&mut self.dir, u64::from(e.dir));
        put_varint(&mut self.pid, u64::from(e.pid));
        put_varint(&mut self.tid, u64::from(e.tid));
        self.addr_col.put(&mut self.addr, e.addr);
        self.phys_col.put(&mut self.phys, e.phys);
        put_varint(&mut self.size, e.size);
        put_varint(&mut self.aux, e.aux);
        // The kind fixes the layout (as in the ring buffer), not the variant.
        match (kind::info(e.kind).layout, record) {
            (Layout::Sg, r) => {
                let sg = match r {
                    Record::Sg(sg) => *sg,
                    _ => SgEvent::default(),
                };
                let n = (sg.n_lens as usize).min(SG_LENS);
                put_varint(&mut self.extra, u64::from(sg.nents));
                put_varint(&mut self.extra, u64::from(sg.ents));
                put_varint(&mut self.extra, u64::from(sg.n_lens));
                for &l in &sg.lens[..n] {
                    put_varint(&mut self.extra, u64::from(l));
                }
            }
            (Layout::Xid, r) => {
                let (xid, trunc, msg) = match r {
                    Record::Xid(x) => {
                        let end = x.msg.iter().position(|&b| b == 0).unwrap_or(XID_MSG_LEN);
                        (x.xid, x.msg_truncated, &x.msg[..end])
                    }
                    _ => (0, 0, &[][..]),
                };
                put_varint(&mut self.extra, u64::from(xid));
                put_varint(&mut self.extra, u64::from(trunc));
                put_varint(&mut self.extra, msg.len() as u64);
                self.extra.extend_from_slice(msg);
            }
            _ => {}
        }
    }

    /// The uncompressed EVENTS payload; leaves the batch empty.
    pub fn take_payload(&mut self) -> Vec<u8> {
        let cols = [
            &self.kinds,
            &self.ts,
            &self.dev,
            &self.flags,
            &self.dir,
            &self.pid,
            &self.tid,
            &self.addr,
            &self.phys,
            &self.size,
            &self.aux,
            &self.extra,
        ];
        let mut out = Vec::with_capacity(10 + cols.iter().map(|c| c.len()).sum::<usize>());
        put_varint(&mut out, self.n);
        for c in cols {
            out.extend_from_slice(c);
        }
        self.clear();
        out
    }

    /// Empty, as `default()`, but the columns keep their room for the next
    /// block (growing them again from nothing, block after block, was ~1%
    /// of the record path's CPU per event in reallocations).
    fn clear(&mut self) {
        let Self {
            n,
            kinds,
            ts,
            dev,
            flags,
            dir,
            pid,
            tid,
            addr,
            phys,
            size,
            aux,
            extra,
            prev_ts,
            addr_col,
            phys_col,
        } = self;
        for c in [
            kinds, ts, dev, flags, dir, pid, tid, addr, phys, size, aux, extra,
        ] {
            c.clear();
        }
        *n = 0;
        *prev_ts = 0;
        *addr_col = AddrCol::default();
        *phys_col = AddrCol::default();
    }
}

/// Decodes an EVENTS payload into records and device indexes. `Event::dev`
/// of a decoded record is the file's device index + 1, not a kernel pointer.
pub fn decode_events(payload: &[u8]) -> Result<Vec<(Record, u32)>, Malformed> {
    let mut c = Cursor::new(payload);
    let n = c.varint()? as usize;
    if n > super::format::MAX_EVENTS_PER_BLOCK {
        return Err(Malformed("more events than a block may hold"));
    }
    // Every event takes at least one byte in each of 11 columns.
    if n.saturating_mul(11) > c.remaining() {
        return Err(Malformed("event count larger than the payload"));
    }
    let mut ev = vec![Event::default(); n];
    for e in ev.iter_mut() {
        e.kind = u16::try_from(c.varint()?).map_err(|_| Malformed("kind exceeds 16 bits"))?;
    }
    let mut ts = 0u64;
    for e in ev.iter_mut() {
        ts = ts.wrapping_add(unzigzag(c.varint()?) as u64);
        e.ts_ns = ts;
    }
    let mut devs = vec![0u32; n];
    for d in devs.iter_mut() {
        *d = c.varint_u32()?;
        // Beyond the table's limit: no writer wrote it; refusing it bounds
        // the distinct "(device #N: name lost)" rows a reader can make.
        if *d as usize >= super::format::MAX_DEVICES {
            return Err(Malformed("device index beyond the format's limit"));
        }
    }
    for e in ev.iter_mut() {
        e.flags = u16::try_from(c.varint()?).map_err(|_| Malformed("flags exceed 16 bits"))?;
    }
    for e in ev.iter_mut() {
        e.dir = c.varint_u32()?;
    }
    for e in ev.iter_mut() {
        e.pid = c.varint_u32()?;
    }
    for e in ev.iter_mut() {
        e.tid = c.varint_u32()?;
    }
    let mut col = AddrCol::default();
    for e in ev.iter_mut() {
        e.addr = col.get(&mut c)?;
    }
    let mut col = AddrCol::default();
    for e in ev.iter_mut() {
        e.phys = col.get(&mut c)?;
    }
    for e in ev.iter_mut() {
        e.size = c.varint()?;
    }
    for e in ev.iter_mut() {
        e.aux = c.varint()?;
    }
    let mut out = Vec::with_capacity(n);
    for (mut e, d) in ev.into_iter().zip(devs) {
        e.dev = u64::from(d) + 1;
        let rec = match kind::info(e.kind).layout {
            Layout::Sg => {
                let mut sg = SgEvent {
                    event: e,
                    nents: c.varint_u32()?,
                    ents: c.varint_u32()?,
                    n_lens: c.varint_u32()?,
                    ..Default::default()
                };
                let k = (sg.n_lens as usize).min(SG_LENS);
                for l in &mut sg.lens[..k] {
                    *l = c.varint_u32()?;
                }
                Record::Sg(sg)
            }
            Layout::Xid => {
                let xid = c.varint_u32()?;
                let msg_truncated = c.varint_u32()?;
                let len = c.varint()? as usize;
                if len > XID_MSG_LEN {
                    return Err(Malformed("Xid message longer than the ABI allows"));
                }
                let mut msg = [0u8; XID_MSG_LEN];
                msg[..len].copy_from_slice(c.bytes(len)?);
                Record::Xid(XidEvent {
                    event: e,
                    xid,
                    msg_truncated,
                    msg,
                })
            }
            _ => Record::Event(e),
        };
        out.push((rec, d));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(addr: u64, phys: u64, ts_ns: u64) -> Record {
        Record::Event(Event {
            kind: kind::DMA_MAP,
            ts_ns,
            addr,
            phys,
            size: 4096,
            pid: 7,
            ..Default::default()
        })
    }

    #[test]
    fn a_reused_batch_writes_what_a_new_one_does() {
        // 1 << 63 first: its delta's zigzag is u64::MAX (the 128-bit case).
        let records = [
            ev(1 << 63, u64::MAX, 5),
            ev(0, 1, 3),
            ev(0x1000, 1 << 63, 9),
            ev(u64::MAX, 0x2000, 1),
        ];
        let mut reused = EventBatch::default();
        for r in &records[1..] {
            reused.push(r, 1);
        }
        let _ = reused.take_payload();
        for r in &records {
            reused.push(r, 2);
        }
        let mut fresh = EventBatch::default();
        for r in &records {
            fresh.push(r, 2);
        }
        let payload = reused.take_payload();
        assert_eq!(payload, fresh.take_payload());
        let back = decode_events(&payload).expect("decodes");
        for ((got, d), want) in back.iter().zip(&records) {
            assert_eq!(*d, 2);
            let (g, w) = (got.event(), want.event());
            assert_eq!((g.addr, g.phys, g.ts_ns), (w.addr, w.phys, w.ts_ns));
        }
    }
}
