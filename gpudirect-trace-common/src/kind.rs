pub const IOMMU_MAP: u16 = 1;
pub const IOMMU_UNMAP: u16 = 2;
pub const IO_PAGE_FAULT: u16 = 3;
pub const GROUP_ADD_DEVICE: u16 = 4;
pub const GROUP_REMOVE_DEVICE: u16 = 5;
pub const DOMAIN_ATTACH: u16 = 6;
pub const DOMAIN_DETACH: u16 = 7;
/// dma_map_page (5.x-6.17), dma_map_phys (6.18+), dma_map_resource.
pub const DMA_MAP: u16 = 8;
pub const DMA_UNMAP: u16 = 9;
pub const DMA_MAP_SG: u16 = 10;
pub const DMA_UNMAP_SG: u16 = 11;
pub const DMA_MAP_SG_ERR: u16 = 12;
pub const DMA_ALLOC: u16 = 13;
pub const DMA_FREE: u16 = 14;
pub const SWIOTLB_BOUNCED: u16 = 15;
pub const NV_XID: u16 = 16;
/// A timed kernel function returned: `size` = nanoseconds spent,
/// `aux` = the operation (`op::*`), `addr` = its IOVA/DMA address argument
/// when it has one.
pub const LATENCY: u16 = 17;
/// ras:aer_event: a PCIe AER error. `addr` = the AER status register,
/// `aux` = severity (0 uncorrected non-fatal, 1 fatal, 2 corrected),
/// `dev` = a tagged key (bit 0 set) of the DEVICES name map: the
/// tracepoint names the device by string, not by `struct device *`.
pub const AER: u16 = 18;
/// A DMA-API map that failed: dma_map_page/phys/resource returned
/// `DMA_MAPPING_ERROR`, or dma_alloc_attrs returned NULL (with
/// `flags::COHERENT`). `phys`, `size`, `dir`, `aux` (attrs) as for DMA_MAP.
pub const DMA_MAP_ERR: u16 = 19;
/// dma_sync_single_for_cpu / dma_sync_sg_for_cpu (`flags::SCATTERLIST`):
/// `addr` = DMA address (first entry's), `size` = bytes synced, `aux` =
/// entries (sg).
pub const DMA_SYNC_CPU: u16 = 20;
/// dma_sync_*_for_device, as DMA_SYNC_CPU.
pub const DMA_SYNC_DEVICE: u16 = 21;
/// Counter-only (never a record): scatter-gather MAPS whose walk stopped
/// before the end of the list (`--sg-walk-max`, a kernel limit or
/// an unreadable entry). `DEV_COUNTERS` count = such maps, bytes = what
/// was walked of them (their total is a lower bound).
pub const SG_TRUNCATED: u16 = 22;
/// Counter-only: the same for scatter-gather unmaps.
pub const SG_UNMAP_TRUNCATED: u16 = 23;
/// An IOMMU invalidation submission returned (Intel qi_submit_sync, AMD
/// completion wait, SMMUv3 command-queue batch): `size` = nanoseconds
/// spent, `dir` = its class (`inval::class`: vendor, type, unit, nested),
/// `phys` / `addr` = the first descriptor's qw0 / qw1 (Intel; SMMUv3:
/// the first command's two words), `aux` = descriptors submitted (low 32
/// bits) and the unit's PCI segment (bits 32..48, Intel).
pub const IOMMU_INVAL: u16 = 24;
/// Counter-only: descriptors queued (intel_iommu:qi_submit), by class
/// (`dir`); bytes = pages of page-selective IOTLB invalidations.
pub const QI_DESCRIPTOR: u16 = 25;
/// Counter-only: cache-tag flushes (intel_iommu:cache_tag_flush_*,
/// 6.10+): `dev` = the tag's device, `dir` = class (type = the tag's
/// type | the tracepoint << 4), bytes = pages asked for.
pub const CACHE_TAG_FLUSH: u16 = 26;
/// dma_iova_try_alloc() succeeded (the IOVA API, 6.17+: the block layer,
/// RDMA, HMM and VFIO dma-buf map through it): `addr` = the IOVA space's
/// base (`state->addr`), `size` = bytes allocated, `phys` = the phys
/// argument (used by the kernel only for alignment). Links into it are
/// `DMA_MAP` records with `flags::IOVA`, unlinks `DMA_UNMAP` with it, and
/// dma_iova_destroy a `DMA_UNMAP` with `flags::IOVA_DESTROY` (every link in
/// `[addr, addr + size)` ends; `phys` = the links it ended) followed by an
/// `IOVA_FREE`.
pub const IOVA_ALLOC: u16 = 27;
/// dma_iova_free(), or the free inside dma_iova_destroy
/// (`flags::IOVA_DESTROY`): `addr` = base, `size` = bytes allocated, `phys`
/// = links still outstanding in it (a free with links is a driver bug).
pub const IOVA_FREE: u16 = 28;
/// dma_iova_sync(): `addr` = base + offset, `size` = bytes synced.
pub const IOVA_SYNC: u16 = 29;
/// Counter-only: dma_iova_try_alloc() returned false (the device does not
/// use the IOMMU's DMA ops: the driver falls back to dma_map_*).
pub const IOVA_DECLINED: u16 = 30;
/// Counter-only: dma_need_unmap() returned false for the device (6.17+):
/// the kernel may skip unmapping its streaming mappings (dma-direct with
/// nothing to sync), so a map without an unmap is normal there.
pub const UNMAP_NOT_NEEDED: u16 = 31;
/// One past the largest kind: sizes per-kind counter arrays.
pub const COUNT: u32 = 32;

/// Kinds that exist only as in-kernel counters, never as records.
pub const fn is_counter_only(k: u16) -> bool {
    matches!(
        k,
        SG_TRUNCATED
            | SG_UNMAP_TRUNCATED
            | QI_DESCRIPTOR
            | CACHE_TAG_FLUSH
            | IOVA_DECLINED
            | UNMAP_NOT_NEEDED
    )
}

/// Counter-only kinds whose counts are not tracepoint hits (truncated
/// walks count maps that were also counted as maps; the IOVA API's declined
/// allocations and dma_need_unmap() answers are calls, not events).
pub const fn is_hit(k: u16) -> bool {
    !matches!(
        k,
        SG_TRUNCATED | SG_UNMAP_TRUNCATED | IOVA_DECLINED | UNMAP_NOT_NEEDED
    )
}
