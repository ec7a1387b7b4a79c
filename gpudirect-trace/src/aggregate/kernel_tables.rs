//! Aggregate-only mode's substitute for streamed mapping tracking: the
//! kernel's own table of outstanding DMA-API mappings (`MAPPINGS`, a
//! bounded hash) and its log2 lifetime histograms (`LAT_HIST`, op `LIFETIME`).
//!
//! The table replaces the DMA-API level's outstanding set on each refresh,
//! so outstanding counts, long-lived listings and fault correlation
//! ("inside a live mapping") work in both modes from the same code.

use std::{collections::BTreeMap, sync::Arc};

use gpudirect_trace_common::{op, MapKey, MapValue};

use super::{latency::LatencySnapshot, level::Percentiles, Aggregator};

impl Aggregator {
    /// Takes the kernel's outstanding DMA-API mappings (rows by device name)
    /// as the DMA-API level's outstanding set of every device.
    pub fn apply_kernel_mappings(&mut self, rows: &[(Arc<str>, MapKey, MapValue)]) {
        // (addr, size, ts_ns, pid) per device, as Level::replace_outstanding takes them.
        type Outstanding = Vec<(u64, u64, u64, u32)>;
        let mut by_device: BTreeMap<&Arc<str>, Outstanding> = BTreeMap::new();
        for (name, k, v) in rows {
            by_device
                .entry(name)
                .or_default()
                .push((k.addr, v.size, v.ts_ns, v.pid));
        }
        for d in self.devices.values_mut() {
            d.dma.replace_outstanding(std::iter::empty());
        }
        for (name, maps) in by_device {
            self.device(name).dma.replace_outstanding(maps.into_iter());
        }
    }
}

/// The lifetime percentiles the kernel kept for a device, where userspace
/// saw no lifetimes itself (aggregate-only).
pub(super) fn kernel_lifetimes(
    kernel_latency: &BTreeMap<u32, gpudirect_trace_common::LatHist>,
) -> Option<Percentiles> {
    let h = kernel_latency.get(&op::LIFETIME).filter(|h| h.count > 0)?;
    let l = LatencySnapshot::of_log2(h);
    Some(Percentiles {
        count: l.count,
        p50: l.p50,
        p90: l.p90,
        p99: l.p99,
        max: l.max,
    })
}
