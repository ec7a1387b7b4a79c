//! Block sequence numbers (format 1.3): whole blocks removed, duplicated
//! or swapped are named, not silently read as if nothing happened (issue
//! 30: a file with blocks cut out read as "2875 in kernel, 1975 streamed,
//! 0 LOST" with 570 phantom mappings, and no warning).
//!
//! The writer puts a SEQ block right before each block it numbers, in the
//! same write (a flight recorder's ring keeps the pair whole): the block's
//! number (0, 1, 2, ... from the first after the header) and the checksum
//! of the block it names. HEADER, DEVICES and END blocks are not numbered
//! (a snapshot writes its own header and device table, and its own END; a
//! lost DEVICES block already shows as `(device #N: name lost)`); END
//! carries the count of numbered blocks, so blocks removed at the tail are
//! named too. Older readers skip SEQ blocks as a newer block type.
//!
//! The reader checks that numbers follow each other and that each SEQ's
//! block is the one it names: a gap is missing blocks (where, by byte
//! offset), a number seen before is a repeated block (its content is
//! skipped: no phantom events), a number from a gap that comes later is a
//! reordered block. Where no SEQ precedes a numbered type in a numbered
//! file, the block is counted as unnumbered (read all the same: its SEQ may
//! have been in a damaged region).

use std::collections::BTreeMap;

use serde::Serialize;

use super::format::{block, put_varint, Cursor, Malformed};

/// SEQ: `varint number`, then the named block's crc32c (u32 LE).
pub fn encode(number: u64, crc: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(14);
    put_varint(&mut out, number);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

pub fn decode(payload: &[u8]) -> Result<(u64, u32), Malformed> {
    let mut c = Cursor::new(payload);
    let n = c.varint()?;
    let b = c.bytes(4)?;
    Ok((n, u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
}

/// Whether blocks of `typ` are numbered.
pub fn numbered(typ: u16) -> bool {
    !matches!(
        typ,
        block::HEADER | block::DEVICES | block::END | block::SEQ
    )
}

/// Gaps remembered with their place (the count of all is always kept).
const GAPS_LISTED: usize = 16;
/// Missing numbers tracked as ranges for reordering (a crafted file may
/// make any number of gaps; past this they are only counted).
const RANGES_KEPT: usize = 4096;

/// Blocks `first..=last` missing, after the block that ends at `after`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Gap {
    pub first: u64,
    pub last: u64,
    pub after_offset: u64,
}

/// What the sequence numbers said.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SequenceStats {
    /// The file numbers its blocks (1.3 and later).
    pub numbered: bool,
    /// Numbered blocks missing (removed, or lost to damage or a cut).
    pub missing: u64,
    /// Blocks whose number was seen before (their content was skipped).
    pub repeated: u64,
    /// Blocks that came after later ones (swapped).
    pub reordered: u64,
    /// Blocks of a numbered type without a SEQ before them, or not the one
    /// their SEQ named (read all the same).
    pub unnumbered: u64,
    /// The first gaps, where they are.
    pub gaps: Vec<Gap>,
}

/// The reader's state of the sequence.
#[derive(Default)]
pub struct Sequence {
    /// The SEQ just read: its number and the checksum of its block.
    pending: Option<(u64, u32)>,
    /// The next number expected (one past the highest seen).
    next: Option<u64>,
    /// Numbers skipped over and not seen yet: start -> end (exclusive).
    missing: BTreeMap<u64, u64>,
    /// Numbers missing that no longer fit `missing` (only counted).
    overflow: u64,
    pub stats: SequenceStats,
}

impl Sequence {
    fn gap(&mut self, first: u64, end: u64, after_offset: u64) {
        if end <= first {
            return;
        }
        if self.stats.gaps.len() < GAPS_LISTED {
            self.stats.gaps.push(Gap {
                first,
                last: end - 1,
                after_offset,
            });
        }
        if self.missing.len() < RANGES_KEPT {
            self.missing.insert(first, end);
        } else {
            self.overflow = self.overflow.saturating_add(end - first);
        }
    }

    /// A number from a gap arrived late: reordered, not missing.
    fn found(&mut self, n: u64) -> bool {
        let Some((&start, &end)) = self.missing.range(..=n).next_back() else {
            return false;
        };
        if n >= end {
            return false;
        }
        self.missing.remove(&start);
        if start < n {
            self.missing.insert(start, n);
        }
        if n + 1 < end {
            self.missing.insert(n + 1, end);
        }
        true
    }

    /// A SEQ block naming block `n` (checksum `crc`), read at `offset`;
    /// `from_start`: the file's numbers start at 0 (not a snapshot cut
    /// from a ring). Returns whether the block it names is to be read.
    pub fn seq(&mut self, n: u64, crc: u32, offset: u64, from_start: bool) -> bool {
        self.stats.numbered = true;
        if let Some((lost, _)) = self.pending.take() {
            // The block the previous SEQ named never came.
            self.gap(lost, lost + 1, offset);
        }
        let next = match self.next {
            Some(x) => x,
            None if from_start => 0,
            None => n,
        };
        if n >= next {
            self.gap(next, n, offset);
            self.next = Some(n + 1);
        } else if self.found(n) {
            self.stats.reordered += 1;
        } else {
            self.stats.repeated += 1;
            return false;
        }
        self.pending = Some((n, crc));
        true
    }

    /// A block of type `typ` with checksum `crc` (not a SEQ).
    pub fn block(&mut self, typ: u16, crc: u32) {
        if !numbered(typ) {
            return;
        }
        match self.pending.take() {
            Some((_, want)) if want == crc => {}
            Some((n, _)) => {
                // Not the block its SEQ named: that one is missing.
                self.stats.unnumbered += 1;
                self.gap(n, n + 1, 0);
            }
            None if self.stats.numbered => self.stats.unnumbered += 1,
            None => {}
        }
    }

    /// The END block: `count` numbered blocks were written (None: not
    /// said, a snapshot's or an older file's END).
    pub fn end(&mut self, count: Option<u64>, offset: u64) {
        if let Some((lost, _)) = self.pending.take() {
            self.gap(lost, lost + 1, offset);
        }
        if let (Some(count), true) = (count, self.stats.numbered) {
            let next = self.next.unwrap_or(0);
            self.gap(next, count, offset);
            self.next = Some(next.max(count));
        }
    }

    /// The statistics once the file is read.
    pub fn finish(&mut self) -> SequenceStats {
        let mut s = self.stats.clone();
        s.missing = self
            .missing
            .iter()
            .map(|(a, b)| b - a)
            .fold(self.overflow, u64::saturating_add);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(numbers: &[u64], end: Option<u64>) -> SequenceStats {
        let mut s = Sequence::default();
        for &n in numbers {
            if s.seq(n, n as u32, n * 100, true) {
                s.block(block::EVENTS, n as u32);
            }
        }
        s.end(end, 9999);
        s.finish()
    }

    #[test]
    fn in_order_is_clean_and_each_kind_of_damage_is_named() {
        let clean = run(&[0, 1, 2, 3], Some(4));
        assert_eq!((clean.missing, clean.repeated, clean.reordered), (0, 0, 0));
        let removed = run(&[0, 1, 4, 5], Some(6));
        assert_eq!(removed.missing, 2);
        assert_eq!(
            removed.gaps,
            vec![Gap {
                first: 2,
                last: 3,
                after_offset: 400
            }]
        );
        let dup = run(&[0, 1, 1, 2], Some(3));
        assert_eq!((dup.missing, dup.repeated), (0, 1));
        let swapped = run(&[0, 2, 1, 3], Some(4));
        assert_eq!((swapped.missing, swapped.reordered), (0, 1));
        let head = run(&[3, 4], Some(5));
        assert_eq!(head.missing, 3, "blocks 0..=2 after the header");
        let tail = run(&[0, 1], Some(5));
        assert_eq!(tail.missing, 3, "END says 5 were written");
    }

    #[test]
    fn a_block_that_is_not_the_one_its_seq_names_is_counted() {
        let mut s = Sequence::default();
        assert!(s.seq(0, 7, 0, true));
        s.block(block::EVENTS, 8);
        s.block(block::CHECKPOINT, 9);
        s.block(block::DEVICES, 1);
        let st = s.finish();
        assert_eq!((st.unnumbered, st.missing), (2, 1));
    }

    #[test]
    fn a_snapshot_starts_where_its_ring_did() {
        let mut s = Sequence::default();
        assert!(s.seq(40, 1, 0, false));
        s.block(block::EVENTS, 1);
        s.end(None, 10);
        assert_eq!(s.finish().missing, 0);
    }
}
