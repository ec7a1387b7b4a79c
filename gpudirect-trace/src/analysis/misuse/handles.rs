//! One device's DMA handles as the trace knows them: the mappings it saw
//! made and not yet unmapped (a multiset: without an IOMMU a handle is a
//! physical address, and mapping one buffer twice is legal), and the
//! handles it saw unmapped, kept for a while so a second unmap or a late
//! sync can be proven.

use std::collections::{BTreeMap, VecDeque};

use super::DmaCall;

/// Handles remembered as unmapped per device: older ones are forgotten
/// (a later misuse of them is then "unknown", never a guess).
pub const GONE_KEPT: usize = 1 << 16;

/// A mapping the trace saw made.
#[derive(Clone, Debug)]
pub struct Live {
    pub map: DmaCall,
    /// Its place in the cacheline index (FROM_DEVICE/BIDIRECTIONAL single
    /// mappings with a physical address).
    pub line_seq: Option<u64>,
}

/// A handle the trace saw unmapped.
#[derive(Clone, Debug)]
pub struct Gone {
    pub map: DmaCall,
    pub unmap: DmaCall,
    seq: u64,
}

#[derive(Default)]
pub struct Handles {
    live: BTreeMap<u64, Vec<Live>>,
    live_count: usize,
    gone: BTreeMap<u64, Gone>,
    /// (handle, seq) in unmap order, for forgetting the oldest.
    gone_order: VecDeque<(u64, u64)>,
    next_seq: u64,
}

impl Handles {
    pub fn live_count(&self) -> usize {
        self.live_count
    }

    pub fn insert(&mut self, l: Live) {
        // A new mapping at this handle: what the handle was unmapped as no
        // longer speaks for it.
        self.gone.remove(&l.map.addr);
        self.live.entry(l.map.addr).or_default().push(l);
        self.live_count += 1;
    }

    /// A map the table had no room for: its handle must not look unmapped.
    pub fn forget_gone(&mut self, addr: u64) {
        self.gone.remove(&addr);
    }

    /// Takes the mapping at `addr` that best matches `call` (same class,
    /// size, direction and entries first), if the handle is live.
    pub fn take(&mut self, call: &DmaCall) -> Option<Live> {
        let list = self.live.get_mut(&call.addr)?;
        let score = |l: &Live| {
            let m = &l.map;
            (m.class == call.class) as u8 * 8
                + (m.size == call.size) as u8 * 4
                + (m.dir == call.dir) as u8 * 2
                + (m.entries == call.entries) as u8
        };
        let best = (0..list.len()).max_by_key(|&i| (score(&list[i]), std::cmp::Reverse(i)))?;
        let l = list.swap_remove(best);
        if list.is_empty() {
            self.live.remove(&call.addr);
        }
        self.live_count -= 1;
        Some(l)
    }

    pub fn remember_unmap(&mut self, map: DmaCall, unmap: DmaCall) {
        let addr = map.addr;
        self.next_seq += 1;
        let seq = self.next_seq;
        self.gone.insert(addr, Gone { map, unmap, seq });
        self.gone_order.push_back((addr, seq));
        while self.gone_order.len() > GONE_KEPT {
            let Some((a, s)) = self.gone_order.pop_front() else {
                break;
            };
            if self.gone.get(&a).is_some_and(|g| g.seq == s) {
                self.gone.remove(&a);
            }
        }
    }

    pub fn gone(&self, addr: u64) -> Option<&Gone> {
        self.gone.get(&addr)
    }

    /// The unmapped handle whose old mapping covered `addr`.
    pub fn gone_containing(&self, addr: u64) -> Option<&Gone> {
        self.gone
            .range(..=addr)
            .next_back()
            .map(|(_, g)| g)
            .filter(|g| addr < g.map.addr.saturating_add(g.map.size.max(1)))
    }

    /// A live mapping starting exactly at `addr` of `class`.
    pub fn live_at(&self, addr: u64) -> &[Live] {
        self.live.get(&addr).map_or(&[], |v| v.as_slice())
    }

    /// Live mappings containing `addr`: the nearest handles at or below it
    /// (a few: under an IOMMU live mappings never overlap; without one they
    /// may, and the first few cover that).
    pub fn containing(&self, addr: u64) -> impl Iterator<Item = &Live> {
        self.live
            .range(..=addr)
            .rev()
            .take(8)
            .flat_map(|(_, v)| v.iter())
            .filter(move |l| addr < l.map.addr.saturating_add(l.map.size.max(1)))
    }

    /// Every live mapping, oldest first (by trace time).
    pub fn all_live(&self) -> Vec<&Live> {
        let mut v: Vec<&Live> = self.live.values().flatten().collect();
        v.sort_by_key(|l| l.map.ts_ns);
        v
    }
}
