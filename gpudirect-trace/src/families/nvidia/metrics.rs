//! The NVIDIA family's metrics: Xids, and the GPUs as NVML sees them, declared once (docs/metrics.md's table is made from them).

use crate::metrics::{Metric, Unit::Bytes};

/// The labels every per-GPU series starts with: its bus id, NVML index and
/// UUID, followed by the metric's own (one place to change them for every
/// GPU metric).
macro_rules! per_gpu_and {
    ($($own:literal),*) => {
        &["device", "gpu", "uuid", $($own),*]
    };
}

const PER_GPU: &[&str] = per_gpu_and!();

/// A metric of one GPU as NVML reads it, as most of this family are: a
/// gauge labelled `PER_GPU`.
const fn gpu_gauge(name: &'static str, help: &'static str, doc: &'static str) -> Metric {
    Metric::gauge(name, PER_GPU, help, doc)
}

pub const NVIDIA_XID_TOTAL: Metric = Metric::counter(
    "gpudirect_nvidia_xid",
    &["device", "xid"],
    "NVIDIA Xid errors reported by the driver, by Xid number.",
    "NVIDIA Xid errors by Xid number, from nvidia:nvidia_dev_xid or, when that tracepoint \
     is not attached, from the driver's log lines. A counter, unlike dcgm-exporter's \
     last-value gauge: a burst of Xids between two scrapes is never lost",
);

pub const NVML_AVAILABLE: Metric = Metric::gauge(
    "gpudirect_nvml_available",
    &[],
    "1 if NVML (libnvidia-ml.so.1) could be used, else 0.",
    "1 when NVML could be used; 0 (and no `gpudirect_gpu_*` series) without it",
);

pub const NVML_DEVICE_ERRORS: Metric = Metric::gauge(
    "gpudirect_nvml_device_errors",
    &[],
    "GPUs NVML lists but could not open at the last reading (e.g. GPU lost).",
    "GPUs NVML lists but could not open at the last reading (a lost GPU after Xid 79)",
);

pub const GPU_INFO: Metric = Metric::gauge(
    "gpudirect_gpu_info",
    per_gpu_and!("name"),
    "1 per NVIDIA GPU: its bus id, NVML index, UUID and name.",
    "1 per GPU; `name` is the product (`NVIDIA H200`)",
);

pub const GPU_BAR1_TOTAL_BYTES: Metric = gpu_gauge(
    "gpudirect_gpu_bar1_total",
    "Size of the GPU's BAR1, the window GPUDirect RDMA registrations map into.",
    "BAR1 size: the window GPUDirect RDMA registrations map GPU memory into",
)
.in_unit(Bytes);

pub const GPU_BAR1_USED_BYTES: Metric = gpu_gauge(
    "gpudirect_gpu_bar1_used",
    "BAR1 in use; registrations fail once it is full.",
    "BAR1 in use; registrations fail once it is full (doctor warns at 75%, problem at \
     90%)",
)
.in_unit(Bytes);

pub const GPU_PCIE_LINK_GEN_CURRENT: Metric = gpu_gauge(
    "gpudirect_gpu_pcie_link_gen_current",
    "PCIe generation the link runs at now.",
    "PCIe generation now, and the most this GPU and host allow",
);

pub const GPU_PCIE_LINK_GEN_MAX: Metric = gpu_gauge(
    "gpudirect_gpu_pcie_link_gen_max",
    "Highest PCIe generation this GPU and host allow.",
    "PCIe generation now, and the most this GPU and host allow",
);

pub const GPU_PCIE_LINK_WIDTH_CURRENT: Metric = gpu_gauge(
    "gpudirect_gpu_pcie_link_width_current",
    "PCIe lanes the link runs with now.",
    "lanes now, and the most allowed. GPUs lower the link speed when idle: compare under \
     load",
);

pub const GPU_PCIE_LINK_WIDTH_MAX: Metric = gpu_gauge(
    "gpudirect_gpu_pcie_link_width_max",
    "Most PCIe lanes this GPU and host allow.",
    "lanes now, and the most allowed. GPUs lower the link speed when idle: compare under \
     load",
);

pub const GPU_PCIE_REPLAYS_TOTAL: Metric = Metric::counter(
    "gpudirect_gpu_pcie_replays",
    PER_GPU,
    "PCIe link-level replays since the driver loaded (nvmlDeviceGetPcieReplayCounter).",
    "link-level replays since the driver loaded; a rising rate precedes Xid 79 (DCGM \
     warns above 8/min: `rate(...[5m]) * 60 > 8`)",
);

pub const GPU_REMAPPED_ROWS: Metric = Metric::gauge(
    "gpudirect_gpu_remapped_rows",
    per_gpu_and!("cause"),
    "HBM rows remapped, by the kind of error that caused it.",
    "HBM rows remapped; cause `correctable`, `uncorrectable`",
);

pub const GPU_ROW_REMAP_PENDING: Metric = gpu_gauge(
    "gpudirect_gpu_row_remap_pending",
    "1 while a row remapping waits for a GPU reset.",
    "1 while a remapping waits for a GPU reset",
);

pub const GPU_ROW_REMAP_FAILED: Metric = gpu_gauge(
    "gpudirect_gpu_row_remap_failed",
    "1 when a row remapping failed (no spare rows left).",
    "1 when a remapping failed (no spare row)",
);

pub const GPU_RETIRED_PAGES: Metric = Metric::gauge(
    "gpudirect_gpu_retired_pages",
    per_gpu_and!("cause"),
    "Pages retired after ECC errors, by cause.",
    "pages retired (GPUs before Ampere); cause `single_bit`, `double_bit`",
);

pub const GPU_RETIRED_PAGES_PENDING: Metric = gpu_gauge(
    "gpudirect_gpu_retired_pages_pending",
    "1 while pages wait to be retired.",
    "1 while pages wait to be retired",
);

pub const GPU_ECC_ENABLED: Metric = gpu_gauge(
    "gpudirect_gpu_ecc_enabled",
    "1 when ECC is on.",
    "1 when ECC is on",
);

pub const GPU_ECC_ERRORS_TOTAL: Metric = Metric::counter(
    "gpudirect_gpu_ecc_errors",
    per_gpu_and!("scope", "error"),
    "ECC errors: scope volatile (since driver load) or aggregate (GPU lifetime).",
    "ECC errors; scope `volatile` (since driver load) or `aggregate` (GPU lifetime), \
     error `corrected` or `uncorrected`",
);

pub const GPU_PERSISTENCE_MODE: Metric = gpu_gauge(
    "gpudirect_gpu_persistence_mode",
    "1 when persistence mode is on.",
    "1 when persistence mode is on",
);

pub const GPU_PERFORMANCE_STATE: Metric = gpu_gauge(
    "gpudirect_gpu_performance_state",
    "P-state: 0 full performance .. 15 minimum.",
    "P-state, 0 (full performance) to 15",
);

pub const GPU_FACT_UNAVAILABLE: Metric = Metric::gauge(
    "gpudirect_gpu_fact_unavailable",
    per_gpu_and!("fact"),
    "1 for each NVML fact this GPU did not give (not supported, no permission).",
    "1 for each fact NVML did not give (`retired_pages_single_bit` on Hopper, ...)",
);

pub const CONTAINERS_FOLDED_TOTAL: Metric = Metric::counter(
    "gpudirect_containers_folded",
    &[],
    "Containers reported as container=\\\"other\\\" (past the container label cap).",
    "containers reported as `container=\"other\"` (past the cap of the optional \
     per-container label)",
);

/// In the order docs/metrics.md lists them: the Xids in the main table,
/// NVML's in the GPU table.
pub const METRICS: &[&Metric] = &[&NVIDIA_XID_TOTAL];

pub const GPU_METRICS: &[&Metric] = &[
    &NVML_AVAILABLE,
    &NVML_DEVICE_ERRORS,
    &GPU_INFO,
    &GPU_BAR1_TOTAL_BYTES,
    &GPU_BAR1_USED_BYTES,
    &GPU_PCIE_LINK_GEN_CURRENT,
    &GPU_PCIE_LINK_GEN_MAX,
    &GPU_PCIE_LINK_WIDTH_CURRENT,
    &GPU_PCIE_LINK_WIDTH_MAX,
    &GPU_PCIE_REPLAYS_TOTAL,
    &GPU_REMAPPED_ROWS,
    &GPU_ROW_REMAP_PENDING,
    &GPU_ROW_REMAP_FAILED,
    &GPU_RETIRED_PAGES,
    &GPU_RETIRED_PAGES_PENDING,
    &GPU_ECC_ENABLED,
    &GPU_ECC_ERRORS_TOTAL,
    &GPU_PERSISTENCE_MODE,
    &GPU_PERFORMANCE_STATE,
    &GPU_FACT_UNAVAILABLE,
    &CONTAINERS_FOLDED_TOTAL,
];
