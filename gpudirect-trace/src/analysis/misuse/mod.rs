//! The misuse checks (`--check`): dma-debug's checks made from the trace.
//!
//! **Only what the trace proves.** The checker knows a handle only from a
//! map it saw: an unmap or sync of a handle it never saw mapped is counted
//! as "unknown (mapped before tracing)", never reported. A double unmap is
//! reported only for a handle it saw mapped and then unmapped, with no map
//! at that handle since. Events lost in between could hide a map or an
//! unmap, so findings wait for the next loss check (at most a second, the
//! recorder's checkpoint): if events were lost since, they are dropped
//! (counted as unproven) and everything the checker knew is forgotten, as
//! if tracing started again.
//!
//! The DMA API's tracepoints fire after the call did its work (6.12: map
//! and unmap alike), so a handle unmapped on one CPU and mapped again on
//! another may reach the ring as "map" before the "unmap" of its previous
//! life. Live handles are a multiset, and an unmap takes the live mapping
//! that matches it best: that order can neither make a mismatch nor a
//! double unmap.

#[cfg(test)]
mod bench;
mod call;
mod handles;
mod iova;
mod lines;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_iova;

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
};

use gpudirect_trace_common::dir;
use serde::Serialize;

pub use self::call::{dir_name, DmaCall, Op, DMA_ATTR_SKIP_CPU_SYNC, DMA_MAPPING_ERROR};
use self::{
    handles::{Handles, Live},
    lines::{Lines, Span},
};
use crate::{
    decode::Record,
    memory_budget::{self, Keeper},
    model::{
        misuse::{ApiClass, Call, Check, ImageRange, Misuse},
        Process, TraceClock,
    },
};

/// Live mappings tracked per device; past it maps are counted, and their
/// handles become unknown (never a finding).
pub const MAX_LIVE: usize = 1 << 20;
/// Findings held until the next loss check (their counts are always kept).
pub const PENDING_KEPT: usize = 4096;
/// Callers of failed maps kept apart per device (a host has a few); the
/// rest count as an unknown caller.
pub const MAX_FAILURE_ROWS: usize = 1024;

/// What the checker could not check, and what it found, in counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CheckStats {
    /// Unmaps and frees of handles never seen mapped (mapped before
    /// tracing, or forgotten after a loss).
    pub unknown_unmaps: u64,
    /// Syncs of handles never seen mapped.
    pub unknown_syncs: u64,
    /// Maps not tracked (a device past `MAX_LIVE` live mappings).
    pub untracked_maps: u64,
    /// Findings dropped because events were lost before they were proven.
    pub unproven: u64,
    /// Times the checker forgot everything after a loss.
    pub resets: u64,
    /// Findings by device and check (every one, also those not kept).
    pub findings: BTreeMap<String, BTreeMap<Check, u64>>,
    /// Failed maps by device, API and calling stack.
    pub map_failures: BTreeMap<String, Vec<MapFailures>>,
}

/// Failed maps of one device from one caller.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MapFailures {
    pub api: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack_id: Option<u32>,
    /// The stack's first frame outside the DMA API (`--stacks`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    pub count: u64,
}

impl CheckStats {
    pub fn total(&self) -> u64 {
        self.findings.values().flat_map(|m| m.values()).sum()
    }
}

#[derive(Default)]
pub struct Checker {
    clock: TraceClock,
    /// Records carry kernel stack ids (`--stacks`).
    stacks: bool,
    devices: HashMap<Arc<str>, Handles>,
    /// The IOVA API's spaces and links (iova.rs).
    iova: HashMap<Arc<str>, iova::DeviceIova>,
    lines: Lines,
    image: Vec<ImageRange>,
    drivers: HashMap<String, String>,
    pending: Vec<Misuse>,
    /// Findings since the last loss check, by device and check (a count
    /// each: a file may hold any number between two checks).
    pending_counts: BTreeMap<(String, Check), u64>,
    lost_seen: u64,
    pub stats: CheckStats,
}

impl Checker {
    pub fn new(clock: TraceClock, image: Vec<ImageRange>) -> Self {
        Self {
            clock,
            image,
            ..Default::default()
        }
    }

    /// Records carry kernel stack ids (`--stacks`).
    pub fn with_stacks(mut self, on: bool) -> Self {
        self.stacks = on;
        self
    }

    /// The device's driver, named in its findings.
    pub fn set_driver(&mut self, device: &str, driver: Option<&str>) {
        match driver {
            Some(d) => self.drivers.insert(device.to_owned(), d.to_owned()),
            None => self.drivers.remove(device),
        };
    }

    /// One record of the trace, in order.
    pub fn record(&mut self, record: &Record, device: &Arc<str>) {
        if record.event().flags & gpudirect_trace_common::flags::IOVA != 0 {
            return self.iova_record(record, device);
        }
        if let Some(c) = DmaCall::from_record(record, self.stacks) {
            self.call(c, device);
        }
    }

    pub fn call(&mut self, c: DmaCall, device: &Arc<str>) {
        match c.op {
            Op::Map => self.map(c, device),
            Op::Unmap => self.unmap(c, device),
            Op::Sync { for_cpu } => self.sync(c, for_cpu, device),
            Op::MapFailed => self.map_failed(device, c.api, c.stack),
        }
    }

    /// The device's driver let it go (unbind): what it still had mapped
    /// is a leak.
    pub fn unbind(&mut self, device: &Arc<str>, ts_ns: u64) {
        let mut live: Vec<&DmaCall> = self
            .devices
            .get(device)
            .map(|h| h.all_live().into_iter().map(|l| &l.map).collect())
            .unwrap_or_default();
        if let Some(d) = self.iova.get(device) {
            live.extend(d.live_links());
            live.sort_by_key(|c| c.ts_ns);
        }
        let Some(&oldest) = live.first() else { return };
        let bytes: u64 = live.iter().map(|l| l.size).fold(0, u64::saturating_add);
        let oldest = oldest.clone();
        let mut m = self.finding(
            Check::LeakAtUnbind,
            device,
            None,
            &oldest,
            format!(
                "[count={}] [bytes={bytes}] [unbound at {}]",
                live.len(),
                self.clock.stamp(ts_ns)
            ),
        );
        m.count = live.len() as u64;
        self.push(device, m);
    }

    /// Events lost so far (ring overflow and missed program runs): findings
    /// made since the last call are proven when the count did not grow.
    /// Returns the proven findings, in order.
    pub fn confirm(&mut self, lost_total: u64) -> Vec<Misuse> {
        if lost_total > self.lost_seen {
            self.lost_seen = lost_total;
            self.stats.unproven += self.pending_counts.values().sum::<u64>();
            self.pending.clear();
            self.pending_counts.clear();
            self.devices.clear();
            self.iova.clear();
            self.lines.clear();
            self.stats.resets += 1;
            return Vec::new();
        }
        for ((device, check), n) in std::mem::take(&mut self.pending_counts) {
            *self
                .stats
                .findings
                .entry(device)
                .or_default()
                .entry(check)
                .or_default() += n;
        }
        std::mem::take(&mut self.pending)
    }

    fn handles(&mut self, device: &Arc<str>) -> &mut Handles {
        // No clone of the name (an atomic add) on the hot path.
        if !self.devices.contains_key(device) {
            self.devices.insert(device.clone(), Handles::default());
        }
        self.devices.get_mut(device).expect("inserted above")
    }

    fn map(&mut self, c: DmaCall, device: &Arc<str>) {
        if let (Some(phys), ApiClass::Single) = (c.phys, c.class) {
            if let Some(r) = self
                .image
                .iter()
                .find(|r| r.overlaps(phys, c.size))
                .cloned()
            {
                let detail = format!("[phys={phys:#x}] [len={}] [in {}]", c.size, r.name);
                self.report(Check::KernelImage, device, None, &c, detail);
            }
        }
        let mut line_seq = None;
        let span = self.cached_span(&c);
        if let Some(s) = span {
            if let Some((odev, ohandle)) = self.lines.overlapping(s) {
                let (odev, other) = (odev.clone(), ohandle);
                let first = self
                    .devices
                    .get(&odev)
                    .and_then(|h| h.live_at(other).next())
                    .map(|l| l.map.clone());
                if c.attrs & DMA_ATTR_SKIP_CPU_SYNC == 0 {
                    let detail = format!(
                        "[device address={:#018x}] [phys={:#x}] [size={} bytes] [shares a \
                         cacheline with {odev}'s mapping at {other:#x}]",
                        c.addr,
                        c.phys.unwrap_or(0),
                        c.size
                    );
                    self.report(Check::CachelineOverlap, device, first.as_ref(), &c, detail);
                }
            }
        }
        let h = self.handles(device);
        // Past the table's cap or the reader's memory budget: unknown.
        if h.live_count() >= MAX_LIVE || !h.room_for_live() {
            h.forget_gone(c.addr);
            self.stats.untracked_maps += 1;
            return;
        }
        if let Some(s) = span {
            line_seq = Some(self.lines.insert(s, device.clone(), c.addr));
        }
        self.handles(device).insert(Live { map: c, line_seq });
    }

    /// The cachelines dma-debug tracks for a mapping: single mappings with
    /// a physical address that the device may write (not TO_DEVICE).
    fn cached_span(&self, c: &DmaCall) -> Option<Span> {
        if c.class != ApiClass::Single || c.dir == dir::TO_DEVICE || c.dir == dir::NONE {
            return None;
        }
        Span::of(c.phys?, c.size)
    }

    fn unmap(&mut self, c: DmaCall, device: &Arc<str>) {
        let h = self.handles(device);
        let Some(l) = h.take(&c) else {
            let gone = h.gone(c.addr).cloned();
            match gone {
                Some(g) => {
                    let detail = format!(
                        "[device address={:#018x}] [size={} bytes] {}",
                        c.addr,
                        c.size,
                        self.earlier("already unmapped", g.unmap_api, g.unmap_ts_ns)
                    );
                    self.report(Check::DoubleUnmap, device, Some(&g.map), &c, detail);
                }
                None => self.stats.unknown_unmaps += 1,
            }
            return;
        };
        if let (Some(seq), Some(s)) = (l.line_seq, self.cached_span(&l.map)) {
            self.lines.remove(s, seq);
        }
        let m = &l.map;
        let addr = c.addr;
        let mut found = Vec::new();
        if m.class != c.class {
            found.push((
                Check::UnmapClass,
                format!(
                    "[device address={addr:#018x}] [size={} bytes] [mapped as {}] [unmapped as {}]",
                    m.size,
                    m.class.as_str(),
                    c.class.as_str()
                ),
            ));
        } else {
            if c.class == ApiClass::ScatterGather {
                found.extend(sg_count(Check::SgUnmapCount, "unmap", addr, m, &c));
            } else if m.size != c.size {
                found.push((
                    Check::UnmapSize,
                    format!(
                        "[device address={addr:#018x}] [map size={} bytes] [unmap size={} bytes]",
                        m.size, c.size
                    ),
                ));
            }
            if c.class != ApiClass::Coherent && m.dir != c.dir {
                found.push((
                    Check::UnmapDirection,
                    format!(
                        "[device address={addr:#018x}] [size={} bytes] [mapped with {}] \
                         [unmapped with {}]",
                        m.size,
                        dir_name(m.dir),
                        dir_name(c.dir)
                    ),
                ));
            }
        }
        for (check, detail) in found {
            self.report(check, device, Some(&l.map), &c, detail);
        }
        self.handles(device).remember_unmap(l.map, &c);
    }

    fn sync(&mut self, c: DmaCall, for_cpu: bool, device: &Arc<str>) {
        let h = self.handles(device);
        let addr = c.addr;
        let end = addr.saturating_add(c.size);
        let (map, inside) = if c.class == ApiClass::ScatterGather {
            // An sg sync names the list by its first entry, like its map.
            let m = h
                .live_at(addr)
                .find(|l| l.map.class == ApiClass::ScatterGather)
                .map(|l| l.map.clone());
            (m, true)
        } else {
            let mut best = None;
            for l in h.containing(addr) {
                let fits = end <= l.map.addr.saturating_add(l.map.size);
                if fits {
                    best = Some((l.map.clone(), true));
                    break;
                }
                best.get_or_insert((l.map.clone(), false));
            }
            best.map_or((None, true), |(m, f)| (Some(m), f))
        };
        let Some(m) = map else {
            let gone = h.gone_containing(addr).cloned();
            match gone {
                Some(g) => {
                    let detail = format!(
                        "[device address={addr:#018x}] [size={} bytes] {}",
                        c.size,
                        self.earlier("unmapped", g.unmap_api, g.unmap_ts_ns)
                    );
                    self.report(Check::SyncUnmapped, device, Some(&g.map), &c, detail);
                }
                None => self.stats.unknown_syncs += 1,
            }
            return;
        };
        let mut found = Vec::new();
        if !inside {
            found.push((
                Check::SyncOutside,
                format!(
                    "[device address={:#018x}] [allocation size={} bytes] [sync offset+size={}]",
                    m.addr,
                    m.size,
                    (addr - m.addr).saturating_add(c.size)
                ),
            ));
        }
        if c.class == ApiClass::ScatterGather {
            found.extend(sg_count(Check::SyncSgCount, "sync", addr, &m, &c));
        }
        if m.dir != dir::BIDIRECTIONAL && m.dir != c.dir {
            // dma-debug's sharper wording for the two dangerous cases.
            let which = if for_cpu && m.dir == dir::TO_DEVICE {
                " [device read-only DMA memory synced for cpu]"
            } else if !for_cpu && m.dir == dir::FROM_DEVICE {
                " [device write-only DMA memory synced to device]"
            } else {
                ""
            };
            found.push((
                Check::SyncDirection,
                format!(
                    "[device address={addr:#018x}] [size={} bytes] [mapped with {}] [synced with \
                     {}]{which}",
                    c.size,
                    dir_name(m.dir),
                    dir_name(c.dir)
                ),
            ));
        }
        for (check, detail) in found {
            self.report(check, device, Some(&m), &c, detail);
        }
    }

    fn call_of(&self, c: &DmaCall) -> Call {
        Call {
            at: self.clock.stamp(c.ts_ns),
            api: c.api.to_owned(),
            class: c.class,
            process: Process::of_task(c.pid),
            tid: c.tid,
            address: Some(c.addr),
            size: c.size,
            direction: dir_name(c.dir).to_owned(),
            entries: c.entries,
            stack: Vec::new(),
            stack_id: c.stack,
        }
    }

    fn finding(
        &self,
        check: Check,
        device: &str,
        map: Option<&DmaCall>,
        call: &DmaCall,
        detail: String,
    ) -> Misuse {
        Misuse {
            check,
            device: device.to_owned(),
            driver: self.drivers.get(device).cloned(),
            map: map.map(|m| self.call_of(m)),
            call: self.call_of(call),
            detail,
            count: 1,
        }
    }

    /// A finding of one call, pushed as it is (most checks add nothing to it).
    fn report(
        &mut self,
        check: Check,
        device: &str,
        map: Option<&DmaCall>,
        call: &DmaCall,
        detail: String,
    ) {
        let m = self.finding(check, device, map, call, detail);
        self.push(device, m);
    }

    /// The detail's note of the earlier call that makes this one wrong:
    /// `[already unmapped by dma_unmap_page at <stamp>]`.
    fn earlier(&self, what: &str, api: &str, ts_ns: u64) -> String {
        format!("[{what} by {api} at {}]", self.clock.stamp(ts_ns))
    }

    /// A failed map, counted by device, API and calling stack.
    fn map_failed(&mut self, device: &str, api: &'static str, stack: Option<u32>) {
        let rows = self
            .stats
            .map_failures
            .entry(device.to_string())
            .or_default();
        if let Some(r) = rows
            .iter_mut()
            .find(|r| r.api == api && r.stack_id == stack)
        {
            r.count += 1;
            return;
        }
        // Callers past the cap or the reader's memory budget (a crafted
        // file may name any number of stacks) count as unknown callers.
        let room = rows.len() < MAX_FAILURE_ROWS
            && memory_budget::take_or_drop(Keeper::Rows, std::mem::size_of::<MapFailures>());
        let stack_id = if room { stack } else { None };
        match rows
            .iter_mut()
            .find(|r| r.api == api && r.stack_id == stack_id)
        {
            Some(r) => r.count += 1,
            None => rows.push(MapFailures {
                api,
                stack_id,
                caller: None,
                count: 1,
            }),
        }
    }

    fn push(&mut self, device: &str, m: Misuse) {
        *self
            .pending_counts
            .entry((device.to_owned(), m.check))
            .or_default() += 1;
        if self.pending.len() < PENDING_KEPT {
            self.pending.push(m);
        }
    }
}

/// A scatterlist unmap or sync (`what`) at `addr` given another entry count
/// than its map was: the finding, in dma-debug's words.
fn sg_count(
    check: Check,
    what: &str,
    addr: u64,
    m: &DmaCall,
    c: &DmaCall,
) -> Option<(Check, String)> {
    (m.entries != c.entries).then(|| {
        let (mapped, now) = (m.entries.unwrap_or(0), c.entries.unwrap_or(0));
        let detail =
            format!("[device address={addr:#018x}] [map count={mapped}] [{what} count={now}]");
        (check, detail)
    })
}

/// The kernel's own image in /proc/iomem ("Kernel code", "Kernel rodata";
/// root sees the real addresses, others zeros, which are dropped).
pub fn kernel_image(iomem: &str) -> Vec<ImageRange> {
    iomem
        .lines()
        .filter_map(|l| {
            let (range, name) = l.trim().split_once(" : ")?;
            let name = name.trim();
            if name != "Kernel code" && name != "Kernel rodata" {
                return None;
            }
            let (a, b) = range.trim().split_once('-')?;
            let start = u64::from_str_radix(a, 16).ok()?;
            let end = u64::from_str_radix(b, 16).ok()?;
            (end > start).then(|| ImageRange {
                name: name.to_owned(),
                start,
                end,
            })
        })
        .collect()
}
