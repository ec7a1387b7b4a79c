//! The DMA-API family: the dma:* tracepoints (6.8+) and the hooks on the
//! DMA-API functions (every kernel), the IOVA API (6.17+), per device maps,
//! unmaps, bytes by direction, sizes, outstanding mappings, lifetimes and
//! syncs (aggregate/), and dma-debug's checks over them (analysis/misuse/).

pub mod catalog;
pub mod metrics;

use crate::catalog::{tp, ProbeSpec};

pub use catalog::{dma_op_name, DMA_API_TIMING, DMA_OPS, NEED_UNMAP_LEARN};

pub const TRACEPOINTS: &[ProbeSpec] = &[
    tp(
        "dma:dma_map_page",
        "dma_map",
        6,
        "6.8 to 6.17",
        "dma:dma_map_phys (6.18+); the time:dma_map hook (every kernel)",
        true,
    ),
    tp(
        "dma:dma_map_phys",
        "dma_map",
        6,
        "6.18+",
        "dma:dma_map_page (6.8 to 6.17); the time:dma_map hook",
        true,
    ),
    tp(
        "dma:dma_map_resource",
        "dma_map_resource",
        6,
        "6.8 to 6.17",
        "dma:dma_map_phys with DMA_ATTR_MMIO (6.18+); the time:dma_map_resource hook",
        true,
    ),
    tp(
        "dma:dma_unmap_page",
        "dma_unmap",
        5,
        "6.8 to 6.17",
        "dma:dma_unmap_phys (6.18+); the time:dma_unmap hook",
        true,
    ),
    tp(
        "dma:dma_unmap_phys",
        "dma_unmap",
        5,
        "6.18+",
        "dma:dma_unmap_page (6.8 to 6.17); the time:dma_unmap hook",
        true,
    ),
    tp(
        "dma:dma_unmap_resource",
        "dma_unmap_resource",
        5,
        "6.8 to 6.17",
        "dma:dma_unmap_phys (6.18+); the time:dma_unmap_resource hook",
        true,
    ),
    tp(
        "dma:dma_map_sg",
        "dma_map_sg",
        6,
        "6.8+",
        "the time:dma_map_sg hook",
        true,
    ),
    tp(
        "dma:dma_unmap_sg",
        "dma_unmap_sg",
        5,
        "6.8+",
        "the time:dma_unmap_sg hook",
        true,
    ),
    tp(
        "dma:dma_map_sg_err",
        "dma_map_sg_err",
        5,
        "6.13+",
        "the time:dma_map_sg hook (return value)",
        false,
    ),
    tp(
        "dma:dma_alloc",
        "dma_alloc",
        4,
        "6.8+",
        "the time:dma_alloc hook",
        true,
    ),
    tp("dma:dma_alloc_pages", "dma_alloc", 4, "6.13+", "", true),
    tp(
        "dma:dma_alloc_sgt",
        "dma_alloc_sgt",
        3,
        "6.18+ (dma_alloc_noncontiguous)",
        "",
        true,
    ),
    tp(
        "dma:dma_alloc_sgt_err",
        "dma_alloc_sgt_err",
        4,
        "6.18+ (dma_alloc_noncontiguous that failed)",
        "",
        false,
    ),
    tp(
        "dma:dma_free",
        "dma_free",
        4,
        "6.8+",
        "the time:dma_free hook",
        true,
    ),
    tp("dma:dma_free_pages", "dma_free", 4, "6.13+", "", true),
    tp(
        "dma:dma_free_sgt",
        "dma_free_sgt",
        3,
        "6.18+ (dma_free_noncontiguous)",
        "",
        true,
    ),
    tp(
        "dma:dma_sync_single_for_cpu",
        "dma_sync_single_for_cpu",
        4,
        "6.8+",
        "the time:dma_sync hooks",
        true,
    ),
    tp(
        "dma:dma_sync_single_for_device",
        "dma_sync_single_for_device",
        4,
        "6.8+",
        "the time:dma_sync hooks",
        true,
    ),
    tp(
        "dma:dma_sync_sg_for_cpu",
        "dma_sync_sg_for_cpu",
        4,
        "6.8+",
        "the time:dma_sync hooks",
        true,
    ),
    tp(
        "dma:dma_sync_sg_for_device",
        "dma_sync_sg_for_device",
        4,
        "6.8+",
        "the time:dma_sync hooks",
        true,
    ),
];

pub const FAMILY: super::Family = super::Family {
    name: "dma_api",
    tracepoints: TRACEPOINTS,
    hooks: &[DMA_API_TIMING, &[NEED_UNMAP_LEARN]],
    metrics: metrics::METRICS,
};
