/// dma_map_page_attrs / dma_map_phys.
pub const MAP: u32 = 1 << 0;
/// dma_unmap_page_attrs / dma_unmap_phys.
pub const UNMAP: u32 = 1 << 1;
/// __dma_map_sg_attrs / dma_map_sg_attrs / dma_map_sgtable.
pub const MAP_SG: u32 = 1 << 2;
pub const UNMAP_SG: u32 = 1 << 3;
/// dma_map_resource and dma_unmap_resource.
pub const RESOURCE: u32 = 1 << 4;
/// dma_alloc_attrs and dma_free_attrs.
pub const COHERENT: u32 = 1 << 5;
/// The four dma_sync_* functions.
pub const SYNC: u32 = 1 << 6;
/// Failed scatter-gather maps (the return value of the sg map functions).
pub const MAP_SG_ERR: u32 = 1 << 7;
/// The IOVA API (dma_iova_*, 6.17+): no tracepoint reports it, so the
/// hooks are its only source.
pub const IOVA: u32 = 1 << 8;
pub const ALL: u32 = (1 << 9) - 1;
