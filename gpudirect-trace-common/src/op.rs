pub const DMA_MAP: u32 = 0;
pub const DMA_UNMAP: u32 = 1;
pub const DMA_MAP_SG: u32 = 2;
pub const DMA_UNMAP_SG: u32 = 3;
pub const IOMMU_MAP: u32 = 4;
pub const IOMMU_UNMAP: u32 = 5;
pub const IOTLB_SYNC: u32 = 6;
pub const SWIOTLB_MAP: u32 = 7;
/// The IOMMU driver's fault interrupt handler (Intel: dmar_fault).
pub const FAULT_HANDLER: u32 = 8;
/// The NVIDIA driver's own DMA paths (nv-dma.c) and the GPUDirect RDMA
/// peer-to-peer API (nv-p2p.c), one op per function.
pub const NV_DMA_MAP_SGT: u32 = 9;
pub const NV_DMA_MAP_ALLOC: u32 = 10;
pub const NV_DMA_UNMAP_ALLOC: u32 = 11;
pub const NV_DMA_MAP_PEER: u32 = 12;
pub const NV_DMA_UNMAP_PEER: u32 = 13;
pub const NV_DMA_MAP_MMIO: u32 = 14;
pub const P2P_GET_PAGES: u32 = 15;
pub const P2P_PUT_PAGES: u32 = 16;
pub const P2P_DMA_MAP_PAGES: u32 = 17;
pub const P2P_DMA_UNMAP_PAGES: u32 = 18;
/// Not a function: map-to-unmap lifetime of DMA-API mappings, kept
/// in-kernel (`LAT_HIST`) in aggregate-only mode.
pub const LIFETIME: u32 = 19;
/// DMA-API calls timed by the hooks that are also a DMA-API source on
/// kernels without the dma:* tracepoints.
pub const DMA_MAP_RESOURCE: u32 = 20;
pub const DMA_UNMAP_RESOURCE: u32 = 21;
pub const DMA_ALLOC: u32 = 22;
pub const DMA_FREE: u32 = 23;
/// All four dma_sync_* functions.
pub const DMA_SYNC: u32 = 24;
/// dma_map_sgtable where it does not call a hooked __dma_map_sg_attrs.
pub const DMA_MAP_SGTABLE: u32 = 25;
/// The IOVA API (6.17+), one op per function.
pub const DMA_IOVA_ALLOC: u32 = 26;
pub const DMA_IOVA_LINK: u32 = 27;
pub const DMA_IOVA_UNLINK: u32 = 28;
pub const DMA_IOVA_SYNC: u32 = 29;
pub const DMA_IOVA_FREE: u32 = 30;
pub const DMA_IOVA_DESTROY: u32 = 31;
pub const COUNT: u32 = 32;

/// DMA-API calls that are IOMMU work themselves: the IOVA API's link maps
/// the IOMMU page tables (iommu_map_nosync) and its sync flushes them
/// (iommu_sync_map), with no timed iommu_map/iotlb_sync around either. An
/// invalidation inside one is nested in IOMMU time, as under iommu_map.
pub const fn is_iommu_work(o: u32) -> bool {
    o == DMA_IOVA_LINK || o == DMA_IOVA_SYNC
}

pub const NAMES: [&str; COUNT as usize] = [
    "dma_map",
    "dma_unmap",
    "dma_map_sg",
    "dma_unmap_sg",
    "iommu_map",
    "iommu_unmap",
    "iotlb_sync",
    "swiotlb_map",
    "fault_handler",
    "nv_dma_map_sgt",
    "nv_dma_map_alloc",
    "nv_dma_unmap_alloc",
    "nv_dma_map_peer",
    "nv_dma_unmap_peer",
    "nv_dma_map_mmio",
    "nvidia_p2p_get_pages",
    "nvidia_p2p_put_pages",
    "nvidia_p2p_dma_map_pages",
    "nvidia_p2p_dma_unmap_pages",
    "lifetime",
    "dma_map_resource",
    "dma_unmap_resource",
    "dma_alloc",
    "dma_free",
    "dma_sync",
    "dma_map_sgtable",
    "dma_iova_try_alloc",
    "dma_iova_link",
    "dma_iova_unlink",
    "dma_iova_sync",
    "dma_iova_free",
    "dma_iova_destroy",
];
