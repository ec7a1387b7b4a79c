//! The aggregator's devices by name: a hash index into slots in the order
//! they were first seen, read out in name order.
//!
//! Why: every record looks its device up by name. In a B-tree that was two
//! searches of string compares (contains_key, then get_mut), ~5% of the
//! record path's CPU per event (perf, bench_reader_cpu on an H200 host); one
//! foldhash of the name is a fraction of that. Every reader of the table
//! (snapshots, reports, metrics) iterates it sorted by name, as the B-tree
//! did, so every output is the same.

use std::{borrow::Borrow, collections::HashMap, hash::Hash, ops::Index, sync::Arc};

use super::DeviceStats;

#[derive(Default)]
pub struct Devices {
    /// In the order first seen; never removed, so an index stays valid.
    slots: Vec<(Arc<str>, DeviceStats)>,
    index: HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
    /// The device the last record went to, by the very `Arc` it was named
    /// with: a run of records of one device (the usual stream; the loader
    /// hands out one `Arc` per name) costs a pointer compare, not a hash
    /// and a string compare of the name (~12% of the live path's CPU per
    /// event, perf on bench_reader_cpu). Holding the `Arc` keeps its
    /// address from being reused by another name.
    last: Option<(Arc<str>, usize)>,
}

impl Devices {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The slot of `name`, if seen.
    pub fn slot<Q>(&self, name: &Q) -> Option<usize>
    where
        Arc<str>: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.index.get(name).copied()
    }

    /// The slot of `name`, if seen; remembered for the next call.
    pub fn slot_of(&mut self, name: &Arc<str>) -> Option<usize> {
        if let Some((last, i)) = &self.last {
            if Arc::ptr_eq(last, name) {
                return Some(*i);
            }
        }
        let i = self.slot(name)?;
        self.last = Some((name.clone(), i));
        Some(i)
    }

    /// The device in `slot` (from [`Devices::slot`] or [`Devices::insert`]).
    pub fn at_mut(&mut self, slot: usize) -> &mut DeviceStats {
        &mut self.slots[slot].1
    }

    /// Adds `name` (or finds it) and returns its slot.
    pub fn insert(&mut self, name: &Arc<str>, d: DeviceStats) -> usize {
        if let Some(i) = self.slot(name) {
            self.slots[i].1 = d;
            return i;
        }
        self.slots.push((name.clone(), d));
        self.index.insert(name.clone(), self.slots.len() - 1);
        self.slots.len() - 1
    }

    /// `name`'s device, made empty if new.
    pub fn get_or_default(&mut self, name: &Arc<str>) -> &mut DeviceStats {
        let i = match self.slot(name) {
            Some(i) => i,
            None => self.insert(name, DeviceStats::default()),
        };
        self.at_mut(i)
    }

    pub fn contains_key<Q>(&self, name: &Q) -> bool
    where
        Arc<str>: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.index.contains_key(name)
    }

    pub fn get<Q>(&self, name: &Q) -> Option<&DeviceStats>
    where
        Arc<str>: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.slot(name).map(|i| &self.slots[i].1)
    }

    pub fn get_mut<Q>(&mut self, name: &Q) -> Option<&mut DeviceStats>
    where
        Arc<str>: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.slot(name).map(|i| &mut self.slots[i].1)
    }

    /// The devices sorted by name.
    pub fn iter(&self) -> std::vec::IntoIter<(&Arc<str>, &DeviceStats)> {
        let mut v: Vec<_> = self.slots.iter().map(|(n, d)| (n, d)).collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        v.into_iter()
    }

    /// The devices sorted by name.
    pub fn iter_mut(&mut self) -> std::vec::IntoIter<(&Arc<str>, &mut DeviceStats)> {
        let mut v: Vec<_> = self.slots.iter_mut().map(|(n, d)| (&*n, d)).collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        v.into_iter()
    }

    pub fn keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.iter().map(|(n, _)| n)
    }

    pub fn values(&self) -> impl Iterator<Item = &DeviceStats> {
        self.iter().map(|(_, d)| d)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut DeviceStats> {
        self.iter_mut().map(|(_, d)| d)
    }
}

impl<'a> IntoIterator for &'a Devices {
    type Item = (&'a Arc<str>, &'a DeviceStats);
    type IntoIter = std::vec::IntoIter<Self::Item>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a> IntoIterator for &'a mut Devices {
    type Item = (&'a Arc<str>, &'a mut DeviceStats);
    type IntoIter = std::vec::IntoIter<Self::Item>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

impl<Q> Index<&Q> for Devices
where
    Arc<str>: Borrow<Q>,
    Q: Hash + Eq + ?Sized,
{
    type Output = DeviceStats;
    /// Panics when `name` was not seen, as a map's index does (tests).
    fn index(&self, name: &Q) -> &DeviceStats {
        self.get(name).expect("no such device")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_out_in_name_order_whatever_the_order_seen() {
        let mut d = Devices::default();
        for n in ["b", "(other devices)", "0000:3b:00.0", "a"] {
            d.get_or_default(&Arc::from(n)).events += 1;
        }
        d.get_or_default(&Arc::from("a")).events += 1;
        let names: Vec<&str> = d.keys().map(|k| &**k).collect();
        assert_eq!(names, ["(other devices)", "0000:3b:00.0", "a", "b"]);
        let events: Vec<u64> = d.values().map(|s| s.events).collect();
        assert_eq!(events, [1, 1, 2, 1]);
        assert_eq!(d["a"].events, 2);
        assert!(d.contains_key("b") && !d.contains_key("c"));
        assert_eq!(d.len(), 4);
        for (_, s) in &mut d {
            s.events = 0;
        }
        assert!(d.values().all(|s| s.events == 0));
    }

    #[test]
    fn a_name_is_one_device_whichever_arc_names_it() {
        let mut d = Devices::default();
        let a: Arc<str> = Arc::from("0000:01:00.0");
        let b: Arc<str> = Arc::from("0000:02:00.0");
        let a_again: Arc<str> = Arc::from("0000:01:00.0");
        assert_eq!(d.slot_of(&a), None);
        let ia = d.insert(&a, DeviceStats::default());
        let ib = d.insert(&b, DeviceStats::default());
        assert_ne!(ia, ib);
        for (name, want) in [(&a, ia), (&a, ia), (&b, ib), (&a_again, ia), (&b, ib)] {
            assert_eq!(d.slot_of(name), Some(want), "{name}");
        }
        d.at_mut(ia).events += 2;
        assert_eq!(d["0000:01:00.0"].events, 2);
    }
}
