//! Who maps how much, per device and level: mappings and bytes by the pid
//! that made them, outstanding mappings by the pid that made them (an unmap
//! from an interrupt ends its owner's mapping, whoever was interrupted), and
//! each pid's activity in the last seconds (what an Xid's context shows).
//!
//! Bounded: at most `MAX_PIDS` pids per level keep their own row; the rest
//! fold into one row (pid `OTHER_PID`), counted.

use std::collections::HashMap;

use crate::memory_budget::{self, Keeper};

pub const MAX_PIDS: usize = 4096;
/// What one pid's row costs the reader's memory budget: its slot, a pid and
/// a `PidStats` (304 bytes), in a Vec that doubles, and its 16-byte entry
/// in the index, a hash table that doubles: up to twice 320 bytes.
pub const PID_ROW_BYTES: usize = 640;
const _: () = assert!(
    2 * (std::mem::size_of::<(u32, PidStats)>() + std::mem::size_of::<(u32, usize)>())
        <= PID_ROW_BYTES
);
/// The row pids past `MAX_PIDS` fold into.
pub const OTHER_PID: u32 = u32::MAX;
/// Seconds of activity kept per pid.
const RECENT_SECS: usize = 8;

#[derive(Clone, Copy, Debug, Default)]
struct Second {
    sec: u64,
    maps: u64,
    unmaps: u64,
    bytes: u64,
}

#[derive(Clone, Debug, Default)]
pub struct PidStats {
    pub maps: u64,
    pub bytes_mapped: u64,
    /// Unmaps of this pid's mappings (by whoever unmapped them).
    pub unmaps: u64,
    pub outstanding: u64,
    pub outstanding_bytes: u64,
    recent: [Second; RECENT_SECS],
}

impl PidStats {
    fn bucket(&mut self, ts_ns: u64) -> &mut Second {
        let sec = ts_ns / 1_000_000_000;
        let b = &mut self.recent[(sec % RECENT_SECS as u64) as usize];
        if b.sec != sec {
            *b = Second {
                sec,
                ..Default::default()
            };
        }
        b
    }
}

pub use crate::model::incident::Activity;

#[derive(Clone, Debug, Default)]
pub struct Procs {
    /// Each pid's row, in the order first seen (never removed).
    rows: Vec<(u32, PidStats)>,
    /// Looked up on every map and unmap: foldhash, not SipHash (the
    /// lookups were ~9% of the live path's CPU per event, `cargo xtask
    /// bench` reader_cpu).
    index: HashMap<u32, usize, foldhash::fast::RandomState>,
    /// The pid of the last row used and its slot: maps and unmaps come in
    /// runs from one pid (a submitting thread, an interrupt's unmaps of
    /// one owner's mappings), and a run costs a compare, not a hash (the
    /// row lookup was still ~9% of the live path after foldhash).
    last: Option<(u32, usize)>,
    /// Pids folded into `OTHER_PID` (first sightings past the cap).
    pub folded: u64,
}

impl Procs {
    fn row(&mut self, pid: u32) -> &mut PidStats {
        if let Some((last, i)) = self.last {
            if last == pid {
                return &mut self.rows[i].1;
            }
        }
        // The tests that need a lookup first: below the cap and without a
        // memory budget (live, the usual case) a row costs one hash, not two.
        let capped = self.rows.len() >= MAX_PIDS;
        if (capped || memory_budget::is_on())
            && pid != OTHER_PID
            && !self.index.contains_key(&pid)
            && (capped || !memory_budget::take_or_drop(Keeper::Processes, PID_ROW_BYTES))
        {
            // Not remembered as `last`: each folded record is counted.
            self.folded += 1;
            let i = self.slot(OTHER_PID);
            return &mut self.rows[i].1;
        }
        let i = self.slot(pid);
        self.last = Some((pid, i));
        &mut self.rows[i].1
    }

    /// `pid`'s slot, made if new.
    fn slot(&mut self, pid: u32) -> usize {
        *self.index.entry(pid).or_insert_with(|| {
            self.rows.push((pid, PidStats::default()));
            self.rows.len() - 1
        })
    }

    pub fn map(&mut self, pid: u32, size: u64, ts_ns: u64, tracked: bool) {
        let r = self.row(pid);
        r.maps += 1;
        // Saturating: sizes come from trace files too, which may be crafted.
        r.bytes_mapped = r.bytes_mapped.saturating_add(size);
        if tracked {
            r.outstanding += 1;
            r.outstanding_bytes = r.outstanding_bytes.saturating_add(size);
        }
        let b = r.bucket(ts_ns);
        b.maps += 1;
        b.bytes = b.bytes.saturating_add(size);
    }

    /// The mapping `owner` made (of `size` bytes) ended.
    pub fn unmapped(&mut self, owner: u32, size: u64, ts_ns: u64) {
        let r = self.row(owner);
        r.unmaps += 1;
        r.outstanding = r.outstanding.saturating_sub(1);
        r.outstanding_bytes = r.outstanding_bytes.saturating_sub(size);
        r.bucket(ts_ns).unmaps += 1;
    }

    /// The mapping `owner` made will not be unmapped (the kernel skips it):
    /// no longer outstanding, and no unmap either.
    pub fn forget(&mut self, owner: u32, size: u64) {
        let r = self.row(owner);
        r.outstanding = r.outstanding.saturating_sub(1);
        r.outstanding_bytes = r.outstanding_bytes.saturating_sub(size);
    }

    /// Aggregate-only: the kernel's table is the truth about what is
    /// outstanding, per owner.
    pub fn set_outstanding(&mut self, rows: &HashMap<u32, (u64, u64)>) {
        for (_, r) in &mut self.rows {
            r.outstanding = 0;
            r.outstanding_bytes = 0;
        }
        for (&pid, &(n, bytes)) in rows {
            let r = self.row(pid);
            r.outstanding = n;
            r.outstanding_bytes = bytes;
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &PidStats)> {
        self.rows.iter().map(|(p, s)| (*p, s))
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// `pid`'s activity in the `window_s` seconds up to `ts_ns`.
    pub fn activity(&self, pid: u32, ts_ns: u64, window_s: u64) -> Option<Activity> {
        let r = &self.rows[*self.index.get(&pid)?].1;
        let now = ts_ns / 1_000_000_000;
        let window_s = window_s.min(RECENT_SECS as u64);
        let mut a = Activity {
            window_s,
            outstanding_mappings: r.outstanding,
            outstanding_bytes: r.outstanding_bytes,
            ..Default::default()
        };
        for b in r
            .recent
            .iter()
            .filter(|b| b.sec <= now && now - b.sec < window_s)
        {
            a.maps += b.maps;
            a.unmaps += b.unmaps;
            a.bytes_mapped += b.bytes;
        }
        Some(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unmap_ends_its_owner_s_mapping_and_activity_has_a_window() {
        let mut p = Procs::default();
        p.map(100, 4096, 1_000_000_000, true);
        p.map(100, 8192, 2_500_000_000, true);
        p.map(200, 4096, 2_600_000_000, true);
        // Unmapped from an interrupt on top of pid 300: still pid 100's.
        p.unmapped(100, 4096, 3_000_000_000);
        let a = p.activity(100, 3_100_000_000, 2).expect("pid 100");
        assert_eq!(
            (a.maps, a.unmaps, a.bytes_mapped),
            (1, 1, 8192),
            "seconds 2 and 3"
        );
        assert_eq!((a.outstanding_mappings, a.outstanding_bytes), (1, 8192));
        assert!(p.activity(300, 3_100_000_000, 2).is_none());
    }

    #[test]
    fn pids_past_the_cap_fold_into_one_row() {
        let mut p = Procs::default();
        for pid in 0..(MAX_PIDS as u32 + 10) {
            p.map(pid, 1, 0, false);
        }
        assert_eq!(p.folded, 10);
        assert_eq!(p.iter().count(), MAX_PIDS + 1);
    }

    #[test]
    fn runs_of_one_pid_and_folded_pids_count_as_without_the_last_row() {
        let mut p = Procs::default();
        for pid in 0..MAX_PIDS as u32 {
            p.map(pid, 1, 0, true);
        }
        // A run of one folded pid: each record counted as folded, in the
        // shared row, never given its own row by the last-row shortcut.
        let past = MAX_PIDS as u32 + 7;
        for _ in 0..3 {
            p.map(past, 10, 0, true);
        }
        assert_eq!(p.folded, 3);
        let other = p.iter().find(|(pid, _)| *pid == OTHER_PID).expect("row");
        assert_eq!((other.1.maps, other.1.bytes_mapped), (3, 30));
        // Alternating pids land in their own rows.
        for pid in [5, 6, 5, 5, 6] {
            p.unmapped(pid, 1, 0);
        }
        let row = |pid| p.iter().find(|r| r.0 == pid).expect("row").1.clone();
        assert_eq!((row(5).unmaps, row(5).outstanding), (3, 0));
        assert_eq!((row(6).unmaps, row(6).outstanding), (2, 0));
        assert_eq!(p.iter().count(), MAX_PIDS + 1);
    }
}
