//! One device's DMA handles as the trace knows them: the mappings it saw
//! made and not yet unmapped (a multiset: without an IOMMU a handle is a
//! physical address, and mapping one buffer twice is legal), and the
//! handles it saw unmapped, kept for a while so a second unmap or a late
//! sync can be proven.
//!
//! The ordered indexes (handle -> slot) hold only 4-byte slot numbers: a
//! B-tree shifts its values on every insert and remove, and with the calls
//! themselves (~120 bytes) inline that copying was most of the checks' cost
//! (perf, `cargo xtask bench`'s misuse_checks).

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::DmaCall;
use crate::memory_budget::{self, Keeper};

/// Handles remembered as unmapped per device: older ones are forgotten
/// (a later misuse of them is then "unknown", never a guess).
pub const GONE_KEPT: usize = 1 << 16;
/// What one slot costs the reader's memory budget: the slot (112 bytes
/// live, 128 unmapped, in a Vec that doubles: up to twice that), its index
/// entries and, for a live mapping, its cacheline span.
pub const SLOT_BYTES: usize = 384;

/// A mapping the trace saw made.
#[derive(Clone, Debug)]
pub struct Live {
    pub map: DmaCall,
    /// Its place in the cacheline index (FROM_DEVICE/BIDIRECTIONAL single
    /// mappings with a physical address).
    pub line_seq: Option<u64>,
}

/// A handle the trace saw unmapped: its map, and when and how it was
/// unmapped.
#[derive(Clone, Debug)]
pub struct Gone {
    pub map: DmaCall,
    pub unmap_ts_ns: u64,
    pub unmap_api: &'static str,
    seq: u64,
}

/// Values in numbered slots, reused.
struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    fn put(&mut self, v: T) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.items[i as usize] = Some(v);
                i
            }
            None => {
                self.items.push(Some(v));
                (self.items.len() - 1) as u32
            }
        }
    }

    fn take(&mut self, i: u32) -> T {
        let v = self.items[i as usize].take().expect("a filled slot");
        self.free.push(i);
        v
    }

    fn get(&self, i: u32) -> &T {
        self.items[i as usize].as_ref().expect("a filled slot")
    }
}

/// Live mappings by handle: one per handle in `live` (the common case), any
/// further ones at the same handle in `dups`.
#[derive(Default)]
pub struct Handles {
    slots: Slab<Live>,
    live: BTreeMap<u64, u32>,
    dups: HashMap<u64, Vec<u32>>,
    live_count: usize,
    gone_slots: Slab<Gone>,
    gone: BTreeMap<u64, u32>,
    /// (handle, seq) in unmap order, for forgetting the oldest.
    gone_order: VecDeque<(u64, u64)>,
    next_seq: u64,
    /// What the slots were charged to the reader's memory budget (given
    /// back when the table goes: a loss resets the checker).
    charged: usize,
}

impl Drop for Handles {
    fn drop(&mut self) {
        memory_budget::give(Keeper::Handles, self.charged);
    }
}

impl Handles {
    pub fn live_count(&self) -> usize {
        self.live_count
    }

    /// Whether a new slot of `slab` fits: a free one, or a new one within
    /// the reader's memory budget (counted when not).
    fn room<T>(slab: &Slab<T>, charged: &mut usize) -> bool {
        if !slab.free.is_empty() {
            return true;
        }
        if !memory_budget::take_or_drop(Keeper::Handles, SLOT_BYTES) {
            return false;
        }
        *charged += SLOT_BYTES;
        true
    }

    /// Whether a new live mapping can be kept (`insert`).
    pub fn room_for_live(&mut self) -> bool {
        Self::room(&self.slots, &mut self.charged)
    }

    pub fn insert(&mut self, l: Live) {
        // A new mapping at this handle: what the handle was unmapped as no
        // longer speaks for it.
        self.forget_gone(l.map.addr);
        let addr = l.map.addr;
        let slot = self.slots.put(l);
        match self.live.entry(addr) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(slot);
            }
            std::collections::btree_map::Entry::Occupied(_) => {
                self.dups.entry(addr).or_default().push(slot);
            }
        }
        self.live_count += 1;
    }

    /// A map the table had no room for (or a new life of the handle): what
    /// the handle was unmapped as is forgotten.
    pub fn forget_gone(&mut self, addr: u64) {
        if let Some(i) = self.gone.remove(&addr) {
            self.gone_slots.take(i);
        }
    }

    /// Takes the mapping at `addr` that best matches `call` (same class,
    /// size, direction and entries first), if the handle is live.
    pub fn take(&mut self, call: &DmaCall) -> Option<Live> {
        let score = |m: &DmaCall| {
            (m.class == call.class) as u8 * 8
                + (m.size == call.size) as u8 * 4
                + (m.dir == call.dir) as u8 * 2
                + (m.entries == call.entries) as u8
        };
        let first = *self.live.get(&call.addr)?;
        let slot = match self.dups.get_mut(&call.addr) {
            None => {
                self.live.remove(&call.addr);
                first
            }
            Some(more) => {
                // The best of the first and the others; the first wins ties.
                let slots = &self.slots;
                let best = (0..more.len())
                    .max_by_key(|&i| (score(&slots.get(more[i]).map), std::cmp::Reverse(i)))
                    .filter(|&i| score(&slots.get(more[i]).map) > score(&slots.get(first).map));
                let (taken, promote) = match best {
                    Some(i) => (more.swap_remove(i), None),
                    None => (first, Some(more.swap_remove(0))),
                };
                if more.is_empty() {
                    self.dups.remove(&call.addr);
                }
                if let Some(p) = promote {
                    self.live.insert(call.addr, p);
                }
                taken
            }
        };
        self.live_count -= 1;
        Some(self.slots.take(slot))
    }

    pub fn remember_unmap(&mut self, map: DmaCall, unmap: &DmaCall) {
        let addr = map.addr;
        self.next_seq += 1;
        let seq = self.next_seq;
        let g = Gone {
            map,
            unmap_ts_ns: unmap.ts_ns,
            unmap_api: unmap.api,
            seq,
        };
        self.forget_gone(addr);
        // Without room in the reader's budget, the oldest unmapped handle
        // makes way (or, with none, this one is not remembered).
        while !Self::room(&self.gone_slots, &mut self.charged) {
            let Some((a, s)) = self.gone_order.pop_front() else {
                return;
            };
            if let Some(&i) = self.gone.get(&a) {
                if self.gone_slots.get(i).seq == s {
                    self.forget_gone(a);
                }
            }
        }
        let slot = self.gone_slots.put(g);
        self.gone.insert(addr, slot);
        self.gone_order.push_back((addr, seq));
        while self.gone_order.len() > GONE_KEPT {
            let Some((a, s)) = self.gone_order.pop_front() else {
                break;
            };
            if let Some(&i) = self.gone.get(&a) {
                if self.gone_slots.get(i).seq == s {
                    self.forget_gone(a);
                }
            }
        }
    }

    pub fn gone(&self, addr: u64) -> Option<&Gone> {
        self.gone.get(&addr).map(|&i| self.gone_slots.get(i))
    }

    /// The unmapped handle whose old mapping covered `addr`.
    pub fn gone_containing(&self, addr: u64) -> Option<&Gone> {
        self.gone
            .range(..=addr)
            .next_back()
            .map(|(_, &i)| self.gone_slots.get(i))
            .filter(|g| addr < g.map.addr.saturating_add(g.map.size.max(1)))
    }

    fn at(&self, addr: u64) -> impl Iterator<Item = &Live> {
        self.live
            .get(&addr)
            .into_iter()
            .chain(self.dups.get(&addr).into_iter().flatten())
            .map(|&i| self.slots.get(i))
    }

    /// The live mappings starting exactly at `addr`.
    pub fn live_at(&self, addr: u64) -> impl Iterator<Item = &Live> {
        self.at(addr)
    }

    /// Live mappings containing `addr`: the nearest handles at or below it
    /// (a few: under an IOMMU live mappings never overlap; without one they
    /// may, and the first few cover that).
    pub fn containing(&self, addr: u64) -> impl Iterator<Item = &Live> {
        self.live
            .range(..=addr)
            .rev()
            .take(8)
            .flat_map(|(&a, _)| self.at(a))
            .filter(move |l| addr < l.map.addr.saturating_add(l.map.size.max(1)))
    }

    /// Every live mapping, oldest first (by trace time).
    pub fn all_live(&self) -> Vec<&Live> {
        let mut v: Vec<&Live> = self.slots.items.iter().flatten().collect();
        v.sort_by_key(|l| l.map.ts_ns);
        v
    }
}
