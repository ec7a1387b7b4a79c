//! What a snapshot of the aggregation shows per device: the rows that
//! live, report, serve and the HTML render.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{budget, inval, LatencySnapshot, LevelSnapshot, Percentiles};
use crate::gpu::GpuIdentity;

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DeviceSnapshot {
    pub device: String,
    /// "dma", "iommu" or "none": which level the flat fields below report
    /// (the DMA API where it was seen, else the IOMMU's page-table maps).
    pub level: &'static str,
    /// Where the DMA-API level came from: "tracepoints" (dma:*), "hooks"
    /// (fentry/kprobe on the DMA-API functions), both, or "none".
    pub dma_source: &'static str,
    /// The source of each DMA-API operation seen (`catalog::DMA_OPS`
    /// names: "map", "iova", ...): "tracepoint", "hook" or both.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub dma_sources: BTreeMap<&'static str, &'static str>,
    /// The IOVA API (dma_iova_*, 6.17+), where the device used it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iova: Option<super::IovaSnapshot>,
    /// dma_need_unmap() calls that said false for this device: the kernel
    /// skips its unmaps (`dma.unmaps_skipped` counts those mappings).
    #[serde(skip_serializing_if = "is_zero")]
    pub unmap_not_needed: u64,
    pub maps: u64,
    pub unmaps: u64,
    pub bytes_mapped: u64,
    pub bytes_unmapped: u64,
    pub map_size: Percentiles,
    pub outstanding_mappings: u64,
    pub outstanding_bytes: u64,
    pub bytes_to_device: u64,
    pub bytes_from_device: u64,
    pub bytes_bidirectional: u64,
    pub sg_maps: u64,
    pub sg_entries: u64,
    /// Scatter-gather maps (unmaps) not walked to the end of their list
    /// (`--sg-walk-max` or a kernel limit): the byte counts are then a
    /// lower bound.
    pub sg_truncated: u64,
    pub sg_unmap_truncated: u64,
    /// dma_sync_single/sg_for_cpu/device calls and their bytes.
    pub dma_syncs: u64,
    pub dma_sync_bytes: u64,
    /// The probe families' parts (swiotlb_bounces, ...), at the top level.
    #[serde(flatten)]
    pub families: crate::families::Snapshots,
    pub coherent_allocs: u64,
    pub coherent_frees: u64,
    pub coherent_bytes: u64,
    pub map_errors: u64,
    pub faults: u64,
    pub xids: u64,
    pub events: u64,
    pub events_per_sec: f64,
    pub iommu_group: Option<u32>,
    /// IOMMU events attributed through the enclosing DMA-API call / the domain.
    pub iommu_via_dma_api: u64,
    pub iommu_via_domain: u64,
    /// Time spent per operation (`op::NAMES`), in nanoseconds.
    pub latency_ns: BTreeMap<&'static str, LatencySnapshot>,
    pub dma: LevelSnapshot,
    pub iommu: LevelSnapshot,
    /// The GPU this device is (index, UUID, name), for NVIDIA GPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuIdentity>,
    /// The IOMMU's flush policy for this device: its group's default domain
    /// type (sysfs iommu_group/type): identity (passthrough), DMA (strict),
    /// DMA-FQ (lazy, flush queue), unmanaged (VFIO, iommufd), blocked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iommu_policy: Option<String>,
    /// The driver bound to it (nvme, mlx5_core, nvidia, vfio-pci), where
    /// known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// What translation costs this device (where the calls are timed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub translation: Option<budget::Budget>,
    /// IOMMU invalidations attributed to this device, per unit and type.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub invalidations: Vec<inval::InvalRow>,
    /// How they were attributed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalidations_via: Option<inval::Via>,
    /// The kernel's cache-tag flushes for this device (6.10+ VT-d).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cache_tag_flushes: Vec<inval::TagRow>,
    /// Who maps the most at the reported level: the top `TOP_PROCESSES` by
    /// outstanding bytes, then by bytes mapped. Outstanding bytes belong to
    /// the pid that made the mapping.
    pub processes: Vec<ProcessRow>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Rows of `DeviceSnapshot::processes`.
pub const TOP_PROCESSES: usize = 10;

/// One process's mappings on one device.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ProcessRow {
    /// The thread-group id; `procs::OTHER_PID` for the pids past the cap;
    /// 0 for the row of interrupt context.
    pub pid: u32,
    /// "interrupt" for the mappings made in interrupt context (hard
    /// interrupt, softirq, NMI), which belong to no process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<&'static str>,
    pub comm: Option<String>,
    /// Container id (short) or name, where the task runs in one.
    pub container: Option<String>,
    pub maps: u64,
    pub unmaps: u64,
    pub bytes_mapped: u64,
    pub outstanding_mappings: u64,
    pub outstanding_bytes: u64,
}

/// What is known of a pid: its name and container (looked up while it ran,
/// kept in trace files so a replay names it the same).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ProcName {
    pub pid: u32,
    pub comm: Option<String>,
    pub container: Option<String>,
}
