//! The NVIDIA family: Xids (nvidia:nvidia_dev_xid, the driver's own
//! tracepoint), the driver's DMA paths and the GPUDirect RDMA peer-to-peer
//! API timed (nv-dma.c, nv-p2p.c), and the GPUs as NVML sees them.

pub mod metrics;

use crate::catalog::{ProbeKind, ProbeSpec, Provider, TimingSpec};

pub const TRACEPOINTS: &[ProbeSpec] = &[ProbeSpec {
    name: "nvidia:nvidia_dev_xid",
    kind: ProbeKind::RawTracepoint,
    program: "nvidia_dev_xid",
    provider: Provider::Module("nvidia"),
    args_read: 3,
    available: "NVIDIA driver (open and proprietary kernel modules) with nv-tracepoint.h",
    fallback: "`NVRM: Xid` lines in the kernel log",
    hot: false,
}];

/// The NVIDIA driver's DMA paths (kernel-open/nvidia/nv-dma.c) and the
/// GPUDirect RDMA peer-to-peer API (nv-p2p.c). Level `DRIVER`: each calls
/// into the DMA API, whose own hooks time the inner part.
macro_rules! nv {
    ($name:literal, $slot:literal, $func:literal) => {
        TimingSpec {
            name: $name,
            slot: $slot,
            candidates: &[$func],
            available: "NVIDIA driver (open and proprietary modules) with module BTF",
            module: Some("nvidia"),
            ..TimingSpec::BASE
        }
    };
}

pub const NVIDIA_TIMING: &[TimingSpec] = &[
    nv!("time:nv_dma_map_sgt", "nv_map_sgt", "nv_dma_map_sgt"),
    nv!("time:nv_dma_map_alloc", "nv_map_alloc", "nv_dma_map_alloc"),
    nv!(
        "time:nv_dma_unmap_alloc",
        "nv_unmap_alloc",
        "nv_dma_unmap_alloc"
    ),
    nv!("time:nv_dma_map_peer", "nv_map_peer", "nv_dma_map_peer"),
    nv!(
        "time:nv_dma_unmap_peer",
        "nv_unmap_peer",
        "nv_dma_unmap_peer"
    ),
    nv!("time:nv_dma_map_mmio", "nv_map_mmio", "nv_dma_map_mmio"),
    nv!(
        "time:nvidia_p2p_get_pages",
        "p2p_get",
        "nvidia_p2p_get_pages"
    ),
    nv!(
        "time:nvidia_p2p_put_pages",
        "p2p_put",
        "nvidia_p2p_put_pages"
    ),
    nv!(
        "time:nvidia_p2p_dma_map_pages",
        "p2p_map",
        "nvidia_p2p_dma_map_pages"
    ),
    nv!(
        "time:nvidia_p2p_dma_unmap_pages",
        "p2p_unmap",
        "nvidia_p2p_dma_unmap_pages"
    ),
];

/// Probe name of `selftest module-hook`'s stand-in: the nv_dma_map_sgt
/// slot's programs on another module's function.
pub const STANDIN_NAME: &str = "selftest:module-hook";

/// The stand-in spec for `module`'s `function` (leaked: made once per run).
pub fn standin_spec(module: &str, function: &str) -> &'static TimingSpec {
    let module: &'static str = Box::leak(module.to_owned().into_boxed_str());
    let function: &'static str = Box::leak(function.to_owned().into_boxed_str());
    Box::leak(Box::new(TimingSpec {
        name: STANDIN_NAME,
        slot: NVIDIA_TIMING[0].slot,
        candidates: Box::leak(Box::new([function])),
        available: "self-test only",
        module: Some(module),
        ..TimingSpec::BASE
    }))
}
pub const FAMILY: super::Family = super::Family {
    name: "nvidia",
    tracepoints: TRACEPOINTS,
    hooks: &[NVIDIA_TIMING],
    metrics: metrics::METRICS,
};
