//! What translation costs a device: CPU time in the DMA API's map, unmap
//! and sync calls, and, nested inside them, in the IOMMU's page-table
//! updates and invalidations, per second of the trace and per GB mapped;
//! and what identity (passthrough) mapping would save of it.
//!
//! The estimate of the saving is the IOMMU part: the time the timing hooks
//! measured in iommu_map/iommu_unmap/iotlb_sync (and the queued
//! invalidation where it is hooked) nested in this device's DMA-API calls.
//! Under identity mapping the DMA API maps by address arithmetic (dma-direct)
//! and none of that runs; the DMA API's own bookkeeping stays. It is an
//! estimate: it leaves out the IOTLB misses the device's own transfers pay,
//! which no CPU-side hook sees (PCIe bandwidth, the field guide's 5-15%).

use std::collections::BTreeMap;

use gpudirect_trace_common::op;
use serde::Serialize;

use super::LatencySnapshot;

/// DMA-API operations a device's driver calls, as op ids (the latencies are
/// keyed by `op::NAMES`: one spelling of each name).
const DMA_API_OPS: &[u32] = &[
    op::DMA_MAP,
    op::DMA_UNMAP,
    op::DMA_MAP_SG,
    op::DMA_UNMAP_SG,
    op::DMA_MAP_RESOURCE,
    op::DMA_UNMAP_RESOURCE,
    op::DMA_MAP_SGTABLE,
    op::DMA_SYNC,
    op::DMA_ALLOC,
    op::DMA_FREE,
    op::DMA_IOVA_ALLOC,
    op::DMA_IOVA_LINK,
    op::DMA_IOVA_UNLINK,
    op::DMA_IOVA_SYNC,
    op::DMA_IOVA_FREE,
    op::DMA_IOVA_DESTROY,
];
/// IOMMU work nested inside them. dma_iova_link is IOMMU work through and
/// through (page tables written with iommu_map_nosync, which no hook times
/// apart: timing it inside iommu_map too would count iommu_map's time
/// twice); dma_iova_sync is the IOTLB flush of those links (iommu_sync_map,
/// no timed iotlb_sync around it). Under identity mapping
/// dma_iova_try_alloc declines and the driver maps by address arithmetic
/// instead. Must match the eBPF side's `op::is_iommu_work`, which counts
/// the invalidations inside these calls as nested.
const IOMMU_OPS: &[u32] = &[
    op::IOMMU_MAP,
    op::IOMMU_UNMAP,
    op::IOTLB_SYNC,
    op::DMA_IOVA_LINK,
    op::DMA_IOVA_SYNC,
];

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Budget {
    /// The time span the budget is over (the device's first to last event).
    pub window_s: f64,
    /// Milliseconds of CPU per second of the window in DMA-API calls.
    pub dma_api_ms_per_s: f64,
    /// IOMMU work for the device: page tables and IOTLB flushes timed
    /// inside its DMA-API calls, plus invalidations outside any timed IOMMU
    /// call (the flush queue's deferred flushes in lazy mode).
    pub iommu_ms_per_s: f64,
    /// Time in the invalidation queue attributed to the device (nested or
    /// not), per second: the part of the IOMMU work spent waiting for the
    /// hardware.
    pub invalidation_ms_per_s: f64,
    /// Milliseconds of DMA-API CPU per GB mapped.
    pub dma_api_ms_per_gb: Option<f64>,
    /// What identity (passthrough) mapping would save, per second: the IOMMU
    /// part (see the module's note on what the estimate leaves out).
    pub identity_saves_ms_per_s: f64,
    /// The totals behind the rates, in nanoseconds (serve exports them as
    /// counters: rate() of them is the same budget over any window).
    pub dma_api_ns: u64,
    pub iommu_ns: u64,
    pub invalidation_ns: u64,
    /// Where the numbers come from.
    pub how: &'static str,
}

/// The budget of one device, as its snapshot computes it, from the totals
/// alone (serve builds it at every scrape: no percentiles needed; measured
/// 220 us per device with percentiles, docs/benchmarks.md).
pub fn of_device(d: &super::DeviceStats) -> Option<Budget> {
    let mut latency = BTreeMap::new();
    for o in 0..op::COUNT {
        let (count, total_ns) = match (d.latency.get(&o), d.kernel_latency.get(&o)) {
            (Some(l), _) if !l.hist.is_empty() => (l.hist.len(), l.sum),
            (_, Some(k)) if k.count > 0 => (k.count, k.sum_ns),
            _ => continue,
        };
        let snap = LatencySnapshot {
            count,
            total_ns,
            ..Default::default()
        };
        latency.insert(op::NAMES[o as usize], snap);
    }
    let window_s = d.last_ts.saturating_sub(d.first_ts) as f64 / 1e9;
    let bytes = if d.dma.maps > 0 || d.dma.unmaps > 0 {
        d.dma.bytes_mapped
    } else {
        d.iommu.bytes_mapped
    };
    budget(&latency, window_s, bytes, d.inval.time())
}

/// `inval`: the device's invalidation time in ns (all, and the part outside
/// timed IOMMU calls, which their latencies do not already hold).
pub fn budget(
    latency: &BTreeMap<&'static str, LatencySnapshot>,
    window_s: f64,
    bytes_mapped: u64,
    inval: (u64, u64),
) -> Option<Budget> {
    let total = |ops: &[u32]| -> u64 {
        // Saturating: latencies from a trace file may be crafted.
        crate::output::sum(
            ops.iter()
                .filter_map(|&o| latency.get(op::NAMES[o as usize]))
                .map(|l| l.total_ns),
        )
    };
    let dma = total(DMA_API_OPS);
    let iommu = total(IOMMU_OPS).saturating_add(inval.1);
    if dma == 0 && iommu == 0 && inval.0 == 0 {
        return None;
    }
    let per_s = |ns: u64| {
        if window_s > 0.0 {
            ns as f64 / 1e6 / window_s
        } else {
            0.0
        }
    };
    let round = |x: f64| (x * 1e3).round() / 1e3;
    Some(Budget {
        window_s: round(window_s),
        dma_api_ms_per_s: round(per_s(dma)),
        iommu_ms_per_s: round(per_s(iommu)),
        invalidation_ms_per_s: round(per_s(inval.0)),
        dma_api_ms_per_gb: (bytes_mapped > 0)
            .then(|| round(dma as f64 / 1e6 / (bytes_mapped as f64 / 1e9))),
        identity_saves_ms_per_s: round(per_s(iommu)),
        dma_api_ns: dma,
        iommu_ns: iommu,
        invalidation_ns: inval.0,
        how: "sum of the timed DMA-API calls and of the IOMMU calls nested in them (plus the \
              device's invalidations outside them: deferred flushes), over the device's first \
              to last event; identity mapping would save the IOMMU part (not the device's \
              IOTLB misses, which no CPU hook sees)",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Latencies of one call each, taking `ns` in all, by operation.
    fn timed(calls: &[(&'static str, u64)]) -> BTreeMap<&'static str, LatencySnapshot> {
        calls
            .iter()
            .map(|&(op, ns)| {
                let one = LatencySnapshot {
                    count: 1,
                    total_ns: ns,
                    ..Default::default()
                };
                (op, one)
            })
            .collect()
    }

    #[test]
    fn the_budget_sums_the_timed_calls_per_second_and_per_gb() {
        let l = timed(&[
            ("dma_map_sg", 30_000_000),
            ("dma_unmap_sg", 10_000_000),
            ("iommu_map", 15_000_000),
            ("iotlb_sync", 5_000_000),
        ]);
        // 4 ms of invalidations, 2 of them inside iotlb_sync (already counted).
        let b = budget(&l, 2.0, 4_000_000_000, (4_000_000, 2_000_000)).expect("timed");
        assert_eq!(b.dma_api_ms_per_s, 20.0);
        assert_eq!(b.iommu_ms_per_s, 11.0);
        assert_eq!(b.invalidation_ms_per_s, 2.0);
        assert_eq!(b.identity_saves_ms_per_s, 11.0);
        assert_eq!(b.dma_api_ms_per_gb, Some(10.0));
        assert!(budget(&BTreeMap::new(), 1.0, 0, (0, 0)).is_none());
        // Lazy mode: only deferred flushes, outside any DMA-API call.
        let lazy = budget(&BTreeMap::new(), 1.0, 0, (3_000_000, 3_000_000)).expect("flushes");
        assert_eq!((lazy.iommu_ms_per_s, lazy.dma_api_ms_per_s), (3.0, 0.0));
    }

    #[test]
    fn the_dma_api_calls_that_are_iommu_work_count_as_iommu_time() {
        for o in 0..op::COUNT {
            let name = op::NAMES[o as usize];
            assert_eq!(
                op::is_iommu_work(o),
                IOMMU_OPS.contains(&o) && DMA_API_OPS.contains(&o),
                "{name}: the eBPF side's nesting and the budget's IOMMU part disagree"
            );
        }
        let l = timed(&[("dma_iova_link", 6_000_000), ("dma_iova_sync", 2_000_000)]);
        // The flushes inside the sync are nested: not added again.
        let b = budget(&l, 1.0, 0, (1_500_000, 0)).expect("timed");
        assert_eq!((b.dma_api_ms_per_s, b.iommu_ms_per_s), (8.0, 8.0));
    }
}
