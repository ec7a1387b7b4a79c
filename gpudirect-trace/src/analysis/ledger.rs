//! The fault ledger: every fault, Xid, AER error, mapping failure and IOMMU
//! change of a trace, each once, in order, with one clock. The live session
//! and the replay of a trace file feed it the same inputs in the same order
//! (the recorder writes them as they arrive), so both tell the same story.
//!
//! One physical event often reaches us twice: the NVIDIA driver prints its
//! Xid line and fires nvidia:nvidia_dev_xid from the same nvErrorLog call
//! (the tracepoint with the message alone, no `pid=`/`name=`); AMD-Vi calls report_iommu_fault() (the
//! iommu:io_page_fault tracepoint) and then logs the event; AER fires
//! ras:aer_event and prints `AER:` lines. A report from one channel merges
//! into an open incident from the other channel with the same merge key
//! whose time is within `MERGE_WINDOW_NS`: the first such incident, so the
//! outcome depends on input order only. The merged incident keeps the
//! earlier time and id, takes the log's richer decoding and the process
//! the report names, and lists both channels. Counts are taken when an
//! incident is created and never move.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use crate::{
    faults::explain::cause_label,
    memory_budget::{self, Keeper},
    model::{
        incident::{Category, Incident, IommuChange, MapError},
        Channel, Fault, MappingState, Process, ProcessOrigin, Source, TraceClock,
    },
};

/// Incidents kept with their details; older ones are evicted (counted).
pub const INCIDENTS_KEPT: usize = 4096;
/// Two reports of one event from different channels are at most this far
/// apart (the kernel log is polled every 100 ms; printk and the
/// tracepoint's clock agree to within microseconds).
pub const MERGE_WINDOW_NS: u64 = 2_000_000_000;

/// Key of the fault counts (the metric `gpudirect_iommu_faults_total`'s
/// labels): the device, the reporting family and the cause, where the
/// cause of an Xid is its number's meaning (its text varies per line).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct FaultCountKey {
    pub device: String,
    pub source: Source,
    pub cause: String,
}

/// One row of `fault_counts`: live and record `--json`, report `--json` and
/// serve's fault metrics all take the ledger's counts as these (fields in
/// the order the JSON has always had them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FaultCount {
    pub cause: String,
    pub count: u64,
    pub device: String,
    pub source: Source,
}

/// What the ledger did with a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A new incident with this id.
    New(u64),
    /// Merged into the open incident with this id (its second channel).
    Merged(u64),
}

impl Outcome {
    pub fn id(self) -> u64 {
        match self {
            Outcome::New(i) | Outcome::Merged(i) => i,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum MergeKey {
    Xid { device: String, xid: u32 },
    Aer { device: String },
    Iommu { device: String, address: u64 },
}

fn merge_key(f: &Fault) -> Option<MergeKey> {
    let device = f.device.clone()?;
    match f.source {
        Source::NvidiaXid => f.xid.map(|xid| MergeKey::Xid { device, xid }),
        Source::Aer => Some(MergeKey::Aer { device }),
        Source::IommuTracepoint | Source::AmdVi | Source::Smmu => {
            f.address.map(|address| MergeKey::Iommu { device, address })
        }
        Source::Vtd | Source::VirtioIommu => None,
    }
}

struct Open {
    id: u64,
    key: MergeKey,
    ts_ns: u64,
    channels: Vec<Channel>,
}

pub struct Ledger {
    clock: TraceClock,
    incidents: VecDeque<Incident>,
    /// What each kept incident was charged to the reader's memory budget
    /// (0 without one), in the same order.
    charged: VecDeque<usize>,
    next_id: u64,
    evicted: u64,
    counts: BTreeMap<FaultCountKey, u64>,
    open: VecDeque<Open>,
}

impl Ledger {
    pub fn new(clock: TraceClock) -> Self {
        Self {
            clock,
            incidents: VecDeque::new(),
            charged: VecDeque::new(),
            next_id: 1,
            evicted: 0,
            counts: BTreeMap::new(),
            open: VecDeque::new(),
        }
    }

    pub fn clock(&self) -> &TraceClock {
        &self.clock
    }

    /// Incidents in order (the newest `INCIDENTS_KEPT`).
    pub fn incidents(&self) -> &VecDeque<Incident> {
        &self.incidents
    }

    /// Incidents evicted because more than `INCIDENTS_KEPT` happened.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Faults by device, family and cause, since the start.
    pub fn counts(&self) -> &BTreeMap<FaultCountKey, u64> {
        &self.counts
    }

    /// The counts as rows, in key order.
    pub fn fault_counts(&self) -> Vec<FaultCount> {
        self.counts
            .iter()
            .map(|(k, &count)| FaultCount {
                cause: k.cause.clone(),
                count,
                device: k.device.clone(),
                source: k.source,
            })
            .collect()
    }

    pub fn get(&self, id: u64) -> Option<&Incident> {
        let first = self.incidents.front()?.id;
        let i = usize::try_from(id.checked_sub(first)?).ok()?;
        self.incidents.get(i).filter(|x| x.id == id)
    }

    pub fn incidents_mut(&mut self) -> impl Iterator<Item = &mut Incident> {
        self.incidents.iter_mut()
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut Incident> {
        let first = self.incidents.front()?.id;
        let i = usize::try_from(id.checked_sub(first)?).ok()?;
        self.incidents.get_mut(i).filter(|x| x.id == id)
    }

    fn evict_oldest(&mut self) {
        if self.incidents.pop_front().is_some() {
            self.evicted += 1;
        }
        if let Some(bytes) = self.charged.pop_front() {
            memory_budget::give(Keeper::Incidents, bytes);
        }
    }

    fn push(&mut self, mut incident: Incident) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        incident.id = id;
        if self.incidents.len() == INCIDENTS_KEPT {
            self.evict_oldest();
        }
        // Within the reader's memory budget, older incidents make room (a
        // crafted file's are as long as its strings allow); the newest is
        // kept whatever it costs (one incident's strings are clipped).
        let bytes = incident_bytes(&incident);
        while !memory_budget::take(Keeper::Incidents, bytes) {
            if self.incidents.is_empty() {
                memory_budget::charge(Keeper::Incidents, bytes);
                break;
            }
            self.evict_oldest();
            memory_budget::dropped(Keeper::Incidents, 1);
        }
        self.incidents.push_back(incident);
        self.charged.push_back(bytes);
        id
    }

    /// Charges the growth of incident `id` (a merge, stacks filled in).
    pub fn recharge(&mut self, id: u64) {
        let Some(first) = self.incidents.front().map(|i| i.id) else {
            return;
        };
        let Some(i) = id.checked_sub(first).and_then(|i| usize::try_from(i).ok()) else {
            return;
        };
        let (Some(inc), Some(old)) = (self.incidents.get(i), self.charged.get(i).copied()) else {
            return;
        };
        let now = incident_bytes(inc);
        memory_budget::give(Keeper::Incidents, old);
        memory_budget::charge(Keeper::Incidents, now);
        self.charged[i] = now;
    }

    /// Adds a fault seen on channel `ch`, or merges it into the report of
    /// the same event from the other channel. `mapping` tells the address's
    /// state in the mapping history for a new incident.
    pub fn fault(
        &mut self,
        mut f: Fault,
        ch: Channel,
        mapping: impl FnOnce(&Fault) -> Option<MappingState>,
    ) -> Outcome {
        let ts = f.timestamp_ns.unwrap_or(0);
        let key = merge_key(&f);
        while self
            .open
            .front()
            .is_some_and(|o| ts.saturating_sub(o.ts_ns) > MERGE_WINDOW_NS)
        {
            self.open.pop_front();
        }
        if let Some(key) = &key {
            let hit = self.open.iter_mut().find(|o| {
                o.key == *key
                    && !o.channels.contains(&ch)
                    && o.ts_ns.abs_diff(ts) <= MERGE_WINDOW_NS
            });
            if let Some(o) = hit {
                o.channels.push(ch);
                let id = o.id;
                if let Some(inc) = self.get_mut(id) {
                    if let Some(old) = inc.fault.as_mut() {
                        merge_into(old, f, ch);
                        refresh(inc);
                    }
                }
                if memory_budget::is_on() {
                    self.recharge(id);
                }
                return Outcome::Merged(id);
            }
        }
        if f.t_s.is_none() {
            f.t_s = f.timestamp_ns.map(|t| self.clock.stamp(t).t_s);
        }
        if f.wall_time.is_none() {
            f.wall_time = f.timestamp_ns.and_then(|t| self.clock.wall(t));
        }
        if f.seen_in.is_empty() {
            f.seen_in.push(ch);
        }
        if f.mapping.is_none() {
            f.mapping = mapping(&f);
        }
        let count_key = FaultCountKey {
            device: f.device.clone().unwrap_or_else(|| "-".into()),
            source: f.source,
            cause: cause_label(&f),
        };
        // Keyed by text from the input: new keys within the reader's
        // memory budget, the rest counted together.
        let count_key = if self.counts.contains_key(&count_key)
            || memory_budget::take_or_drop(Keeper::Rows, count_key_bytes(&count_key))
        {
            count_key
        } else {
            FaultCountKey {
                device: crate::aggregate::FOLDED_DEVICES.into(),
                source: count_key.source,
                cause: "(other causes)".into(),
            }
        };
        let n = self.counts.entry(count_key).or_default();
        *n = n.saturating_add(f.count.max(1));
        let category = match f.source {
            Source::NvidiaXid => Category::Xid,
            Source::Aer => Category::Aer,
            _ => Category::IommuFault,
        };
        let mut inc = Incident {
            id: 0,
            at: self.clock.stamp(ts),
            category,
            device: f.device.clone().unwrap_or_else(|| "-".into()),
            process: None,
            address: None,
            text: String::new(),
            fault: Some(f),
            change: None,
            map_error: None,
            misuse: None,
            link: None,
            context: None,
        };
        refresh(&mut inc);
        let id = self.push(inc);
        if let Some(key) = key {
            self.open.push_back(Open {
                id,
                key,
                ts_ns: ts,
                channels: vec![ch],
            });
            // An open incident older than the kept ones cannot take a
            // merge: a flood within the window stays bounded (and linear).
            if self.open.len() > INCIDENTS_KEPT {
                self.open.pop_front();
            }
        }
        Outcome::New(id)
    }

    /// A DMA-API mapping that failed.
    pub fn map_error(&mut self, device: &str, ts_ns: u64, pid: u32, e: MapError) -> u64 {
        let text = format!(
            "{} failed{}{} ({})",
            e.api,
            e.errno.map(|n| format!(": error {n}")).unwrap_or_default(),
            e.entries
                .map(|n| format!(", {n} entries"))
                .unwrap_or_default(),
            e.direction
        );
        let inc = Incident {
            id: 0,
            at: self.clock.stamp(ts_ns),
            category: Category::MapError,
            device: device.to_owned(),
            process: Process::of_task(pid),
            address: None,
            text,
            fault: None,
            change: None,
            map_error: Some(e),
            misuse: None,
            link: None,
            context: None,
        };
        self.push(inc)
    }

    /// A DMA-API misuse the checker proved.
    pub fn misuse(&mut self, m: crate::model::misuse::Misuse) -> u64 {
        let ts = m.call.at.mono_ns;
        let inc = Incident {
            id: 0,
            at: self.clock.stamp(ts),
            category: Category::Misuse,
            device: m.device.clone(),
            process: m.call.process.clone(),
            address: m.call.address,
            text: m.text(),
            fault: None,
            change: None,
            map_error: None,
            misuse: Some(m),
            link: None,
            context: None,
        };
        self.push(inc)
    }

    /// A change of a device's PCIe link or presence.
    pub fn link(&mut self, device: &str, ts_ns: u64, c: crate::model::pci::LinkChange) -> u64 {
        let inc = Incident {
            id: 0,
            at: self.clock.stamp(ts_ns),
            category: Category::Link,
            device: device.to_owned(),
            process: None,
            address: None,
            text: c.to_string(),
            fault: None,
            change: None,
            map_error: None,
            misuse: None,
            link: Some(c),
            context: None,
        };
        self.push(inc)
    }

    /// A device joined or left an IOMMU group, or changed domain.
    pub fn iommu_change(&mut self, device: &str, ts_ns: u64, pid: u32, c: IommuChange) -> u64 {
        let inc = Incident {
            id: 0,
            at: self.clock.stamp(ts_ns),
            category: Category::IommuChange,
            device: device.to_owned(),
            process: Process::of_task(pid),
            address: None,
            text: c.to_string(),
            fault: None,
            change: Some(c),
            map_error: None,
            misuse: None,
            link: None,
            context: None,
        };
        self.push(inc)
    }
}

/// What an incident costs the reader's memory budget: its JSON length
/// (about its text) and its struct; 0 without a budget (live), unmeasured.
fn incident_bytes(i: &Incident) -> usize {
    if !memory_budget::is_on() {
        return 0;
    }
    serde_json::to_vec(i).map_or(0, |v| v.len()) + std::mem::size_of::<Incident>()
}

fn count_key_bytes(k: &FaultCountKey) -> usize {
    96 + k.device.len() + k.cause.len()
}

/// The incident's own fields from its fault.
fn refresh(inc: &mut Incident) {
    let Some(f) = &inc.fault else { return };
    inc.device = f.device.clone().unwrap_or_else(|| "-".into());
    inc.process = f.process.clone();
    inc.address = f.address;
    let mut text = f.reason.clone();
    if let Some(a) = f.access {
        text.push_str(&format!(" ({})", a.as_str()));
    }
    if f.count > 1 {
        text.push_str(&format!(" x{}", f.count));
    }
    inc.text = text;
}

/// `new`, the same event from channel `ch`, into `old`.
fn merge_into(old: &mut Fault, new: Fault, ch: Channel) {
    old.seen_in.push(ch);
    // A log line is decoded with the family's own tables: richer than what
    // the tracepoint carries. The earlier time and the count stay.
    if ch == Channel::KernelLog {
        old.source = new.source;
        old.reason = new.reason;
        old.reason_code = new.reason_code.or(old.reason_code);
        old.explanation = new.explanation;
        if !new.flags.is_empty() {
            old.flags = new.flags;
        }
        old.access = new.access.or(old.access);
        old.pasid = new.pasid.or(old.pasid);
        old.partial = new.partial;
        old.raw = new.raw;
        old.device_raw = new.device_raw.or(old.device_raw.take());
    }
    old.address = old.address.or(new.address);
    let reported = |p: &Option<Process>| {
        p.as_ref()
            .is_some_and(|p| p.from == ProcessOrigin::Reported)
    };
    if !reported(&old.process) && (reported(&new.process) || old.process.is_none()) {
        old.process = new.process;
    }
}

#[cfg(test)]
mod tests;
