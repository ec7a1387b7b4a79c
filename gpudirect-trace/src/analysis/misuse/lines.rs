//! Cachelines covered by live FROM_DEVICE and BIDIRECTIONAL mappings, by
//! physical address, across devices: dma-debug's "active cacheline"
//! tracking (kernel/dma/debug.c), but for every cacheline of a mapping, not
//! only its first.

use std::collections::BTreeMap;

/// The CPU's cacheline, as dma-debug assumes it (L1_CACHE_BYTES is 64 on
/// x86_64 and arm64).
pub const LINE: u64 = 64;

/// One mapping's cachelines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// First and one-past-last cacheline number.
    pub first: u64,
    pub end: u64,
}

impl Span {
    /// The cachelines of `[phys, phys + size)`; None for an empty range.
    pub fn of(phys: u64, size: u64) -> Option<Span> {
        if size == 0 {
            return None;
        }
        let last = phys.saturating_add(size - 1);
        Some(Span {
            first: phys / LINE,
            end: last / LINE + 1,
        })
    }
}

#[derive(Default)]
pub struct Lines {
    /// (first line, seq) -> (end line, owner's device, owner's handle).
    spans: BTreeMap<(u64, u64), (u64, std::sync::Arc<str>, u64)>,
    /// The longest span held: overlapping spans start at most this far
    /// below a query.
    longest: u64,
    next_seq: u64,
}

impl Lines {
    /// Adds a span; returns its sequence number (to remove it).
    pub fn insert(&mut self, s: Span, device: std::sync::Arc<str>, handle: u64) -> u64 {
        self.next_seq += 1;
        let seq = self.next_seq;
        self.longest = self.longest.max(s.end - s.first);
        self.spans.insert((s.first, seq), (s.end, device, handle));
        seq
    }

    pub fn remove(&mut self, s: Span, seq: u64) {
        self.spans.remove(&(s.first, seq));
    }

    /// A live span sharing a cacheline with `s`: (device, handle).
    pub fn overlapping(&self, s: Span) -> Option<(&std::sync::Arc<str>, u64)> {
        let lo = s.first.saturating_sub(self.longest);
        self.spans
            .range((lo, 0)..(s.end, 0))
            .find(|((first, _), (end, _, _))| *first < s.end && *end > s.first)
            .map(|(_, (_, d, h))| (d, *h))
    }

    pub fn clear(&mut self) {
        self.spans.clear();
        self.longest = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cacheline_counts_not_only_the_first() {
        let mut l = Lines::default();
        let d: std::sync::Arc<str> = "0000:00:03.0".into();
        // A page at 0x10000, then a map 512 bytes into it: their first
        // cachelines differ (dma-debug misses this), the second's lie
        // inside the first.
        let a = Span::of(0x10000, 4096).expect("span");
        l.insert(a, d.clone(), 0xa000);
        let b = Span::of(0x10200, 64).expect("span");
        assert_eq!(l.overlapping(b).map(|(_, h)| h), Some(0xa000));
        // Sharing only the last cacheline of the page.
        assert!(l
            .overlapping(Span::of(0x10fc0 + 32, 8).expect("span"))
            .is_some());
        // Right after the page: no overlap.
        assert!(l
            .overlapping(Span::of(0x11000, 64).expect("span"))
            .is_none());
        assert!(l.overlapping(Span::of(0xffc0, 64).expect("span")).is_none());
        // 32 bytes into the same line as the end of a 32-byte mapping.
        let c = Span::of(0x20000, 32).expect("span");
        let seq = l.insert(c, d, 0xb000);
        assert!(l
            .overlapping(Span::of(0x20020, 32).expect("span"))
            .is_some());
        l.remove(c, seq);
        assert!(l
            .overlapping(Span::of(0x20020, 32).expect("span"))
            .is_none());
        assert_eq!(Span::of(0, 0), None);
        assert_eq!(
            Span::of(u64::MAX - 1, 16).map(|s| s.end),
            Some(u64::MAX / LINE + 1)
        );
    }
}
