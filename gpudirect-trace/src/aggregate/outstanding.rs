//! A level's outstanding mappings by start address: hashed while the level
//! only maps and unmaps handles (the DMA API's dma_unmap_* and dma_free_*
//! take exactly what the map returned), ordered from the first operation
//! that needs the addresses in order (an IOMMU unmap of an IOVA range, an
//! IOVA unlink), for good.
//!
//! Why: the B-tree's insert and remove on every map and unmap were ~12% of
//! the record path's CPU per event (perf, bench_reader_cpu on an H200
//! host); one foldhash probe costs a fraction of a tree descent. What is
//! read out in order (long-lived mappings, the skipped ones) is sorted when
//! read, so every output is the same as the B-tree's.

use std::collections::{BTreeMap, HashMap};

/// A mapping seen mapped and not yet unmapped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Mapping {
    pub size: u64,
    pub ts_ns: u64,
    pub pid: u32,
}

type Hashed = HashMap<u64, Mapping, foldhash::fast::RandomState>;

/// A hashed table shrinks when under a quarter full and above this many
/// slots: the memory budget takes back what a removed mapping cost
/// (`MAPPING_BYTES`), so its slots must not stay held.
const SHRINK_ABOVE: usize = 1024;

pub(super) enum Outstanding {
    Hashed(Hashed),
    Ordered(BTreeMap<u64, Mapping>),
}

impl Default for Outstanding {
    fn default() -> Self {
        Self::Hashed(Hashed::default())
    }
}

impl Outstanding {
    pub fn len(&self) -> usize {
        match self {
            Self::Hashed(h) => h.len(),
            Self::Ordered(o) => o.len(),
        }
    }

    pub fn insert(&mut self, addr: u64, m: Mapping) -> Option<Mapping> {
        match self {
            Self::Hashed(h) => h.insert(addr, m),
            Self::Ordered(o) => o.insert(addr, m),
        }
    }

    pub fn remove(&mut self, addr: u64) -> Option<Mapping> {
        match self {
            Self::Hashed(h) => {
                let m = h.remove(&addr);
                if h.capacity() > SHRINK_ABOVE && h.len() < h.capacity() / 4 {
                    h.shrink_to(h.len() * 2);
                }
                m
            }
            Self::Ordered(o) => o.remove(&addr),
        }
    }

    /// The ordered table (made from the hashed one the first time).
    fn ordered(&mut self) -> &mut BTreeMap<u64, Mapping> {
        if let Self::Hashed(h) = self {
            *self = Self::Ordered(std::mem::take(h).into_iter().collect());
        }
        match self {
            Self::Ordered(o) => o,
            Self::Hashed(_) => unreachable!("made ordered above"),
        }
    }

    /// Removes the mappings starting in `[addr, end)`, in address order.
    pub fn remove_range(&mut self, addr: u64, end: u64) -> Vec<Mapping> {
        let o = self.ordered();
        let starts: Vec<u64> = o.range(addr..end).map(|(&a, _)| a).collect();
        starts.into_iter().filter_map(|a| o.remove(&a)).collect()
    }

    /// Every mapping, in address order; the table is left empty.
    pub fn take_sorted(&mut self) -> Vec<(u64, Mapping)> {
        match std::mem::take(self) {
            Self::Hashed(h) => sorted(h.into_iter()),
            Self::Ordered(o) => {
                // Stays ordered: the level needed order once.
                *self = Self::Ordered(BTreeMap::new());
                o.into_iter().collect()
            }
        }
    }

    pub fn clear(&mut self) {
        match self {
            Self::Hashed(h) => *h = Hashed::default(),
            Self::Ordered(o) => o.clear(),
        }
    }

    /// The mapping with the highest start at or below `addr` that `addr` is
    /// inside. Hashed, a scan of every mapping (faults are rare; the B-tree's
    /// walk down from `addr` is a scan too when none covers it).
    pub fn covering(&self, addr: u64) -> Option<&Mapping> {
        let covers = |a: u64, m: &Mapping| a <= addr && addr < a.saturating_add(m.size.max(1));
        match self {
            Self::Hashed(h) => h
                .iter()
                .filter(|(&a, m)| covers(a, m))
                .max_by_key(|(&a, _)| a)
                .map(|(_, m)| m),
            Self::Ordered(o) => o
                .range(..=addr)
                .rev()
                .find(|(&a, m)| covers(a, m))
                .map(|(_, m)| m),
        }
    }

    /// The mappings `keep` accepts, in address order.
    pub fn sorted_where(&self, keep: impl Fn(&Mapping) -> bool) -> Vec<(u64, Mapping)> {
        match self {
            Self::Hashed(h) => sorted(h.iter().filter(|(_, m)| keep(m)).map(|(&a, &m)| (a, m))),
            Self::Ordered(o) => o
                .iter()
                .filter(|(_, m)| keep(m))
                .map(|(&a, &m)| (a, m))
                .collect(),
        }
    }
}

fn sorted(it: impl Iterator<Item = (u64, Mapping)>) -> Vec<(u64, Mapping)> {
    let mut v: Vec<(u64, Mapping)> = it.collect();
    // Addresses are the keys: no two are equal.
    v.sort_unstable_by_key(|&(a, _)| a);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(size: u64, ts_ns: u64) -> Mapping {
        Mapping {
            size,
            ts_ns,
            pid: 1,
        }
    }

    /// Both tables answer every query alike.
    #[test]
    fn hashed_and_ordered_agree() {
        let mut h = Outstanding::default();
        let mut o = Outstanding::Ordered(BTreeMap::new());
        for t in [&mut h, &mut o] {
            for (i, a) in [0x9000u64, 0x1000, 0x5000, 0x5800, 0x20_0000]
                .into_iter()
                .enumerate()
            {
                assert!(t.insert(a, m(0x1000, 10 - i as u64)).is_none());
            }
            assert_eq!(t.insert(0x1000, m(0x2000, 3)), Some(m(0x1000, 9)));
            assert_eq!(t.remove(0x20_0000), Some(m(0x1000, 6)));
            assert_eq!(t.remove(0x20_0000), None);
        }
        assert!(matches!(h, Outstanding::Hashed(_)));
        for addr in [0, 0x1000, 0x2fff, 0x3000, 0x5900, 0x6000, 0x9fff, u64::MAX] {
            assert_eq!(h.covering(addr), o.covering(addr), "{addr:#x}");
        }
        assert_eq!(h.covering(0x5900), Some(&m(0x1000, 7)), "the highest start");
        let old = |m: &Mapping| m.ts_ns >= 7;
        assert_eq!(h.sorted_where(old), o.sorted_where(old));
        assert_eq!(
            h.remove_range(0x5000, 0x5801),
            o.remove_range(0x5000, 0x5801)
        );
        assert!(matches!(h, Outstanding::Ordered(_)), "ordered for good");
        assert_eq!(h.len(), 2);
        assert_eq!(h.take_sorted(), o.take_sorted());
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn a_hashed_table_gives_back_its_slots() {
        let mut t = Outstanding::default();
        for a in 0..100_000u64 {
            t.insert(a << 12, m(4096, a));
        }
        for a in 0..99_990u64 {
            assert!(t.remove(a << 12).is_some());
        }
        let Outstanding::Hashed(h) = &t else {
            panic!("hashed");
        };
        assert!(h.capacity() <= 4 * SHRINK_ABOVE, "{}", h.capacity());
        assert_eq!(t.len(), 10);
    }
}
