//! What a replay keeps besides the analysis, within the reader's memory
//! budget (`memory_budget`): pids' names, and the window's first and last
//! checkpoints with their rows folded to the devices a report keeps.

use std::sync::Arc;

use super::MAX_DEVICES;
use crate::{
    memory_budget::Keeper,
    tracefile::{self, Checkpoint},
};

/// What a kept checkpoint's counter row costs.
const COUNTER_ROW_BYTES: usize = 64;

/// What a name costs the reader's memory budget.
fn name_bytes(n: &crate::aggregate::ProcName) -> usize {
    64 + n.comm.as_ref().map_or(0, String::len) + n.container.as_ref().map_or(0, String::len)
}

/// A pid's name, kept within the reader's memory budget (a file may name
/// any number of pids, each with a name as long as its strings allow).
pub(super) fn keep_name(
    names: &mut std::collections::HashMap<u32, crate::aggregate::ProcName>,
    n: crate::aggregate::ProcName,
) {
    use crate::memory_budget::{give, take_or_drop};
    let bytes = name_bytes(&n);
    let old = names.get(&n.pid).map(name_bytes);
    if let Some(old) = old {
        give(Keeper::Names, old);
    }
    if take_or_drop(Keeper::Names, bytes) {
        names.insert(n.pid, n);
    } else if old.is_some() {
        names.remove(&n.pid);
    }
}

/// Keeps `cp` in `slot`, giving back what the one it replaces held.
pub(super) fn keep(slot: &mut Option<Checkpoint>, cp: Checkpoint) {
    if let Some(old) = slot.take() {
        release(&old);
    }
    *slot = Some(cp);
}

/// Gives back what a checkpoint's rows were charged.
pub(super) fn release(cp: &Checkpoint) {
    crate::memory_budget::give(Keeper::Rows, cp.counters.len() * COUNTER_ROW_BYTES);
}

/// The devices a report keeps checkpoint rows of: those the tables keep,
/// and up to `MAX_DEVICES` more; further rows are summed under
/// `(other devices)` (a crafted checkpoint may name 64 Ki devices, and the
/// page's series keep every checkpoint's rows per bucket).
#[derive(Default)]
pub(super) struct CheckpointDevices {
    names: std::collections::HashSet<Arc<str>>,
}

impl CheckpointDevices {
    pub(super) fn fold(
        &mut self,
        cp: Checkpoint,
        agg: &crate::aggregate::Aggregator,
        dropped: &mut u64,
    ) -> Checkpoint {
        use gpudirect_trace_common::kind;
        let folded: Arc<str> = Arc::from(crate::aggregate::FOLDED_DEVICES);
        let mut rows: std::collections::BTreeMap<(Arc<str>, u32, u32), (u64, u64)> =
            Default::default();
        for c in cp.counters {
            // Kinds this reader does not know are skipped (forward
            // compatible), as the tables skip them.
            if u32::from(c.kind as u16) >= kind::COUNT {
                continue;
            }
            let keep = agg.devices.contains_key(&c.device)
                || self.names.contains(&c.device)
                || (self.names.len() < MAX_DEVICES && self.names.insert(c.device.clone()));
            let device = if keep { c.device } else { folded.clone() };
            let key = (device, c.kind, c.dir);
            if !rows.contains_key(&key)
                && !crate::memory_budget::take_or_drop(Keeper::Rows, COUNTER_ROW_BYTES)
            {
                *dropped += 1;
                continue;
            }
            let r = rows.entry(key).or_default();
            r.0 = r.0.saturating_add(c.count);
            r.1 = r.1.saturating_add(c.bytes);
        }
        Checkpoint {
            counters: rows
                .into_iter()
                .map(
                    |((device, kind, dir), (count, bytes))| tracefile::CounterRow {
                        device,
                        kind,
                        dir,
                        count,
                        bytes,
                    },
                )
                .collect(),
            ..cp
        }
    }
}
