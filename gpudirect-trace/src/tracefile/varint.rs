//! Varints and a cursor over payload bytes (docs/trace-format.md: unsigned
//! LEB128, zigzag for signed values): the encodings every block uses.

/// A payload that passed its checksum but does not decode (writer bug or a
/// crafted file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed block payload: {}", self.0)
    }
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    // Into room reserved once, the length set once: a push per byte (a
    // capacity check and length update each) was ~4% of the record path's
    // CPU per event (perf, bench_reader_cpu: 11 varints per event). A
    // branchless form (the 7-bit groups spread by shifts, one 8-byte store)
    // was slower: record 80 -> 107 ns per event on the CI host (a chain of
    // ~20 dependent instructions per value, no longer inlined, against a
    // loop whose exits the stream's lengths predict well).
    out.reserve(10);
    let len = out.len();
    let spare = out.spare_capacity_mut();
    let mut i = 0;
    while v >= 0x80 {
        spare[i].write(v as u8 | 0x80);
        v >>= 7;
        i += 1;
    }
    spare[i].write(v as u8);
    // SAFETY: the i + 1 bytes past the length were written just above
    // (i + 1 <= 10, the room reserved: a u64 takes at most 10 bytes).
    unsafe { out.set_len(len + i + 1) };
}

pub fn put_varint128(out: &mut Vec<u8>, mut v: u128) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Reads varints and bytes from a payload, failing instead of panicking.
pub struct Cursor<'a> {
    b: &'a [u8],
    pub pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Self { b, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.b.len() - self.pos
    }

    pub fn varint128(&mut self, max_bits: u32) -> Result<u128, Malformed> {
        let mut v = 0u128;
        let mut shift = 0;
        loop {
            let &byte = self.b.get(self.pos).ok_or(Malformed("varint past end"))?;
            self.pos += 1;
            if shift > 63 {
                return Err(Malformed("varint too long"));
            }
            v |= u128::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                if v >> max_bits != 0 {
                    return Err(Malformed("varint out of range"));
                }
                return Ok(v);
            }
            shift += 7;
        }
    }

    pub fn varint(&mut self) -> Result<u64, Malformed> {
        self.varint128(64).map(|v| v as u64)
    }

    pub fn varint_u32(&mut self) -> Result<u32, Malformed> {
        u32::try_from(self.varint()?).map_err(|_| Malformed("value exceeds 32 bits"))
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if n > self.remaining() {
            return Err(Malformed("byte string past end"));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn string(&mut self) -> Result<String, Malformed> {
        let n = self.varint()? as usize;
        Ok(String::from_utf8_lossy(self.bytes(n)?).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LEB128 one byte at a time, as the format describes it.
    fn reference(mut v: u128) -> Vec<u8> {
        let mut out = Vec::new();
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        out
    }

    #[test]
    fn varints_are_leb128_and_read_back() {
        let mut values: Vec<u64> = vec![0, 1, 0x7f, 0x80, 0x3fff, 0x4000, u64::MAX - 1, u64::MAX];
        values.extend((0..64).map(|s| 1u64 << s));
        values.extend((1..64).map(|s| (1u64 << s) - 1));
        let mut out = vec![0xaa];
        for &v in &values {
            let at = out.len();
            put_varint(&mut out, v);
            assert_eq!(out[at..], reference(u128::from(v)), "{v:#x}");
        }
        let mut c = Cursor::new(&out[1..]);
        for &v in &values {
            assert_eq!(c.varint(), Ok(v));
        }
        assert_eq!(c.remaining(), 0);
        let mut out = Vec::new();
        put_varint128(&mut out, u128::from(u64::MAX) + 1);
        assert_eq!(out, reference(u128::from(u64::MAX) + 1));
    }
}
