//! The kernel stacks a trace file's records name (`--check --stacks`), each
//! written with its frames once. The session symbolizes only the stacks its
//! findings name (`take_stacks`): enough for a report, but `export` prints
//! every DMA-API record's `stack_id`, and an id whose frames the file lacks
//! tells its reader nothing (seen on the GPU host, session 21: a recording
//! of the driver's real calls with `--stacks-every-call` and no finding
//! exported stack ids and not one `"kind":"stacks"` line).
//!
//! A recording writes each stack once. The flight recorder's ring drops its
//! oldest blocks, a stack's among them, while later records may name it
//! again: there each flush writes the stacks of its own records, so that
//! whatever stretch the ring still holds carries the frames it names.

use std::collections::{BTreeSet, HashMap, HashSet};

use gpudirect_trace_common::{aux_stack, kind};

use super::{Observed, Session};
use crate::model::misuse::StackFrames;

/// Stack ids seen in records and not yet written. Bounded by the kernel's
/// stack map: its ids are its buckets (`maps::STACKS_CAP`), never reused in
/// a session (no entry is deleted).
#[derive(Default)]
pub struct StacksToWrite {
    /// Records carry stack ids (`--stacks`).
    on: bool,
    /// Each flush writes its records' stacks, written before or not (a
    /// ring that drops old blocks); else each stack is written once.
    every_flush: bool,
    written: HashSet<u32>,
    pending: BTreeSet<u32>,
    /// With `every_flush`: the frames named so far, by stack id (an id's
    /// frames do not change within a session). Each second writes them
    /// again without a map lookup or a symbolization, whose frames no
    /// symbol covers would otherwise read /proc/kallsyms again every 10 s
    /// (`Symbolizer::stacks`), for as long as the recorder runs.
    named: HashMap<u32, Vec<String>>,
}

impl StacksToWrite {
    /// For a file written from `session`: on where its records carry stacks.
    pub fn of(session: &Session) -> Self {
        Self {
            on: session.check.as_ref().is_some_and(|c| c.stacks),
            ..Self::default()
        }
    }

    /// For a ring of blocks written from `session` (the flight recorder):
    /// as `of`, but each flush writes the stacks its own records name.
    pub fn every_flush(session: &Session) -> Self {
        Self {
            every_flush: true,
            ..Self::of(session)
        }
    }

    /// Notes what goes into the file: a DMA-API record's stack id, or
    /// stacks written (the findings').
    pub fn note(&mut self, o: &Observed<'_>) {
        if !self.on {
            return;
        }
        match o {
            Observed::Record { record, .. } => {
                let e = record.event();
                if let Some(id) = aux_stack(e.aux).filter(|_| kind::info(e.kind).stack) {
                    if !self.written.contains(&id) {
                        self.pending.insert(id);
                    }
                }
            }
            Observed::Stacks(list) => {
                for s in *list {
                    if self.every_flush {
                        self.named.entry(s.id).or_insert_with(|| s.frames.clone());
                    } else {
                        self.written.insert(s.id);
                    }
                    self.pending.remove(&s.id);
                }
            }
            _ => {}
        }
    }

    /// The frames of the stacks noted since the last call and not written,
    /// to be written now (empty when there are none).
    pub fn take(&mut self, session: &mut Session) -> Vec<StackFrames> {
        if self.pending.is_empty() {
            return Vec::new();
        }
        let ids: Vec<u32> = std::mem::take(&mut self.pending).into_iter().collect();
        if !self.every_flush {
            self.written.extend(&ids);
            return session.stack_frames(ids);
        }
        let new: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|id| !self.named.contains_key(id))
            .collect();
        if !new.is_empty() {
            for s in session.stack_frames(new) {
                self.named.insert(s.id, s.frames);
            }
        }
        ids.into_iter()
            .map(|id| StackFrames {
                id,
                frames: self.named.get(&id).cloned().unwrap_or_default(),
            })
            .collect()
    }
}
