//! The DMA, IOMMU, fault and self metrics, declared once (docs/metrics.md's table is made
//! from them).

use super::{
    Metric,
    Type::{Counter, Gauge, Histogram},
    Unit::{Bytes, Seconds},
};

pub const DMA_MAP_BYTES_TOTAL: Metric = Metric {
    name: "gpudirect_dma_map",
    kind: Counter,
    unit: Some(Bytes),
    labels: &["device", "direction"],
    help: "Bytes mapped through the streaming DMA API, by DMA direction.",
    doc: "bytes mapped through the streaming DMA API (dma_map_page/phys/resource/sg); \
         direction `to_device`, `from_device`, `bidirectional`, `none`",
};

pub const DMA_MAPS_TOTAL: Metric = Metric {
    name: "gpudirect_dma_maps",
    kind: Counter,
    unit: None,
    labels: &["device", "level"],
    help: "Mappings made: dma (streaming DMA API), iommu (IOMMU page tables), coherent \
         (dma_alloc).",
    doc: "mappings made; level `dma` (streaming DMA API), `iommu` (IOMMU page-table maps), \
         `coherent` (dma_alloc)",
};

pub const DMA_UNMAPS_TOTAL: Metric = Metric {
    name: "gpudirect_dma_unmaps",
    kind: Counter,
    unit: None,
    labels: &["device", "level"],
    help: "Mappings removed, by level as in gpudirect_dma_maps_total.",
    doc: "mappings removed (dma_unmap*, iommu:unmap, dma_free)",
};

pub const DMA_MAP_SIZE_BYTES: Metric = Metric {
    name: "gpudirect_dma_map_size",
    kind: Histogram,
    unit: Some(Bytes),
    labels: &["device", "level"],
    help: "Mapped sizes (one observation per mapping, per entry for scatter-gather mappings).",
    doc: "mapped sizes: one observation per mapping, per entry for scatter-gather mappings; \
         buckets 512 B, 4 KiB … 256 KiB, 1, 2, 4, 16, 64, 256 MiB, 1 GiB",
};

pub const MAPPINGS_OUTSTANDING: Metric = Metric {
    name: "gpudirect_mappings_outstanding",
    kind: Gauge,
    unit: None,
    labels: &["device", "level"],
    help: "Mappings made and not yet removed since the start.",
    doc: "mappings made and not yet removed since the exporter started",
};

pub const MAPPINGS_OUTSTANDING_BYTES: Metric = Metric {
    name: "gpudirect_mappings_outstanding",
    kind: Gauge,
    unit: Some(Bytes),
    labels: &["device", "level"],
    help: "Bytes of the outstanding mappings.",
    doc: "their bytes",
};

pub const IOMMU_MAP_BYTES_TOTAL: Metric = Metric {
    name: "gpudirect_iommu_map",
    kind: Counter,
    unit: Some(Bytes),
    labels: &["device"],
    help: "Bytes mapped in IOMMU page tables (iommu:map).",
    doc: "bytes mapped in IOMMU page tables (iommu:map)",
};

pub const SWIOTLB_BOUNCES_TOTAL: Metric = Metric {
    name: "gpudirect_swiotlb_bounces",
    kind: Counter,
    unit: None,
    labels: &["device"],
    help: "Transfers bounced through the swiotlb buffer.",
    doc: "transfers bounced through swiotlb",
};

pub const SWIOTLB_BOUNCED_BYTES_TOTAL: Metric = Metric {
    name: "gpudirect_swiotlb_bounced",
    kind: Counter,
    unit: Some(Bytes),
    labels: &["device"],
    help: "Bytes bounced through the swiotlb buffer (copied by the CPU).",
    doc: "bytes the CPU copied through bounce buffers",
};

pub const DMA_MAP_ERRORS_TOTAL: Metric = Metric {
    name: "gpudirect_dma_map_errors",
    kind: Counter,
    unit: None,
    labels: &["device"],
    help: "Failed DMA-API maps: dma_map_sg/dma_map_sgtable errors, DMA_MAPPING_ERROR from \
         dma_map_page/phys/resource, NULL from dma_alloc_attrs.",
    doc: "failed DMA-API maps: dma_map_sg/dma_map_sgtable errors, `DMA_MAPPING_ERROR` from \
         dma_map_page/phys/resource, NULL from dma_alloc_attrs",
};

pub const DMA_SYNCS_TOTAL: Metric = Metric {
    name: "gpudirect_dma_syncs",
    kind: Counter,
    unit: None,
    labels: &["device"],
    help: "dma_sync_single/sg_for_cpu/device calls.",
    doc: "dma_sync_single/sg_for_cpu/device calls (dma:dma_sync_* on 6.8+, the DMA-API hooks \
         before)",
};

pub const DMA_SYNC_BYTES_TOTAL: Metric = Metric {
    name: "gpudirect_dma_sync",
    kind: Counter,
    unit: Some(Bytes),
    labels: &["device"],
    help: "Bytes covered by dma_sync_* calls.",
    doc: "bytes those syncs covered",
};

pub const IOVA_CALLS_TOTAL: Metric = Metric {
    name: "gpudirect_iova_calls",
    kind: Counter,
    unit: None,
    labels: &["device", "op"],
    help: "IOVA-API calls (6.17+: dma_iova_try_alloc, _link, _unlink, _sync, _free), by op; \
         op=unlink counts the links dma_iova_destroy ended.",
    doc: "IOVA-API calls (6.17+; the block layer's NVMe path, RDMA ODP, HMM, VFIO dma-buf): \
         `op` `alloc` (dma_iova_try_alloc that allocated), `declined` (that returned false: \
         the driver maps with dma_map_* instead), `link`, `unlink` (dma_iova_unlink calls and \
         the links dma_iova_destroy ended), `sync`, `free`. Links and unlinks are also the \
         device's `gpudirect_dma_maps_total{level=\"dma\"}` / unmaps",
};

pub const DMA_UNMAPS_SKIPPED_TOTAL: Metric = Metric {
    name: "gpudirect_dma_unmaps_skipped",
    kind: Counter,
    unit: None,
    labels: &["device"],
    help: "Streaming mappings the kernel did not unmap because dma_need_unmap() said it need \
         not (6.17+ block layer on dma-direct): not outstanding, not leaks.",
    doc: "streaming mappings the kernel did not unmap because `dma_need_unmap()` said it need \
         not (the 6.17+ block layer on dma-direct: no IOMMU, nothing to sync): counted here, \
         never outstanding or leak suspects",
};

pub const SG_TRUNCATED_TOTAL: Metric = Metric {
    name: "gpudirect_sg_truncated",
    kind: Counter,
    unit: None,
    labels: &["device", "op"],
    help: "Scatter-gather maps (op=map) and unmaps whose list was not walked to its end \
         (--sg-walk-max or a kernel limit): the device's byte counts are lower bounds.",
    doc: "scatter-gather maps (`op=\"map\"`) and unmaps (`op=\"unmap\"`) whose list was not walked \
         to its end (`--sg-walk-max`, or a bounded walk on kernels before 5.17): while \
         non-zero, the device's `gpudirect_dma_map_bytes_total` is a lower bound",
};

pub const IOMMU_FAULTS_TOTAL: Metric = Metric {
    name: "gpudirect_iommu_faults",
    kind: Counter,
    unit: None,
    labels: &["device", "source", "reason"],
    help: "IOMMU faults, by where they were seen and their reason.",
    doc: "IOMMU faults; source `iommu-tracepoint` (iommu:io_page_fault), `vtd`, `amd-vi`, \
         `smmu`, `virtio-iommu` (decoded from /dev/kmsg, see docs/faults.md); reason as \
         decoded (the kernel's reason text, at most 80 characters)",
};

pub const PCIE_AER_ERRORS_TOTAL: Metric = Metric {
    name: "gpudirect_pcie_aer_errors",
    kind: Counter,
    unit: None,
    labels: &["device", "reason"],
    help: "PCIe AER errors reported in the kernel log.",
    doc: "PCIe AER errors decoded from the kernel log",
};

pub const NVIDIA_XID_TOTAL: Metric = Metric {
    name: "gpudirect_nvidia_xid",
    kind: Counter,
    unit: None,
    labels: &["device", "xid"],
    help: "NVIDIA Xid errors reported by the driver, by Xid number.",
    doc: "NVIDIA Xid errors by Xid number, from nvidia:nvidia_dev_xid or, when that tracepoint \
         is not attached, from the driver's log lines. A counter, unlike dcgm-exporter's \
         last-value gauge: a burst of Xids between two scrapes is never lost",
};

pub const IOMMU_MAP_LATENCY_SECONDS: Metric = Metric {
    name: "gpudirect_iommu_map_latency",
    kind: Histogram,
    unit: Some(Seconds),
    labels: &["device", "op"],
    help: "Time spent in DMA-API, IOMMU map/unmap, IOTLB sync and swiotlb map operations.",
    doc: "time spent per operation: op `dma_map`, `dma_unmap`, `dma_map_sg`, `dma_unmap_sg` \
         (DMA API), `iommu_map`, `iommu_unmap`, `iotlb_sync`, `swiotlb_map`, `fault_handler`, \
         and on NVIDIA hosts `nv_dma_map_sgt`, `nv_dma_map_alloc`, `nv_dma_unmap_alloc`, \
         `nv_dma_map_peer`, `nv_dma_unmap_peer`, `nv_dma_map_mmio`, `nvidia_p2p_get_pages`, \
         `nvidia_p2p_put_pages`, `nvidia_p2p_dma_map_pages`, `nvidia_p2p_dma_unmap_pages`; \
         buckets are powers of two from 512 ns to 134 ms. From the kernel's loss-free log2 \
         histograms (exact at these bounds) where the timing hooks attached, else from \
         streamed timings; absent where no timing hook attached",
};

pub const IOMMU_INVALIDATION_SECONDS: Metric = Metric {
    name: "gpudirect_iommu_invalidation",
    kind: Histogram,
    unit: Some(Seconds),
    labels: &["device", "iommu", "type"],
    help: "Time per submission to the IOMMU's invalidation queue and its wait for completion \
         (Intel qi_submit_sync, AMD completion wait, SMMUv3 command batch), by device, unit \
         and type.",
    doc: "time per submission to the IOMMU's invalidation queue, its completion wait included \
         (time:qi_submit_sync, AMD completion wait, SMMUv3 command batch; docs/probes.md); \
         `iommu` the unit (`dmar0`, `ivhd0`, `smmu`; `dmar?` where unknown), `type` the \
         invalidation type (`iotlb`, `device_tlb`, `interrupt_entry_cache`, `context_cache`, \
         `pasid_iotlb`, ..., `completion_wait`); buckets as above. `sum by (iommu, type)` is \
         DMAR_PERF's per-unit view",
};

pub const IOMMU_INVALIDATION_DESCRIPTORS_TOTAL: Metric = Metric {
    name: "gpudirect_iommu_invalidation_descriptors",
    kind: Counter,
    unit: None,
    labels: &["iommu", "type"],
    help: "Invalidation descriptors queued (intel_iommu:qi_submit, every descriptor of a \
         batch), by unit and type.",
    doc: "descriptors queued, every descriptor of a 6.12+ batch by its own type \
         (intel_iommu:qi_submit, 6.1+)",
};

pub const IOMMU_CACHE_TAG_FLUSHES_TOTAL: Metric = Metric {
    name: "gpudirect_iommu_cache_tag_flushes",
    kind: Counter,
    unit: None,
    labels: &["device", "iommu", "tag", "flush"],
    help: "Cache-tag flushes the VT-d driver made (intel_iommu:cache_tag_flush_*, 6.10+), by \
         device, unit, tag type and flush kind.",
    doc: "VT-d cache-tag flushes (6.10+): `tag` `iotlb`, `devtlb`, `nesting_iotlb`, \
         `nesting_devtlb`; `flush` `range` (unmap), `range_np` (map, caching mode), `all` \
         (whole domain: the flush queue)",
};

pub const TRANSLATION_SECONDS_TOTAL: Metric = Metric {
    name: "gpudirect_translation",
    kind: Counter,
    unit: Some(Seconds),
    labels: &["device", "part"],
    help: "CPU time translation cost the device: dma_api (timed DMA-API calls), iommu (IOMMU \
         work inside them plus invalidations outside any timed IOMMU call), invalidation (all \
         its invalidation-queue time).",
    doc: "CPU time translation costs the device: `part=\"dma_api\"` (its timed DMA-API calls), \
         `iommu` (IOMMU work nested in them, plus invalidations outside any timed IOMMU call: \
         lazy mode's deferred flushes), `invalidation` (all its invalidation-queue time, \
         nested or not). `rate()` of it is the budget over any window",
};

pub const TRANSLATION_BUDGET_RATIO: Metric = Metric {
    name: "gpudirect_translation_budget_ratio",
    kind: Gauge,
    unit: None,
    labels: &["device", "part"],
    help: "The translation budget over the device's first to last event: CPU seconds per second \
         by part (1000 x this is the report's ms/s), and what identity (passthrough) mapping \
         would save (part=identity_saves, an estimate).",
    doc: "the same over the device's first to last event, in CPU seconds per second (×1000: \
         the ms/s `live` shows), plus `part=\"identity_saves\"`: what identity (passthrough) \
         mapping would save, an estimate (the IOMMU part; not the device's IOTLB misses)",
};

pub const PROBE_ATTACHED: Metric = Metric {
    name: "gpudirect_probe_attached",
    kind: Gauge,
    unit: None,
    labels: &["probe", "kind"],
    help: "1 if the probe is attached on this kernel, else 0.",
    doc: "1 when the probe is attached on this kernel, 0 when unavailable or failed \
         (`gpudirect-trace probes` says why)",
};

pub const EVENTS_TOTAL: Metric = Metric {
    name: "gpudirect_events",
    kind: Counter,
    unit: None,
    labels: &["kind"],
    help: "Tracepoint hits counted in-kernel (loss-free), by event kind.",
    doc: "tracepoint hits counted in-kernel, by event kind (`dma_map`, `iommu_map`, \
         `io_page_fault`, `nvidia_xid`, …)",
};

pub const EVENTS_RECEIVED_TOTAL: Metric = Metric {
    name: "gpudirect_events_received",
    kind: Counter,
    unit: None,
    labels: &[],
    help: "Event records received from the ring buffer.",
    doc: "event records received from the ring buffer",
};

pub const EVENTS_LOST_TOTAL: Metric = Metric {
    name: "gpudirect_events_lost",
    kind: Counter,
    unit: None,
    labels: &[],
    help: "Event records the ring buffer had no room for.",
    doc: "event records the ring buffer had no room for",
};

pub const EVENTS_MISSED_TOTAL: Metric = Metric {
    name: "gpudirect_events_missed",
    kind: Counter,
    unit: None,
    labels: &[],
    help: "Program runs the kernel skipped: already running on that CPU (recursion_misses), or \
         a kprobe hit inside another kprobe or bpf() call (kprobe_profile).",
    doc: "program runs the kernel skipped: the program already running on that CPU \
         (`recursion_misses`, e.g. a tracepoint hit from an interrupt), or a kprobe hit \
         inside another kprobe or bpf() call (`kprobe_profile`, docs/probes.md): events \
         neither streamed nor counted",
};

pub const STACKS_LOST_TOTAL: Metric = Metric {
    name: "gpudirect_stacks_lost",
    kind: Counter,
    unit: None,
    labels: &[],
    help: "DMA-API calls whose kernel stack could not be kept (--stacks: the stack map full, or \
         three hash buckets taken).",
    doc: "DMA-API calls whose kernel stack could not be kept (`--stacks`): the stack map full, \
         or the stack's bucket taken by another stack three times (with one and two innermost \
         frames skipped)",
};

pub const EVENTS_UNDECODABLE_TOTAL: Metric = Metric {
    name: "gpudirect_events_undecodable",
    kind: Counter,
    unit: None,
    labels: &[],
    help: "Event records that could not be decoded.",
    doc: "records that did not decode (a bug if ever non-zero)",
};

pub const TIMINGS_SKIPPED_TOTAL: Metric = Metric {
    name: "gpudirect_timings_skipped",
    kind: Counter,
    unit: None,
    labels: &[],
    help: "Timed calls not timed: both nesting slots of their level were in flight.",
    doc: "timed calls not timed: both nesting slots of their level were in flight on the task \
         (docs/probes.md)",
};

pub const MAPPINGS_UNTRACKED_TOTAL: Metric = Metric {
    name: "gpudirect_mappings_untracked",
    kind: Counter,
    unit: None,
    labels: &[],
    help: "Aggregate-only: DMA-API mappings the in-kernel mapping table had no room for.",
    doc: "aggregate-only: DMA-API mappings the in-kernel mapping table had no room for (no \
         lifetime, not listed as outstanding)",
};

pub const UNMAPS_UNMATCHED_TOTAL: Metric = Metric {
    name: "gpudirect_unmaps_unmatched",
    kind: Counter,
    unit: None,
    labels: &[],
    help: "Aggregate-only: unmaps whose mapping the in-kernel table did not hold.",
    doc: "aggregate-only: unmaps whose mapping the in-kernel table did not hold (mapped before \
         the trace, or untracked)",
};

pub const DEVICES_FOLDED_TOTAL: Metric = Metric {
    name: "gpudirect_devices_folded",
    kind: Counter,
    unit: None,
    labels: &[],
    help: "Devices reported as device=\\\"other\\\" (past --max-devices).",
    doc: "devices reported as `device=\"other\"`",
};

/// In the order docs/metrics.md lists them.
pub const ALL: &[&Metric] = &[
    &DMA_MAP_BYTES_TOTAL,
    &DMA_MAPS_TOTAL,
    &DMA_UNMAPS_TOTAL,
    &DMA_MAP_SIZE_BYTES,
    &MAPPINGS_OUTSTANDING,
    &MAPPINGS_OUTSTANDING_BYTES,
    &IOMMU_MAP_BYTES_TOTAL,
    &SWIOTLB_BOUNCES_TOTAL,
    &SWIOTLB_BOUNCED_BYTES_TOTAL,
    &DMA_MAP_ERRORS_TOTAL,
    &DMA_SYNCS_TOTAL,
    &DMA_SYNC_BYTES_TOTAL,
    &IOVA_CALLS_TOTAL,
    &DMA_UNMAPS_SKIPPED_TOTAL,
    &SG_TRUNCATED_TOTAL,
    &IOMMU_FAULTS_TOTAL,
    &PCIE_AER_ERRORS_TOTAL,
    &NVIDIA_XID_TOTAL,
    &IOMMU_MAP_LATENCY_SECONDS,
    &IOMMU_INVALIDATION_SECONDS,
    &IOMMU_INVALIDATION_DESCRIPTORS_TOTAL,
    &IOMMU_CACHE_TAG_FLUSHES_TOTAL,
    &TRANSLATION_SECONDS_TOTAL,
    &TRANSLATION_BUDGET_RATIO,
    &PROBE_ATTACHED,
    &EVENTS_TOTAL,
    &EVENTS_RECEIVED_TOTAL,
    &EVENTS_LOST_TOTAL,
    &EVENTS_MISSED_TOTAL,
    &STACKS_LOST_TOTAL,
    &EVENTS_UNDECODABLE_TOTAL,
    &TIMINGS_SKIPPED_TOTAL,
    &MAPPINGS_UNTRACKED_TOTAL,
    &UNMAPS_UNMATCHED_TOTAL,
    &DEVICES_FOLDED_TOTAL,
];
