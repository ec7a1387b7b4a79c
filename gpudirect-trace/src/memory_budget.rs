//! One memory budget for everything a reader keeps (issue 30).
//!
//! A trace file is untrusted input, and a small one can ask for much: a
//! 12 KB file of never-unmapped maps across devices and levels made
//! `report` keep 323 MB of tracked mappings, a 4 KB one made `export
//! --format chrome` keep 2.85 GB of open spans. The reader itself is bounded
//! (tracefile::reader); what it feeds is bounded here. Every reader-side
//! keeper (tracked mappings, misuse handles, per-device, per-pid and
//! per-class rows, names, stacks, incidents, triggers, loss records, open
//! spans, the page's series, histogram growth, pseudonyms) asks this budget
//! before it keeps something new and gives back what it lets go. When the
//! budget says no, the keeper drops (or folds) the item, counts it, and goes
//! on; `note()` says what was dropped, in the report's text and JSON and on
//! stderr.
//!
//! **Sizes.** `READER_BUDGET` for all keepers together, at most half of it
//! for any one (a flood of one kind cannot starve the others). Charges are
//! estimates of heap bytes per item (the constants next to each keeper), not
//! allocator counts: the host test `hostile_budget` measures the real
//! binary's peak RSS on crafted files of each class (the reader's own
//! buffers, ~50-100 MiB at worst, are outside this budget and bounded by
//! the format's limits).
//!
//! **Live is unlimited.** The budget is per thread and off until a reader
//! calls `limit`: `live`, `record` and `serve` never do, so their keepers
//! behave as before (with their own fixed caps), and a charge there is one
//! thread-local read.

use std::cell::RefCell;

use serde::Serialize;

/// What all reader-side keepers together may hold: with the reader's own
/// buffers (a 24 MiB block in a 48 MiB scan window, its decompressed
/// payload, up to 65 536 decoded items: ~110 MiB at worst), the program and
/// the output being built, under the 256 MiB every reader must stay within
/// (docs/trace-format.md, "Limits"). Measured (debug build, host test
/// `hostile_budget -- --ignored`): the crafted files that hit it peak at
/// 58-148 MiB of RSS in every reader; at 96 MiB, with smaller estimates of
/// pid rows and misuse slots, a report peaked at 192 MiB.
pub const READER_BUDGET: usize = 80 << 20;

/// The keepers, each charged for what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Keeper {
    /// Outstanding mappings tracked per device and level.
    Mappings,
    /// The misuse checks' live and unmapped handles, IOVA spaces and links.
    Handles,
    /// Devices kept apart (their tables and histograms).
    Devices,
    /// Per-pid rows of a device's levels.
    Processes,
    /// Unmaps remembered per device for fault correlation.
    Unmaps,
    /// Rows keyed by a value from the file: operations' latencies,
    /// invalidation classes, Xid numbers, fault counts by cause, failed
    /// maps by caller, checkpoint rows.
    Rows,
    /// Process names.
    Names,
    /// Symbolized kernel stacks.
    Stacks,
    /// Incidents with their text.
    Incidents,
    /// A snapshot's later triggers.
    Triggers,
    /// Loss records listed one by one.
    Losses,
    /// The HTML page's time series.
    Series,
    /// Histogram growth.
    Histograms,
    /// `export --format chrome`: map-to-unmap spans still open, and tracks.
    Spans,
    /// `export --redact`: physical addresses given a pseudonym.
    Pseudonyms,
}

const KEEPERS: usize = Keeper::Pseudonyms as usize + 1;

impl Keeper {
    /// What a dropped item is, and what became of it.
    pub fn dropped_as(self) -> &'static str {
        match self {
            Keeper::Mappings => "mappings not tracked (counted as outstanding)",
            Keeper::Handles => "maps not checked for misuse (their handles unknown)",
            Keeper::Devices => "devices counted together as (other devices)",
            Keeper::Processes => "processes counted together in one row",
            Keeper::Unmaps => "unmaps not remembered for fault correlation",
            Keeper::Rows => {
                "rows not kept (operations' latencies, classes, Xid numbers, causes, callers, \
                 checkpoint rows)"
            }
            Keeper::Names => "process names not kept",
            Keeper::Stacks => "kernel stacks not kept",
            Keeper::Incidents => "incidents evicted early (counted)",
            Keeper::Triggers => "later triggers not listed",
            Keeper::Losses => "loss records not listed (their losses counted)",
            Keeper::Series => "chart points not kept",
            Keeper::Histograms => "values recorded at their histogram's top",
            Keeper::Spans => "mappings exported as instants, not spans",
            Keeper::Pseudonyms => "addresses given the shared pseudonym p-more",
        }
    }

    fn all() -> impl Iterator<Item = Keeper> {
        use Keeper::*;
        [
            Mappings, Handles, Devices, Processes, Unmaps, Rows, Names, Stacks, Incidents,
            Triggers, Losses, Series, Histograms, Spans, Pseudonyms,
        ]
        .into_iter()
    }
}

#[derive(Default)]
struct State {
    /// None: off (live, record, serve), nothing counted.
    limit: Option<usize>,
    used: usize,
    peak: usize,
    by: [usize; KEEPERS],
    dropped: [u64; KEEPERS],
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

thread_local! {
    /// A smaller reader budget for this thread's tests (a keeper's drops
    /// shown without feeding it 80 MiB).
    #[cfg(test)]
    static TEST_LIMIT: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Turns on the budget a reader has (`READER_BUDGET`), at its start.
pub fn limit_reader() {
    #[cfg(test)]
    if let Some(b) = TEST_LIMIT.with(|t| t.get()) {
        return limit(b);
    }
    limit(READER_BUDGET)
}

/// Readers on this thread get `bytes` instead of `READER_BUDGET` (tests).
#[cfg(test)]
pub fn set_test_reader_limit(bytes: Option<usize>) {
    TEST_LIMIT.with(|t| t.set(bytes));
}

/// Turns the budget on for this thread with `bytes` in all (a reader, at
/// its start), forgetting earlier charges and drops.
pub fn limit(bytes: usize) {
    STATE.with(|s| {
        *s.borrow_mut() = State {
            limit: Some(bytes),
            ..State::default()
        }
    });
}

/// Whether a budget is on (keepers skip estimating sizes when it is not).
pub fn is_on() -> bool {
    STATE.with(|s| s.borrow().limit.is_some())
}

/// Asks for `bytes` for `k`: true when kept (charged), false when the
/// budget (all of it, or `k`'s half) has no room. Always true when off.
pub fn take(k: Keeper, bytes: usize) -> bool {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        let Some(limit) = s.limit else {
            return true;
        };
        let i = k as usize;
        if s.used.saturating_add(bytes) > limit || s.by[i].saturating_add(bytes) > limit / 2 {
            return false;
        }
        s.used += bytes;
        s.by[i] += bytes;
        s.peak = s.peak.max(s.used);
        true
    })
}

/// `take`, counting one dropped item of `k` when there is no room.
pub fn take_or_drop(k: Keeper, bytes: usize) -> bool {
    let ok = take(k, bytes);
    if !ok {
        dropped(k, 1);
    }
    ok
}

/// Charges `bytes` that are already held (growth measured after the fact,
/// bounded by the caller), room or not.
pub fn charge(k: Keeper, bytes: usize) {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        if s.limit.is_none() {
            return;
        }
        s.used = s.used.saturating_add(bytes);
        s.by[k as usize] = s.by[k as usize].saturating_add(bytes);
        s.peak = s.peak.max(s.used);
    })
}

/// Whether `bytes` for `k` would be kept now (nothing charged).
pub fn fits(k: Keeper, bytes: usize) -> bool {
    STATE.with(|s| {
        let s = s.borrow();
        s.limit.is_none_or(|l| {
            s.used.saturating_add(bytes) <= l && s.by[k as usize].saturating_add(bytes) <= l / 2
        })
    })
}

/// Whether `k` may still grow at all.
pub fn has_room(k: Keeper) -> bool {
    STATE.with(|s| {
        let s = s.borrow();
        s.limit
            .is_none_or(|l| s.used < l && s.by[k as usize] < l / 2)
    })
}

/// Gives back `bytes` of `k` that were let go.
pub fn give(k: Keeper, bytes: usize) {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        if s.limit.is_none() {
            return;
        }
        let i = k as usize;
        let b = bytes.min(s.by[i]);
        s.by[i] -= b;
        s.used -= b;
    })
}

/// Counts `n` items of `k` dropped (or folded) for want of room.
pub fn dropped(k: Keeper, n: u64) {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        if s.limit.is_some() {
            let d = &mut s.dropped[k as usize];
            *d = d.saturating_add(n);
        }
    })
}

/// What the budget did: its size, the most it held, and what it dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub limit_bytes: u64,
    pub peak_bytes: u64,
    /// Items dropped per keeper (only those that dropped any).
    pub dropped: Vec<Dropped>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Dropped {
    pub keeper: Keeper,
    pub count: u64,
    pub what: &'static str,
}

/// This thread's budget so far (None when off).
pub fn summary() -> Option<Summary> {
    STATE.with(|s| {
        let s = s.borrow();
        let limit = s.limit?;
        Some(Summary {
            limit_bytes: limit as u64,
            peak_bytes: s.peak as u64,
            dropped: Keeper::all()
                .filter(|&k| s.dropped[k as usize] > 0)
                .map(|k| Dropped {
                    keeper: k,
                    count: s.dropped[k as usize],
                    what: k.dropped_as(),
                })
                .collect(),
        })
    })
}

/// Items dropped by `k` so far.
pub fn dropped_by(k: Keeper) -> u64 {
    STATE.with(|s| s.borrow().dropped[k as usize])
}

/// One line saying what the budget dropped; None when it dropped nothing.
pub fn note() -> Option<String> {
    let s = summary()?;
    if s.dropped.is_empty() {
        return None;
    }
    let list: Vec<String> = s
        .dropped
        .iter()
        .map(|d| format!("{} {}", d.count, d.what))
        .collect();
    Some(format!(
        "the file asks a reader to keep more than its memory budget ({} MiB): {}",
        s.limit_bytes >> 20,
        list.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_keeps_everything_and_counts_nothing() {
        std::thread::spawn(|| {
            assert!(!is_on());
            assert!(take(Keeper::Mappings, usize::MAX));
            dropped(Keeper::Mappings, 5);
            assert!(summary().is_none() && note().is_none());
        })
        .join()
        .expect("thread");
    }

    #[test]
    fn one_keeper_gets_half_and_the_rest_is_shared_then_given_back() {
        std::thread::spawn(|| {
            limit(1000);
            assert!(take(Keeper::Mappings, 500));
            assert!(
                !take_or_drop(Keeper::Mappings, 1),
                "half is one keeper's most"
            );
            assert!(take(Keeper::Names, 400));
            assert!(!take_or_drop(Keeper::Stacks, 101), "all of it is the most");
            assert!(take(Keeper::Stacks, 100));
            give(Keeper::Mappings, 300);
            assert!(take(Keeper::Mappings, 300));
            let s = summary().expect("on");
            assert_eq!(s.peak_bytes, 1000);
            assert_eq!(
                s.dropped
                    .iter()
                    .map(|d| (d.keeper, d.count))
                    .collect::<Vec<_>>(),
                vec![(Keeper::Mappings, 1), (Keeper::Stacks, 1)]
            );
            let n = note().expect("dropped some");
            assert!(
                n.contains("1 mappings not tracked") && n.contains("1 kernel stacks"),
                "{n}"
            );
            // Giving back more than was taken cannot underflow.
            give(Keeper::Names, usize::MAX);
            assert!(has_room(Keeper::Names));
        })
        .join()
        .expect("thread");
    }
}
