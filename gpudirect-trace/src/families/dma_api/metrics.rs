//! The DMA-API family's metrics, declared once (docs/metrics.md's table is made from them).

use crate::metrics::{
    Metric,
    Type::{Counter, Gauge, Histogram},
    Unit::Bytes,
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
    doc:
        "scatter-gather maps (`op=\"map\"`) and unmaps (`op=\"unmap\"`) whose list was not walked \
         to its end (`--sg-walk-max`, or a bounded walk on kernels before 5.17): while \
         non-zero, the device's `gpudirect_dma_map_bytes_total` is a lower bound",
};

/// In the order docs/metrics.md lists them.
pub const METRICS: &[&Metric] = &[
    &DMA_MAP_BYTES_TOTAL,
    &DMA_MAPS_TOTAL,
    &DMA_UNMAPS_TOTAL,
    &DMA_MAP_SIZE_BYTES,
    &MAPPINGS_OUTSTANDING,
    &MAPPINGS_OUTSTANDING_BYTES,
    &DMA_MAP_ERRORS_TOTAL,
    &DMA_SYNCS_TOTAL,
    &DMA_SYNC_BYTES_TOTAL,
    &IOVA_CALLS_TOTAL,
    &DMA_UNMAPS_SKIPPED_TOTAL,
    &SG_TRUNCATED_TOTAL,
];
