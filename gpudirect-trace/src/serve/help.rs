//! HELP text of every exported family (docs/metrics.md says the same at
//! length); promtool rejects a family without one.

/// The HELP line of the exported family `exported` (name with unit and
/// `_total` suffixes).
pub fn help(exported: &str) -> &'static str {
    match exported {
        "gpudirect_dma_map_bytes_total" => {
            "Bytes mapped through the streaming DMA API, by DMA direction."
        }
        "gpudirect_dma_maps_total" => {
            "Mappings made: dma (streaming DMA API), iommu (IOMMU page tables), coherent (dma_alloc)."
        }
        "gpudirect_dma_unmaps_total" => "Mappings removed, by level as in gpudirect_dma_maps_total.",
        "gpudirect_mappings_outstanding" => "Mappings made and not yet removed since the start.",
        "gpudirect_mappings_outstanding_bytes" => "Bytes of the outstanding mappings.",
        "gpudirect_dma_map_size_bytes" => {
            "Mapped sizes (one observation per mapping, per entry for scatter-gather mappings)."
        }
        "gpudirect_iommu_map_bytes_total" => "Bytes mapped in IOMMU page tables (iommu:map).",
        "gpudirect_swiotlb_bounces_total" => "Transfers bounced through the swiotlb buffer.",
        "gpudirect_swiotlb_bounced_bytes_total" => {
            "Bytes bounced through the swiotlb buffer (copied by the CPU)."
        }
        "gpudirect_dma_map_errors_total" => {
            "Failed DMA-API maps: dma_map_sg/dma_map_sgtable errors, DMA_MAPPING_ERROR from \
             dma_map_page/phys/resource, NULL from dma_alloc_attrs."
        }
        "gpudirect_dma_syncs_total" => "dma_sync_single/sg_for_cpu/device calls.",
        "gpudirect_dma_sync_bytes_total" => "Bytes covered by dma_sync_* calls.",
        "gpudirect_sg_truncated_total" => {
            "Scatter-gather maps (op=map) and unmaps whose list was not walked to its end \
             (--sg-walk-max or a kernel limit): the device's byte counts are lower bounds."
        }
        "gpudirect_nvidia_xid_total" => "NVIDIA Xid errors reported by the driver, by Xid number.",
        "gpudirect_iommu_faults_total" => "IOMMU faults, by where they were seen and their reason.",
        "gpudirect_iommu_map_latency_seconds" => {
            "Time spent in DMA-API, IOMMU map/unmap, IOTLB sync and swiotlb map operations."
        }
        "gpudirect_pcie_aer_errors_total" => "PCIe AER errors reported in the kernel log.",
        "gpudirect_probe_attached" => "1 if the probe is attached on this kernel, else 0.",
        "gpudirect_events_total" => "Tracepoint hits counted in-kernel (loss-free), by event kind.",
        "gpudirect_events_received_total" => "Event records received from the ring buffer.",
        "gpudirect_events_lost_total" => "Event records the ring buffer had no room for.",
        "gpudirect_events_missed_total" => {
            "Program runs the kernel skipped because the program was already running on that CPU (recursion_misses)."
        }
        "gpudirect_events_undecodable_total" => "Event records that could not be decoded.",
        "gpudirect_timings_skipped_total" => {
            "Timed calls not timed: both nesting slots of their level were in flight."
        }
        "gpudirect_mappings_untracked_total" => {
            "Aggregate-only: DMA-API mappings the in-kernel mapping table had no room for."
        }
        "gpudirect_unmaps_unmatched_total" => {
            "Aggregate-only: unmaps whose mapping the in-kernel table did not hold."
        }
        "gpudirect_devices_folded_total" => {
            "Devices reported as device=\"other\" (past --max-devices)."
        }
        _ => "",
    }
}
