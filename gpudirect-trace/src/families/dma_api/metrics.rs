//! The DMA-API family's metrics, declared once (docs/metrics.md's table is made from them).

use crate::metrics::{Metric, Unit::Bytes};

pub const DMA_MAP_BYTES_TOTAL: Metric = Metric::counter(
    "gpudirect_dma_map",
    &["device", "direction"],
    "Bytes mapped through the streaming DMA API, by DMA direction.",
    "bytes mapped through the streaming DMA API (dma_map_page/phys/resource/sg); \
     direction `to_device`, `from_device`, `bidirectional`, `none`",
)
.in_unit(Bytes);

pub const DMA_MAPS_TOTAL: Metric = Metric::counter(
    "gpudirect_dma_maps",
    &["device", "level"],
    "Mappings made: dma (streaming DMA API), iommu (IOMMU page tables), coherent \
     (dma_alloc).",
    "mappings made; level `dma` (streaming DMA API), `iommu` (IOMMU page-table maps), \
     `coherent` (dma_alloc)",
);

pub const DMA_UNMAPS_TOTAL: Metric = Metric::counter(
    "gpudirect_dma_unmaps",
    &["device", "level"],
    "Mappings removed, by level as in gpudirect_dma_maps_total.",
    "mappings removed (dma_unmap*, iommu:unmap, dma_free)",
);

pub const DMA_MAP_SIZE_BYTES: Metric = Metric::histogram(
    "gpudirect_dma_map_size",
    &["device", "level"],
    "Mapped sizes (one observation per mapping, per entry for scatter-gather mappings).",
    "mapped sizes: one observation per mapping, per entry for scatter-gather mappings; \
     buckets 512 B, 4 KiB … 256 KiB, 1, 2, 4, 16, 64, 256 MiB, 1 GiB",
)
.in_unit(Bytes);

pub const MAPPINGS_OUTSTANDING: Metric = Metric::gauge(
    "gpudirect_mappings_outstanding",
    &["device", "level"],
    "Mappings made and not yet removed since the start.",
    "mappings made and not yet removed since the exporter started",
);

pub const MAPPINGS_OUTSTANDING_BYTES: Metric = Metric::gauge(
    "gpudirect_mappings_outstanding",
    &["device", "level"],
    "Bytes of the outstanding mappings.",
    "their bytes",
)
.in_unit(Bytes);

pub const DMA_MAP_ERRORS_TOTAL: Metric = Metric::counter(
    "gpudirect_dma_map_errors",
    &["device"],
    "Failed DMA-API maps: dma_map_sg/dma_map_sgtable errors, DMA_MAPPING_ERROR from \
     dma_map_page/phys/resource, NULL from dma_alloc_attrs.",
    "failed DMA-API maps: dma_map_sg/dma_map_sgtable errors, `DMA_MAPPING_ERROR` from \
     dma_map_page/phys/resource, NULL from dma_alloc_attrs",
);

pub const DMA_SYNCS_TOTAL: Metric = Metric::counter(
    "gpudirect_dma_syncs",
    &["device"],
    "dma_sync_single/sg_for_cpu/device calls.",
    "dma_sync_single/sg_for_cpu/device calls (dma:dma_sync_* on 6.8+, the DMA-API hooks \
     before)",
);

pub const DMA_SYNC_BYTES_TOTAL: Metric = Metric::counter(
    "gpudirect_dma_sync",
    &["device"],
    "Bytes covered by dma_sync_* calls.",
    "bytes those syncs covered",
)
.in_unit(Bytes);

pub const IOVA_CALLS_TOTAL: Metric = Metric::counter(
    "gpudirect_iova_calls",
    &["device", "op"],
    "IOVA-API calls (6.17+: dma_iova_try_alloc, _link, _unlink, _sync, _free), by op; \
     op=unlink counts the links dma_iova_destroy ended.",
    "IOVA-API calls (6.17+; the block layer's NVMe path, RDMA ODP, HMM, VFIO dma-buf): \
     `op` `alloc` (dma_iova_try_alloc that allocated), `declined` (that returned false: \
     the driver maps with dma_map_* instead), `link`, `unlink` (dma_iova_unlink calls and \
     the links dma_iova_destroy ended), `sync`, `free`. Links and unlinks are also the \
     device's `gpudirect_dma_maps_total{level=\"dma\"}` / unmaps",
);

pub const DMA_UNMAPS_SKIPPED_TOTAL: Metric = Metric::counter(
    "gpudirect_dma_unmaps_skipped",
    &["device"],
    "Streaming mappings the kernel did not unmap because dma_need_unmap() said it need \
     not (6.17+ block layer on dma-direct): not outstanding, not leaks.",
    "streaming mappings the kernel did not unmap because `dma_need_unmap()` said it need \
     not (the 6.17+ block layer on dma-direct: no IOMMU, nothing to sync): counted here, \
     never outstanding or leak suspects",
);

pub const SG_TRUNCATED_TOTAL: Metric = Metric::counter(
    "gpudirect_sg_truncated",
    &["device", "op"],
    "Scatter-gather maps (op=map) and unmaps whose list was not walked to its end \
     (--sg-walk-max or a kernel limit): the device's byte counts are lower bounds.",
    "scatter-gather maps (`op=\"map\"`) and unmaps (`op=\"unmap\"`) whose list was not walked \
     to its end (`--sg-walk-max`, or a bounded walk on kernels before 5.17): while \
     non-zero, the device's `gpudirect_dma_map_bytes_total` is a lower bound",
);

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
