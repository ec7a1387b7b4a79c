//! IOMMU invalidations: the time of each submission to the hardware's
//! invalidation queue (kind::IOMMU_INVAL, see gpudirect-trace-ebpf's
//! inval.rs), per device and per (unit, type), and the descriptor and
//! cache-tag counts of the intel_iommu tracepoints.
//!
//! Two sources, as for the other latencies: the stream (exact
//! HdrHistograms; counts that a ring-buffer overflow can shorten, which is
//! counted and shown) and the kernel's counters (count and total time per
//! device and class, loss-free) and, in aggregate-only mode, its log2
//! histograms. A row takes the larger count and its total.
//!
//! Attribution the kernel could not make is refined here from the
//! descriptor: an IOTLB / context / PASID invalidation carries its domain id
//! (qw0 bits 16..32), learnt per unit from the submissions that were
//! attributed; a device-TLB invalidation carries the PCI requester id of the
//! device (qw0 bits 32..48) and the unit its segment.

use std::{collections::BTreeMap, sync::Arc};

use gpudirect_trace_common::{flags, inval, Counter, Event, LatHist};
use serde::Serialize;

use super::{latency::OpLatency, Aggregator, LatencySnapshot, UNATTRIBUTED};
use crate::memory_budget::{self, Keeper};

/// What a class's row costs the reader's memory budget: its latency
/// histogram (16 KiB before it grows) and counts.
const CLASS_ROW_BYTES: usize = 17 << 10;
/// A row of counts only (cache-tag flushes, descriptors, re-routed).
pub(super) const COUNT_ROW_BYTES: usize = 64;

/// The row of `class` in `rows`, a new one only within the reader's memory
/// budget (classes come from the file: a crafted one may name 2^32 of
/// them); None, counted, without room.
pub(super) fn class_row<V: Default>(
    rows: &mut BTreeMap<u32, V>,
    class: u32,
    bytes: usize,
) -> Option<&mut V> {
    if !rows.contains_key(&class) && !memory_budget::take_or_drop(Keeper::Rows, bytes) {
        return None;
    }
    Some(rows.entry(class).or_default())
}

/// `class_row` for count-only rows.
pub(super) fn count_row<V: Default>(rows: &mut BTreeMap<u32, V>, class: u32) -> Option<&mut V> {
    class_row(rows, class, COUNT_ROW_BYTES)
}

impl Aggregator {
    /// A streamed submission: routed to its device (the kernel's, or one
    /// the descriptor names) and to its unit's row.
    pub(super) fn ingest_inval(&mut self, ev: &Event, device: &Arc<str>) {
        self.events += 1;
        let (to, via) = self.units.route(ev, device);
        self.units.record(ev);
        let d = self.device(&to);
        d.events += 1;
        if d.first_ts == 0 {
            d.first_ts = ev.ts_ns;
        }
        d.last_ts = d.last_ts.max(ev.ts_ns);
        d.inval.record(ev, via);
    }

    /// Host-wide rows per (unit, type).
    pub fn unit_rows(&self) -> Vec<UnitRow> {
        let devices: Vec<&DeviceInval> = self.devices.values().map(|d| &d.inval).collect();
        self.units.rows(&devices)
    }
}

/// The class without its nesting bit: what a row is keyed by.
fn row_class(class: u32) -> u32 {
    class & !inval::NESTED
}

/// One class's submissions on one device (or across devices, per unit).
#[derive(Default)]
pub struct InvalAcc {
    pub stream: OpLatency,
    /// Streamed time inside timed IOMMU calls (already in their time).
    pub stream_nested_ns: u64,
    /// Descriptors the streamed submissions carried.
    pub descriptors: u64,
    /// The kernel's loss-free count, total and nested total.
    pub kernel: Option<(u64, u64, u64)>,
    /// Aggregate-only: the kernel's log2 histogram.
    pub kernel_log2: Option<LatHist>,
}

impl InvalAcc {
    fn record(&mut self, ev: &Event, nested: bool) {
        self.stream.record(ev.size);
        if nested {
            self.stream_nested_ns = self.stream_nested_ns.saturating_add(ev.size);
        }
        self.descriptors = self.descriptors.saturating_add(ev.aux & 0xffff_ffff);
    }

    /// (count, total ns, nested ns): the kernel's where it saw at least as
    /// many as the stream (events lost), else the stream's.
    pub fn totals(&self) -> (u64, u64, u64) {
        let s = (
            self.stream.hist.len(),
            self.stream.sum,
            self.stream_nested_ns,
        );
        match self.kernel {
            Some(k) if k.0 > s.0 => k,
            _ => s,
        }
    }

    fn latency(&self) -> LatencySnapshot {
        match &self.kernel_log2 {
            Some(h) if self.stream.hist.is_empty() => LatencySnapshot::of_log2(h),
            _ => LatencySnapshot::of_stream(&self.stream),
        }
    }
}

/// A device's invalidations by class, and how they were attributed.
#[derive(Default)]
pub struct DeviceInval {
    pub by_class: BTreeMap<u32, InvalAcc>,
    /// Cache-tag flushes (counter-only): (count, pages) by class.
    pub tags: BTreeMap<u32, Counter>,
    pub via: Via,
}

#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Via {
    /// The DMA-API / IOMMU call in flight on the task.
    pub dma_api: u64,
    /// The kernel's cache tag or the flushed domain (in-kernel).
    pub domain: u64,
    /// The descriptor's domain id, learnt from attributed submissions.
    pub domain_id: u64,
    /// The device-TLB descriptor's PCI requester id.
    pub requester_id: u64,
}

/// The invalidations across devices: per unit and type, the domain ids
/// learnt, and the descriptor counts of intel_iommu:qi_submit.
#[derive(Default)]
pub struct Units {
    pub by_class: BTreeMap<u32, InvalAcc>,
    /// (unit class bits, domain id) -> device.
    domain_ids: BTreeMap<(u32, u16), Arc<str>>,
    /// Descriptors queued (qi_submit tracepoint): (count, pages) by class.
    pub descriptors: BTreeMap<u32, Counter>,
    /// Streamed submissions moved off the unattributed row here: (count,
    /// ns, nested ns) per class, subtracted from its kernel counts.
    rerouted: BTreeMap<u32, (u64, u64, u64)>,
}

/// Domain ids the learnt map keeps at most (hostile input).
const MAX_DOMAIN_IDS: usize = 65536;

/// The domain id of an Intel descriptor whose type carries one.
fn domain_id(ev: &Event) -> Option<u16> {
    let t = inval::ty(ev.dir);
    let has = matches!(
        t,
        inval::QI_IOTLB | inval::QI_EIOTLB | inval::QI_CC | inval::QI_PC
    );
    (inval::vendor(ev.dir) == inval::VENDOR_INTEL && has).then_some((ev.phys >> 16) as u16)
}

/// The PCI name of a device-TLB descriptor's requester id.
fn requester(ev: &Event) -> Option<String> {
    let t = inval::ty(ev.dir);
    if inval::vendor(ev.dir) != inval::VENDOR_INTEL
        || !matches!(t, inval::QI_DIOTLB | inval::QI_DEIOTLB)
    {
        return None;
    }
    let sid = (ev.phys >> 32) as u16;
    let seg = (ev.aux >> 32) as u16;
    Some(format!(
        "{seg:04x}:{:02x}:{:02x}.{}",
        sid >> 8,
        (sid >> 3) & 0x1f,
        sid & 7
    ))
}

impl Units {
    /// Where a streamed submission goes: the kernel's device, else one the
    /// descriptor names; and how it was attributed.
    pub fn route(&mut self, ev: &Event, device: &Arc<str>) -> (Arc<str>, Via) {
        let unit_key = ev.dir & 0xff00_0fff;
        let mut via = Via::default();
        if &**device != UNATTRIBUTED {
            if ev.flags & flags::VIA_DMA_API != 0 {
                via.dma_api = 1;
            } else {
                via.domain = 1;
            }
            if let Some(did) = domain_id(ev) {
                if self.domain_ids.len() < MAX_DOMAIN_IDS
                    || self.domain_ids.contains_key(&(unit_key, did))
                {
                    self.domain_ids.insert((unit_key, did), device.clone());
                }
            }
            return (device.clone(), via);
        }
        let found = match domain_id(ev).and_then(|did| self.domain_ids.get(&(unit_key, did))) {
            Some(d) => {
                via.domain_id = 1;
                Some(d.clone())
            }
            None => requester(ev).map(|n| {
                via.requester_id = 1;
                Arc::from(n)
            }),
        };
        let Some(to) = found else {
            return (device.clone(), via);
        };
        let Some(r) = count_row(&mut self.rerouted, ev.dir) else {
            return (to, via);
        };
        r.0 += 1;
        r.1 = r.1.saturating_add(ev.size);
        if inval::nested(ev.dir) {
            r.2 = r.2.saturating_add(ev.size);
        }
        (to, via)
    }

    pub fn record(&mut self, ev: &Event) {
        let nested = inval::nested(ev.dir);
        if let Some(r) = class_row(&mut self.by_class, row_class(ev.dir), CLASS_ROW_BYTES) {
            r.record(ev, nested);
        }
    }

    /// The unattributed row's kernel counts less what was re-routed.
    pub fn unrouted(&self, class: u32, c: (u64, u64)) -> (u64, u64) {
        let r = self.rerouted.get(&class).copied().unwrap_or_default();
        (c.0.saturating_sub(r.0), c.1.saturating_sub(r.1))
    }
}

impl DeviceInval {
    pub fn record(&mut self, ev: &Event, via: Via) {
        let nested = inval::nested(ev.dir);
        if let Some(r) = class_row(&mut self.by_class, row_class(ev.dir), CLASS_ROW_BYTES) {
            r.record(ev, nested);
        }
        self.via.dma_api += via.dma_api;
        self.via.domain += via.domain;
        self.via.domain_id += via.domain_id;
        self.via.requester_id += via.requester_id;
    }

    /// Replaces the kernel's counts with `rows` (class with nesting bit ->
    /// (count, ns)), already summed over CPUs.
    pub fn set_kernel(&mut self, rows: &BTreeMap<u32, (u64, u64)>) {
        for acc in self.by_class.values_mut() {
            acc.kernel = None;
        }
        for (&class, &(n, ns)) in rows {
            let Some(acc) = class_row(&mut self.by_class, row_class(class), CLASS_ROW_BYTES) else {
                continue;
            };
            let k = acc.kernel.get_or_insert((0, 0, 0));
            k.0 = k.0.saturating_add(n);
            k.1 = k.1.saturating_add(ns);
            if inval::nested(class) {
                k.2 = k.2.saturating_add(ns);
            }
        }
    }

    /// (all attributed time, the part outside timed IOMMU calls), in ns.
    pub fn time(&self) -> (u64, u64) {
        let (mut all, mut nested) = (0u64, 0u64);
        for acc in self.by_class.values() {
            let (_, ns, n) = acc.totals();
            all = all.saturating_add(ns);
            nested = nested.saturating_add(n);
        }
        (all, all.saturating_sub(nested))
    }

    pub fn rows(&self) -> Vec<InvalRow> {
        self.by_class
            .iter()
            .map(|(&class, acc)| InvalRow::new(class, acc))
            .filter(|r| r.count > 0)
            .collect()
    }

    pub fn tag_rows(&self) -> Vec<TagRow> {
        self.tags
            .iter()
            .filter(|(_, c)| c.count > 0)
            .map(|(&class, c)| TagRow {
                iommu: unit_name(class),
                tag: tag_type_name(inval::ty(class) & 0xf),
                flush: match inval::ty(class) >> 4 {
                    inval::TAG_FLUSH_RANGE => "range",
                    inval::TAG_FLUSH_ALL => "all",
                    inval::TAG_FLUSH_RANGE_NP => "range_np",
                    _ => "unknown",
                },
                count: c.count,
                pages: c.bytes,
            })
            .collect()
    }
}

/// One (unit, type) row of a device or of the whole host.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct InvalRow {
    /// The unit: dmar0 (VT-d seq_id), ivhd0 (AMD-Vi index), smmu; `?` when
    /// the unit could not be read.
    pub iommu: String,
    pub vendor: &'static str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub count: u64,
    pub total_ns: u64,
    /// Of `total_ns`, the time inside timed IOMMU calls (iommu_map/unmap,
    /// iotlb_sync), which their own latencies already include.
    pub nested_ns: u64,
    /// Descriptors submitted (a 6.12+ batch holds up to 16).
    pub descriptors: u64,
    pub latency_ns: LatencySnapshot,
}

impl InvalRow {
    fn new(class: u32, acc: &InvalAcc) -> Self {
        let (count, total_ns, nested_ns) = acc.totals();
        Self {
            iommu: unit_name(class),
            vendor: vendor_name(class),
            kind: type_name(class),
            count,
            total_ns,
            nested_ns,
            descriptors: acc.descriptors,
            latency_ns: acc.latency(),
        }
    }
}

/// Cache-tag flushes of a device (intel_iommu:cache_tag_flush_*, 6.10+).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TagRow {
    pub iommu: String,
    /// The tag: iotlb, devtlb, nesting_iotlb, nesting_devtlb.
    pub tag: &'static str,
    /// Which flush: range, all (whole domain), range_np (newly mapped).
    pub flush: &'static str,
    pub count: u64,
    pub pages: u64,
}

/// A host-wide (unit, type) row: the device rows summed, plus the
/// descriptors the kernel queued.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct UnitRow {
    #[serde(flatten)]
    pub row: InvalRow,
    /// Descriptors of this type queued (intel_iommu:qi_submit, every
    /// descriptor of a batch; None where the tracepoint is not attached).
    pub descriptors_queued: Option<u64>,
}

impl Units {
    pub fn rows(&self, devices: &[&DeviceInval]) -> Vec<UnitRow> {
        let mut classes: BTreeMap<u32, InvalAcc> = BTreeMap::new();
        for (&c, acc) in &self.by_class {
            let a = classes.entry(c).or_default();
            a.stream.hist.add(&acc.stream.hist).ok();
            a.stream.max = a.stream.max.max(acc.stream.max);
            a.stream.sum = a.stream.sum.saturating_add(acc.stream.sum);
            a.stream_nested_ns = acc.stream_nested_ns;
            a.descriptors = acc.descriptors;
        }
        // The kernel's counts and histograms are per device: sum them.
        for d in devices {
            for (&c, acc) in &d.by_class {
                let a = classes.entry(c).or_default();
                if let Some(k) = acc.kernel {
                    let t = a.kernel.get_or_insert((0, 0, 0));
                    t.0 = t.0.saturating_add(k.0);
                    t.1 = t.1.saturating_add(k.1);
                    t.2 = t.2.saturating_add(k.2);
                }
                if let Some(h) = &acc.kernel_log2 {
                    let sum =
                        super::sum_log2([a.kernel_log2.as_ref(), Some(h)].into_iter().flatten());
                    a.kernel_log2 = Some(sum);
                }
            }
        }
        let mut descriptors: BTreeMap<u32, u64> = BTreeMap::new();
        for (&c, n) in &self.descriptors {
            *descriptors.entry(row_class(c)).or_default() += n.count;
            // A type only the tracepoint saw (no timing hook here) has a row.
            classes.entry(row_class(c)).or_default();
        }
        classes
            .iter()
            .map(|(&c, acc)| UnitRow {
                row: InvalRow::new(c, acc),
                descriptors_queued: (!self.descriptors.is_empty())
                    .then(|| descriptors.get(&c).copied().unwrap_or(0)),
            })
            .filter(|r| r.row.count > 0 || r.descriptors_queued.unwrap_or(0) > 0)
            .collect()
    }
}

pub fn vendor_name(class: u32) -> &'static str {
    match inval::vendor(class) {
        inval::VENDOR_INTEL => "intel",
        inval::VENDOR_AMD => "amd",
        inval::VENDOR_SMMU => "smmuv3",
        _ => "unknown",
    }
}

/// dmar0 / ivhd0 (the /sys/class/iommu names) / smmu.
pub fn unit_name(class: u32) -> String {
    let u = inval::unit(class);
    let n = if u == inval::UNIT_UNKNOWN {
        "?".to_owned()
    } else {
        u.to_string()
    };
    match inval::vendor(class) {
        inval::VENDOR_INTEL => format!("dmar{n}"),
        inval::VENDOR_AMD => format!("ivhd{n}"),
        inval::VENDOR_SMMU => "smmu".to_owned(),
        _ => format!("unit{n}"),
    }
}

/// The invalidation type: VT-d descriptor types, AMD-Vi waits, SMMUv3
/// command opcodes (drivers/iommu/arm/arm-smmu-v3/arm-smmu-v3.h).
pub fn type_name(class: u32) -> &'static str {
    let t = inval::ty(class);
    match inval::vendor(class) {
        inval::VENDOR_INTEL => match t {
            inval::QI_CC => "context_cache",
            inval::QI_IOTLB => "iotlb",
            inval::QI_DIOTLB => "device_tlb",
            inval::QI_IEC => "interrupt_entry_cache",
            inval::QI_IWD => "wait",
            inval::QI_EIOTLB => "pasid_iotlb",
            inval::QI_PC => "pasid_cache",
            inval::QI_DEIOTLB => "pasid_device_tlb",
            inval::QI_PGRP_RESP => "page_group_response",
            inval::QI_PSTRM_RESP => "page_stream_response",
            _ => "unknown",
        },
        inval::VENDOR_AMD => match t {
            inval::AMD_COMPLETION_WAIT => "completion_wait",
            inval::AMD_DOMAIN_FLUSH_COMPLETE => "domain_flush_complete",
            _ => "unknown",
        },
        inval::VENDOR_SMMU => match t {
            0x01 => "prefetch_cfg",
            0x03 => "cfgi_ste",
            0x04 => "cfgi_all",
            0x05 => "cfgi_cd",
            0x06 => "cfgi_cd_all",
            0x10..=0x13 => "tlbi_nh",
            0x20..=0x22 => "tlbi_el2",
            0x28 | 0x2a => "tlbi_s2",
            0x30 => "tlbi_nsnh_all",
            0x40 => "atc_inv",
            0x41 => "pri_resp",
            0x44 | 0x45 => "resume",
            0x46 => "cmd_sync",
            _ => "unknown",
        },
        _ => "unknown",
    }
}

/// enum cache_tag_type (drivers/iommu/intel/cache.c's iommu.h, 6.10+).
fn tag_type_name(t: u32) -> &'static str {
    match t {
        0 => "iotlb",
        1 => "devtlb",
        2 => "nesting_iotlb",
        3 => "nesting_devtlb",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use gpudirect_trace_common::kind;

    use super::*;

    fn ev(ty: u32, unit: u32, nested: bool, did: u64, ns: u64) -> Event {
        Event {
            kind: kind::IOMMU_INVAL,
            dir: inval::class(inval::VENDOR_INTEL, ty, unit, nested),
            phys: ty as u64 | did << 16 | 0x30,
            size: ns,
            aux: 1,
            ..Default::default()
        }
    }

    #[test]
    fn domain_ids_learnt_from_attributed_submissions_name_the_rest() {
        let mut u = Units::default();
        let nvme: Arc<str> = Arc::from("0000:00:04.0");
        let none: Arc<str> = Arc::from(UNATTRIBUTED);
        let mut e = ev(inval::QI_IOTLB, 0, true, 7, 1000);
        e.flags = flags::VIA_DMA_API;
        assert_eq!(u.route(&e, &nvme).0, nvme);
        // Same unit and domain id, no device: the learnt one.
        let later = ev(inval::QI_IOTLB, 0, false, 7, 5000);
        let (to, via) = u.route(&later, &none);
        assert_eq!((to, via.domain_id), (nvme.clone(), 1));
        // Another unit's domain 7 is another domain.
        let other = ev(inval::QI_IOTLB, 1, false, 7, 5000);
        assert_eq!(&*u.route(&other, &none).0, UNATTRIBUTED);
        // The re-routed one leaves the unattributed row's kernel count.
        assert_eq!(u.unrouted(later.dir, (3, 9000)), (2, 4000));
        // A device-TLB invalidation names its requester.
        let mut dtlb = ev(inval::QI_DIOTLB, 0, false, 0, 10);
        dtlb.phys = inval::QI_DIOTLB as u64 | (0x0420u64 << 32);
        dtlb.aux = 1 | 1 << 32;
        assert_eq!(&*u.route(&dtlb, &none).0, "0001:04:04.0");
    }

    #[test]
    fn rows_take_the_kernel_counts_when_the_stream_lost_some() {
        let mut d = DeviceInval::default();
        for ns in [1000, 2000, 3000] {
            d.record(&ev(inval::QI_IOTLB, 0, true, 1, ns), Via::default());
        }
        let c = inval::class(inval::VENDOR_INTEL, inval::QI_IOTLB, 0, true);
        let un = inval::class(inval::VENDOR_INTEL, inval::QI_IOTLB, 0, false);
        d.set_kernel(&BTreeMap::from([(c, (4, 10_000)), (un, (1, 500))]));
        let rows = d.rows();
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(
            (r.iommu.as_str(), r.kind, r.vendor),
            ("dmar0", "iotlb", "intel")
        );
        assert_eq!((r.count, r.total_ns, r.nested_ns), (5, 10_500, 10_000));
        assert_eq!(r.latency_ns.count, 3, "percentiles are the stream's");
        assert_eq!(d.time(), (10_500, 500));
        // Without loss the stream's own totals stand.
        d.set_kernel(&BTreeMap::from([(c, (3, 6000))]));
        assert_eq!(d.rows()[0].count, 3);
        assert_eq!(d.time(), (6000, 0));
    }
}
