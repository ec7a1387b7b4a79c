//! What the trace says about a faulting address and the task behind it:
//! the mapping that covers the address, the unmaps each device remembers
//! for "DMA after unmap", and a pid's recent activity. Kept apart from the
//! counting in `mod.rs` because only fault and Xid correlation reads it.

use gpudirect_trace_common::Event;

use super::{procs, Aggregator, DeviceStats};
use crate::{
    memory_budget::{self, Keeper},
    model::{task_of, MapLevel, MappingState, Process},
};

/// An unmap kept for fault correlation.
#[derive(Clone, Copy, Debug)]
pub struct Unmapped {
    pub addr: u64,
    pub size: u64,
    pub ts_ns: u64,
    pub pid: u32,
    pub level: MapLevel,
}

/// Unmaps remembered per device for fault correlation.
pub const RECENT_UNMAPS: usize = 4096;
/// What one remembered unmap costs the reader's memory budget.
const UNMAP_BYTES: usize = 48;

impl DeviceStats {
    pub(super) fn note_unmap(&mut self, ev: &Event, size: u64, level: MapLevel) {
        // Without room in the reader's budget the history stays shorter.
        if self.recent_unmaps.len() == RECENT_UNMAPS
            || (!memory_budget::take_or_drop(Keeper::Unmaps, UNMAP_BYTES)
                && !self.recent_unmaps.is_empty())
        {
            self.recent_unmaps.pop_front();
        }
        self.recent_unmaps.push_back(Unmapped {
            addr: ev.addr,
            size,
            ts_ns: ev.ts_ns,
            pid: task_of(ev),
            level,
        });
    }
}

impl Aggregator {
    /// What the trace says about `addr` for `device` at fault time `ts_ns`:
    /// inside a live mapping, unmapped shortly before (DMA after unmap), or
    /// never mapped while tracing.
    pub fn mapping_state(&self, device: &str, addr: u64, ts_ns: Option<u64>) -> MappingState {
        let Some(d) = self.devices.get(device) else {
            return MappingState::NeverMapped { device_seen: false };
        };
        for (level, l) in [
            (MapLevel::DmaApi, &d.dma),
            (MapLevel::Iommu, &d.iommu),
            (MapLevel::Coherent, &d.coherent),
        ] {
            if let Some((since, pid)) = l.covering(addr) {
                return MappingState::Mapped {
                    level,
                    age_ns: ts_ns.map_or(0, |t| t.saturating_sub(since)),
                    by: self.named(pid),
                };
            }
        }
        let hit = d.recent_unmaps.iter().rev().find(|u| {
            addr >= u.addr
                && addr < u.addr.saturating_add(u.size.max(1))
                && ts_ns.is_none_or(|t| u.ts_ns <= t)
        });
        match hit {
            Some(u) => MappingState::Unmapped {
                level: u.level,
                before_ns: ts_ns.map_or(0, |t| t.saturating_sub(u.ts_ns)),
                by: self.named(u.pid),
            },
            None => MappingState::NeverMapped {
                device_seen: d.dma.maps + d.iommu.maps + d.coherent.maps > 0,
            },
        }
    }

    /// The process of a task, with its name where it is known (a fault's
    /// mapping history says who mapped or unmapped, by name).
    fn named(&self, pid: u32) -> Option<Process> {
        let mut p = Process::of_task(pid)?;
        if p.pid != 0 {
            p.comm = self.names.get(&p.pid).and_then(|n| n.comm.clone());
        }
        Some(p)
    }

    /// `pid`'s DMA activity on `device` (its reported level) in the
    /// `window_s` seconds up to `ts_ns`.
    pub fn activity(
        &self,
        device: &str,
        pid: u32,
        ts_ns: u64,
        window_s: u64,
    ) -> Option<procs::Activity> {
        let d = self.devices.get(device)?;
        let level = if d.dma.maps > 0 || d.dma.unmaps > 0 {
            &d.dma
        } else {
            &d.iommu
        };
        level.procs.activity(pid, ts_ns, window_s)
    }
}
