//! What a flight-recorder snapshot's report opens with: the trigger, and
//! what led to it on the device it names: the mappings live at that moment,
//! those unmapped in the seconds before, the map and unmap rates, earlier
//! mapping failures and AER errors.

use std::fmt::Write as _;

use serde::Serialize;

use crate::{
    aggregate::{Aggregator, LongLived},
    model::{incident::Category, Incident},
    output::{bytes, ns},
    tracefile::SnapshotInfo,
};

/// How far back "the seconds before" the trigger reach.
pub const LEAD_NS: u64 = 5_000_000_000;
/// Mappings and unmaps listed.
const LISTED: usize = 8;

#[derive(Clone, Debug, Default, Serialize)]
pub struct RecentUnmap {
    pub address: String,
    pub size: u64,
    pub before_ns: u64,
    pub pid: u32,
}

/// The trigger's device at the moment it fired.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Lead {
    pub device: String,
    pub live_mappings: u64,
    pub live_bytes: u64,
    /// The oldest live mappings (leak suspects, or the mapping in use).
    pub oldest_live: Vec<LongLived>,
    /// Unmaps in the `LEAD_NS` before, newest first.
    pub unmapped_before: Vec<RecentUnmap>,
    pub unmaps_before: u64,
    /// Maps and unmaps of the device in the `LEAD_NS` before.
    pub maps_in_lead: u64,
    pub unmaps_in_lead: u64,
    /// Earlier incidents of the device in the snapshot (AER errors,
    /// mapping failures, faults), by id.
    pub earlier: Vec<u64>,
}

/// Counts a record toward the lead when it is the trigger's device's and
/// within `LEAD_NS` before the trigger.
pub fn count_lead(lead: &mut Lead, at_ns: u64, device: &str, kind: u16, ts: u64) {
    if device != lead.device || ts > at_ns || at_ns - ts > LEAD_NS {
        return;
    }
    match crate::aggregate::span_of(kind) {
        Some((_, true)) => lead.maps_in_lead += 1,
        Some((_, false)) => lead.unmaps_in_lead += 1,
        None => {}
    }
}

/// The device's state in the tables at the trigger (called once the replay
/// reaches it).
pub fn capture(lead: &mut Lead, agg: &Aggregator, at_ns: u64, incidents: &[&Incident]) {
    let Some(d) = agg.devices.get(lead.device.as_str()) else {
        return;
    };
    let mut oldest = Vec::new();
    for level in [&d.dma, &d.iommu, &d.coherent] {
        lead.live_mappings += level.outstanding() as u64;
        lead.live_bytes += level.outstanding_bytes;
        oldest.extend(level.long_lived(at_ns, 0, LISTED));
    }
    oldest.sort_by(|a, b| b.age_s.total_cmp(&a.age_s));
    oldest.truncate(LISTED);
    lead.oldest_live = oldest;
    let recent: Vec<_> = d
        .recent_unmaps
        .iter()
        .rev()
        .filter(|u| u.ts_ns <= at_ns && at_ns - u.ts_ns <= LEAD_NS)
        .collect();
    lead.unmaps_before = recent.len() as u64;
    lead.unmapped_before = recent
        .iter()
        .take(LISTED)
        .map(|u| RecentUnmap {
            address: format!("{:#x}", u.addr),
            size: u.size,
            before_ns: at_ns - u.ts_ns,
            pid: u.pid,
        })
        .collect();
    lead.earlier = incidents
        .iter()
        .filter(|i| i.device == lead.device && i.at.mono_ns < at_ns)
        .map(|i| i.id)
        .collect();
}

/// How long recording went on after the trigger, as the file holds it:
/// `(held, asked)` from `Replay::after_trigger_ns` (a recorder stopped by
/// SIGTERM holds less than the `--after` its header asked for).
pub fn went_on((held, asked): (u64, u64), fmt: impl Fn(u64) -> String) -> String {
    if held < asked {
        format!(
            "recording went on {} after it (cut short: {} asked)",
            fmt(held),
            fmt(asked)
        )
    } else {
        format!("recording went on {} after it", fmt(held))
    }
}

/// Why the ring held less time before the trigger than its age bound
/// asked: the byte bound dropped older blocks, or recording had not been
/// going that long.
pub fn short_of_asked(info: &SnapshotInfo, held: u64) -> Option<String> {
    let asked = info.ring_max_ns?;
    if held >= asked {
        return None;
    }
    Some(match info.ring_max_bytes {
        Some(b) if info.discarded_events > 0 => format!(
            "less than the {} asked: the {} bound dropped older blocks",
            ns(asked),
            bytes(b)
        ),
        _ => format!(
            "less than the {} asked: recording had been going only that long",
            ns(asked)
        ),
    })
}

/// The section the text report opens with.
pub fn text(
    info: &SnapshotInfo,
    lead: Option<&Lead>,
    incidents: &[&Incident],
    clock: &crate::model::TraceClock,
    after: Option<(u64, u64)>,
) -> String {
    let mut s = String::new();
    let t = &info.trigger;
    let held = t.at_ns.saturating_sub(info.ring_from_ns);
    let _ = writeln!(
        s,
        "flight-recorder snapshot: trigger {} ({}) at {:.6}s{}; the ring held the {} before it{}, \
         and had already dropped {} older events; {}",
        t.name,
        t.label,
        clock.rel_s(t.at_ns),
        clock
            .wall(t.at_ns)
            .map(|w| format!(" ({w})"))
            .unwrap_or_default(),
        ns(held),
        match short_of_asked(info, held) {
            Some(why) => format!(" ({why})"),
            None => String::new(),
        } + &match (info.ring_max_ns, info.ring_max_bytes) {
            (Some(a), Some(b)) => format!(" (bounds {} / {})", ns(a), bytes(b)),
            (Some(a), None) => format!(" (bound {})", ns(a)),
            (None, Some(b)) => format!(" (bound {})", bytes(b)),
            (None, None) => String::new(),
        },
        info.discarded_events,
        went_on(after.unwrap_or((info.after_ns, info.after_ns)), ns)
    );
    if let Some(fired) = &t.incident {
        // The trigger kept the incident as it was when it fired (an Xid's
        // tracepoint event, before the driver's log line named the
        // process); the replay has it merged: show that one.
        let i = incidents
            .iter()
            .copied()
            .find(|j| {
                j.category == fired.category
                    && j.device == fired.device
                    && j.at.mono_ns.abs_diff(fired.at.mono_ns)
                        <= crate::analysis::ledger::MERGE_WINDOW_NS
            })
            .unwrap_or(fired);
        let _ = writeln!(s, "  trigger: {i}");
        if let Some(m) = i.mapping_line() {
            let _ = writeln!(s, "      {m}");
        }
        for l in i.misuse_lines() {
            let _ = writeln!(s, "      {l}");
        }
    }
    let Some(l) = lead else { return s };
    let _ = writeln!(
        s,
        "what led to it on {}: {} live mapping(s) ({}) at the trigger; in the {} before it {} maps, \
         {} unmaps ({} listed below)",
        l.device,
        l.live_mappings,
        bytes(l.live_bytes),
        ns(LEAD_NS),
        l.maps_in_lead,
        l.unmaps_in_lead,
        l.unmapped_before.len()
    );
    for m in &l.oldest_live {
        let _ = writeln!(
            s,
            "  live      {:>18} {:>9} mapped {:>8.3}s before, pid {}",
            m.address,
            bytes(m.size),
            m.age_s,
            m.pid
        );
    }
    for u in &l.unmapped_before {
        let _ = writeln!(
            s,
            "  unmapped  {:>18} {:>9} {} before, pid {}",
            u.address,
            bytes(u.size),
            ns(u.before_ns),
            u.pid
        );
    }
    let earlier: Vec<&&Incident> = incidents
        .iter()
        .filter(|i| l.earlier.contains(&i.id))
        .filter(|i| {
            matches!(
                i.category,
                Category::Aer
                    | Category::MapError
                    | Category::IommuFault
                    | Category::Xid
                    | Category::Misuse
            )
        })
        .collect();
    for i in earlier.iter().rev().take(LISTED) {
        let _ = writeln!(s, "  earlier   {i}");
    }
    s
}
