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
        "gpudirect_iova_calls_total" => {
            "IOVA-API calls (6.17+: dma_iova_try_alloc, _link, _unlink, _sync, _free), by op; \
             op=unlink counts the links dma_iova_destroy ended."
        }
        "gpudirect_dma_unmaps_skipped_total" => {
            "Streaming mappings the kernel did not unmap because dma_need_unmap() said it need \
             not (6.17+ block layer on dma-direct): not outstanding, not leaks."
        }
        "gpudirect_sg_truncated_total" => {
            "Scatter-gather maps (op=map) and unmaps whose list was not walked to its end \
             (--sg-walk-max or a kernel limit): the device's byte counts are lower bounds."
        }
        "gpudirect_nvidia_xid_total" => "NVIDIA Xid errors reported by the driver, by Xid number.",
        "gpudirect_iommu_faults_total" => "IOMMU faults, by where they were seen and their reason.",
        "gpudirect_iommu_map_latency_seconds" => {
            "Time spent in DMA-API, IOMMU map/unmap, IOTLB sync and swiotlb map operations."
        }
        "gpudirect_iommu_invalidation_seconds" => {
            "Time per submission to the IOMMU's invalidation queue and its wait for completion \
             (Intel qi_submit_sync, AMD completion wait, SMMUv3 command batch), by device, unit \
             and type."
        }
        "gpudirect_iommu_invalidation_descriptors_total" => {
            "Invalidation descriptors queued (intel_iommu:qi_submit, every descriptor of a \
             batch), by unit and type."
        }
        "gpudirect_iommu_cache_tag_flushes_total" => {
            "Cache-tag flushes the VT-d driver made (intel_iommu:cache_tag_flush_*, 6.10+), by \
             device, unit, tag type and flush kind."
        }
        "gpudirect_translation_seconds_total" => {
            "CPU time translation cost the device: dma_api (timed DMA-API calls), iommu (IOMMU \
             work inside them plus invalidations outside any timed IOMMU call), invalidation \
             (all its invalidation-queue time)."
        }
        "gpudirect_translation_budget_ratio" => {
            "The translation budget over the device's first to last event: CPU seconds per \
             second by part (1000 x this is the report's ms/s), and what identity (passthrough) \
             mapping would save (part=identity_saves, an estimate)."
        }
        "gpudirect_pcie_aer_errors_total" => "PCIe AER errors reported in the kernel log.",
        "gpudirect_probe_attached" => "1 if the probe is attached on this kernel, else 0.",
        "gpudirect_events_total" => "Tracepoint hits counted in-kernel (loss-free), by event kind.",
        "gpudirect_events_received_total" => "Event records received from the ring buffer.",
        "gpudirect_events_lost_total" => "Event records the ring buffer had no room for.",
        "gpudirect_events_missed_total" => {
            "Program runs the kernel skipped: already running on that CPU (recursion_misses), or a kprobe hit inside another kprobe or bpf() call (kprobe_profile)."
        }
        "gpudirect_stacks_lost_total" => {
            "DMA-API calls whose kernel stack could not be kept (--stacks: the stack map full, or three hash buckets taken)."
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
        "gpudirect_snapshots_written_total" => {
            "Flight-recorder snapshots written, by the trigger that started them."
        }
        "gpudirect_snapshot_triggers_suppressed_total" => {
            "Triggers that started no snapshot: open (recorded in, and extending, the open one), spacing (within --min-spacing), max-snapshots."
        }
        "gpudirect_snapshot_failures_total" => {
            "Snapshots that could not be written (disk full, ...); the ring went on."
        }
        "gpudirect_snapshots_deleted_total" => {
            "Old snapshots deleted to keep the directory within --snapshot-max-bytes."
        }
        "gpudirect_flight_ring_bytes" => "Bytes of trace the flight recorder's ring holds.",
        "gpudirect_flight_ring_held_seconds" => "Time span the flight recorder's ring holds (whole seconds).",
        "gpudirect_flight_ring_dropped_events_total" => {
            "Events the ring dropped to stay within its bounds (history older than a snapshot holds)."
        }
        "gpudirect_snapshot_last_timestamp_seconds" => {
            "Unix time the last snapshot was completed."
        }
        "gpudirect_nvml_available" => "1 if NVML (libnvidia-ml.so.1) could be used, else 0.",
        "gpudirect_nvml_device_errors" => {
            "GPUs NVML lists but could not open at the last reading (e.g. GPU lost)."
        }
        "gpudirect_gpu_info" => "1 per NVIDIA GPU: its bus id, NVML index, UUID and name.",
        "gpudirect_gpu_bar1_total_bytes" => {
            "Size of the GPU's BAR1, the window GPUDirect RDMA registrations map into."
        }
        "gpudirect_gpu_bar1_used_bytes" => "BAR1 in use; registrations fail once it is full.",
        "gpudirect_gpu_pcie_link_gen_current" => "PCIe generation the link runs at now.",
        "gpudirect_gpu_pcie_link_gen_max" => "Highest PCIe generation this GPU and host allow.",
        "gpudirect_gpu_pcie_link_width_current" => "PCIe lanes the link runs with now.",
        "gpudirect_gpu_pcie_link_width_max" => "Most PCIe lanes this GPU and host allow.",
        "gpudirect_gpu_pcie_replays_total" => {
            "PCIe link-level replays since the driver loaded (nvmlDeviceGetPcieReplayCounter)."
        }
        "gpudirect_gpu_remapped_rows" => {
            "HBM rows remapped, by the kind of error that caused it."
        }
        "gpudirect_gpu_row_remap_pending" => "1 while a row remapping waits for a GPU reset.",
        "gpudirect_gpu_row_remap_failed" => "1 when a row remapping failed (no spare rows left).",
        "gpudirect_gpu_retired_pages" => "Pages retired after ECC errors, by cause.",
        "gpudirect_gpu_retired_pages_pending" => "1 while pages wait to be retired.",
        "gpudirect_gpu_ecc_enabled" => "1 when ECC is on.",
        "gpudirect_gpu_ecc_errors_total" => {
            "ECC errors: scope volatile (since driver load) or aggregate (GPU lifetime)."
        }
        "gpudirect_gpu_persistence_mode" => "1 when persistence mode is on.",
        "gpudirect_gpu_performance_state" => "P-state: 0 full performance .. 15 minimum.",
        "gpudirect_gpu_fact_unavailable" => {
            "1 for each NVML fact this GPU did not give (not supported, no permission)."
        }
        "gpudirect_dma_misuse_total" => {
            "DMA-API misuse the trace proves (--check), by device and check (dma-debug's checks; map-failure: maps that returned an error)."
        }
        "gpudirect_dma_misuse_unchecked_total" => {
            "DMA-API calls --check could not judge: unmaps and syncs of handles mapped before tracing, maps past the table, findings unproven after lost events."
        }
        "gpudirect_containers_folded_total" => {
            "Containers reported as container=\"other\" (past the container label cap)."
        }
        _ => "",
    }
}
