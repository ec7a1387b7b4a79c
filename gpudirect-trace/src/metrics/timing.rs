//! The timing hooks' metric, declared once (docs/metrics.md's table is made from them).

use super::{Metric, Unit::Seconds};

pub const IOMMU_MAP_LATENCY_SECONDS: Metric = Metric::histogram(
    "gpudirect_iommu_map_latency",
    &["device", "op"],
    "Time spent in DMA-API, IOMMU map/unmap, IOTLB sync and swiotlb map operations.",
    "time spent per operation: op `dma_map`, `dma_unmap`, `dma_map_sg`, `dma_unmap_sg` \
     (DMA API), `iommu_map`, `iommu_unmap`, `iotlb_sync`, `swiotlb_map`, `fault_handler`, \
     and on NVIDIA hosts `nv_dma_map_sgt`, `nv_dma_map_alloc`, `nv_dma_unmap_alloc`, \
     `nv_dma_map_peer`, `nv_dma_unmap_peer`, `nv_dma_map_mmio`, `nvidia_p2p_get_pages`, \
     `nvidia_p2p_put_pages`, `nvidia_p2p_dma_map_pages`, `nvidia_p2p_dma_unmap_pages`; \
     buckets are powers of two from 512 ns to 134 ms. From the kernel's loss-free log2 \
     histograms (exact at these bounds) where the timing hooks attached, else from \
     streamed timings; absent where no timing hook attached",
)
.in_unit(Seconds);

/// In the order docs/metrics.md lists them.
pub const ALL: &[&Metric] = &[&IOMMU_MAP_LATENCY_SECONDS];
