//! The NVIDIA family's metrics: Xids, and the GPUs as NVML sees them, declared once (docs/metrics.md's table is made from them).

use crate::metrics::{
    Metric,
    Type::{Counter, Gauge},
    Unit::Bytes,
};

pub const NVIDIA_XID_TOTAL: Metric = Metric {
    name: "gpudirect_nvidia_xid",
    kind: Counter,
    unit: None,
    labels: &["device", "xid"],
    help: "NVIDIA Xid errors reported by the driver, by Xid number.",
    doc: "NVIDIA Xid errors by Xid number, from nvidia:nvidia_dev_xid or, when that tracepoint \
         is not attached, from the driver's log lines. A counter, unlike dcgm-exporter's \
         last-value gauge: a burst of Xids between two scrapes is never lost",
};

pub const NVML_AVAILABLE: Metric = Metric {
    name: "gpudirect_nvml_available",
    kind: Gauge,
    unit: None,
    labels: &[],
    help: "1 if NVML (libnvidia-ml.so.1) could be used, else 0.",
    doc: "1 when NVML could be used; 0 (and no `gpudirect_gpu_*` series) without it",
};

pub const NVML_DEVICE_ERRORS: Metric = Metric {
    name: "gpudirect_nvml_device_errors",
    kind: Gauge,
    unit: None,
    labels: &[],
    help: "GPUs NVML lists but could not open at the last reading (e.g. GPU lost).",
    doc: "GPUs NVML lists but could not open at the last reading (a lost GPU after Xid 79)",
};

pub const GPU_INFO: Metric = Metric {
    name: "gpudirect_gpu_info",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid", "name"],
    help: "1 per NVIDIA GPU: its bus id, NVML index, UUID and name.",
    doc: "1 per GPU; `name` is the product (`NVIDIA H200`)",
};

pub const GPU_BAR1_TOTAL_BYTES: Metric = Metric {
    name: "gpudirect_gpu_bar1_total",
    kind: Gauge,
    unit: Some(Bytes),
    labels: &["device", "gpu", "uuid"],
    help: "Size of the GPU's BAR1, the window GPUDirect RDMA registrations map into.",
    doc: "BAR1 size: the window GPUDirect RDMA registrations map GPU memory into",
};

pub const GPU_BAR1_USED_BYTES: Metric = Metric {
    name: "gpudirect_gpu_bar1_used",
    kind: Gauge,
    unit: Some(Bytes),
    labels: &["device", "gpu", "uuid"],
    help: "BAR1 in use; registrations fail once it is full.",
    doc: "BAR1 in use; registrations fail once it is full (doctor warns at 75%, problem at \
         90%)",
};

pub const GPU_PCIE_LINK_GEN_CURRENT: Metric = Metric {
    name: "gpudirect_gpu_pcie_link_gen_current",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid"],
    help: "PCIe generation the link runs at now.",
    doc: "PCIe generation now, and the most this GPU and host allow",
};

pub const GPU_PCIE_LINK_GEN_MAX: Metric = Metric {
    name: "gpudirect_gpu_pcie_link_gen_max",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid"],
    help: "Highest PCIe generation this GPU and host allow.",
    doc: "PCIe generation now, and the most this GPU and host allow",
};

pub const GPU_PCIE_LINK_WIDTH_CURRENT: Metric = Metric {
    name: "gpudirect_gpu_pcie_link_width_current",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid"],
    help: "PCIe lanes the link runs with now.",
    doc: "lanes now, and the most allowed. GPUs lower the link speed when idle: compare under \
         load",
};

pub const GPU_PCIE_LINK_WIDTH_MAX: Metric = Metric {
    name: "gpudirect_gpu_pcie_link_width_max",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid"],
    help: "Most PCIe lanes this GPU and host allow.",
    doc: "lanes now, and the most allowed. GPUs lower the link speed when idle: compare under \
         load",
};

pub const GPU_PCIE_REPLAYS_TOTAL: Metric = Metric {
    name: "gpudirect_gpu_pcie_replays",
    kind: Counter,
    unit: None,
    labels: &["device", "gpu", "uuid"],
    help: "PCIe link-level replays since the driver loaded (nvmlDeviceGetPcieReplayCounter).",
    doc: "link-level replays since the driver loaded; a rising rate precedes Xid 79 (DCGM \
         warns above 8/min: `rate(...[5m]) * 60 > 8`)",
};

pub const GPU_REMAPPED_ROWS: Metric = Metric {
    name: "gpudirect_gpu_remapped_rows",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid", "cause"],
    help: "HBM rows remapped, by the kind of error that caused it.",
    doc: "HBM rows remapped; cause `correctable`, `uncorrectable`",
};

pub const GPU_ROW_REMAP_PENDING: Metric = Metric {
    name: "gpudirect_gpu_row_remap_pending",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid"],
    help: "1 while a row remapping waits for a GPU reset.",
    doc: "1 while a remapping waits for a GPU reset",
};

pub const GPU_ROW_REMAP_FAILED: Metric = Metric {
    name: "gpudirect_gpu_row_remap_failed",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid"],
    help: "1 when a row remapping failed (no spare rows left).",
    doc: "1 when a remapping failed (no spare row)",
};

pub const GPU_RETIRED_PAGES: Metric = Metric {
    name: "gpudirect_gpu_retired_pages",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid", "cause"],
    help: "Pages retired after ECC errors, by cause.",
    doc: "pages retired (GPUs before Ampere); cause `single_bit`, `double_bit`",
};

pub const GPU_RETIRED_PAGES_PENDING: Metric = Metric {
    name: "gpudirect_gpu_retired_pages_pending",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid"],
    help: "1 while pages wait to be retired.",
    doc: "1 while pages wait to be retired",
};

pub const GPU_ECC_ENABLED: Metric = Metric {
    name: "gpudirect_gpu_ecc_enabled",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid"],
    help: "1 when ECC is on.",
    doc: "1 when ECC is on",
};

pub const GPU_ECC_ERRORS_TOTAL: Metric = Metric {
    name: "gpudirect_gpu_ecc_errors",
    kind: Counter,
    unit: None,
    labels: &["device", "gpu", "uuid", "scope", "error"],
    help: "ECC errors: scope volatile (since driver load) or aggregate (GPU lifetime).",
    doc: "ECC errors; scope `volatile` (since driver load) or `aggregate` (GPU lifetime), \
         error `corrected` or `uncorrected`",
};

pub const GPU_PERSISTENCE_MODE: Metric = Metric {
    name: "gpudirect_gpu_persistence_mode",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid"],
    help: "1 when persistence mode is on.",
    doc: "1 when persistence mode is on",
};

pub const GPU_PERFORMANCE_STATE: Metric = Metric {
    name: "gpudirect_gpu_performance_state",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid"],
    help: "P-state: 0 full performance .. 15 minimum.",
    doc: "P-state, 0 (full performance) to 15",
};

pub const GPU_FACT_UNAVAILABLE: Metric = Metric {
    name: "gpudirect_gpu_fact_unavailable",
    kind: Gauge,
    unit: None,
    labels: &["device", "gpu", "uuid", "fact"],
    help: "1 for each NVML fact this GPU did not give (not supported, no permission).",
    doc: "1 for each fact NVML did not give (`retired_pages_single_bit` on Hopper, ...)",
};

pub const CONTAINERS_FOLDED_TOTAL: Metric = Metric {
    name: "gpudirect_containers_folded",
    kind: Counter,
    unit: None,
    labels: &[],
    help: "Containers reported as container=\\\"other\\\" (past the container label cap).",
    doc: "containers reported as `container=\"other\"` (past the cap of the optional \
         per-container label)",
};

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
