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
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
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
