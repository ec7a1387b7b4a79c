//! Which source reports each DMA-API operation: the dma:* tracepoints or the
//! hooks on the DMA-API functions (docs/probes.md, "The DMA-API source").

use serde::Serialize;

use super::{ProbeStatus, Status};
use crate::families::dma_api as catalog;

/// `--dma-source`: which programs report DMA-API maps, unmaps, syncs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DmaSource {
    /// The dma:* tracepoints where the kernel has them (6.8+, cheaper),
    /// the hooks on the DMA-API functions for the operations they miss.
    #[default]
    Auto,
    /// Only the dma:* tracepoints (no DMA-API records before 6.8).
    Tracepoints,
    /// Only the hooks, even where the tracepoints exist (for comparing).
    Hooks,
}

/// Which source reports one DMA-API operation (`catalog::DMA_OPS`).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct DmaOpSource {
    pub op: &'static str,
    /// "tracepoint", "hook" or "none".
    pub source: &'static str,
}

/// Which DMA-API operations the hooks report (the `RUNTIME[HOOK_OPS]` bits), and
/// the source of each operation. An operation is the tracepoints' when every
/// one of its tracepoint groups has one attached.
pub(super) fn dma_plan(
    probes: &[ProbeStatus],
    source: DmaSource,
    hooked: u32,
    attach: bool,
) -> (u32, Vec<DmaOpSource>) {
    let attached = |name: &str| {
        probes
            .iter()
            .any(|p| p.name == name && p.status == Status::Attached)
    };
    let mut mask = 0;
    let mut plan = Vec::new();
    for op in catalog::DMA_OPS {
        // An operation no tracepoint reports (the IOVA API) is never theirs.
        let by_tp = !op.tracepoints.is_empty()
            && op
                .tracepoints
                .iter()
                .all(|group| group.iter().any(|tp| attached(tp)));
        let hook = match source {
            DmaSource::Auto => !by_tp || (op.prefer_hook && hooked & op.bit != 0),
            DmaSource::Hooks => true,
            DmaSource::Tracepoints => false,
        };
        // Only hooks that exist are asked (the IOVA API has no tracepoint,
        // and no hook either on a kernel that refuses them).
        if hook && (hooked & op.bit != 0 || !attach) {
            mask |= op.bit;
        }
        let src = if by_tp && !(hook && hooked & op.bit != 0) {
            "tracepoint"
        } else if hook && (hooked & op.bit != 0 || !attach) {
            "hook"
        } else {
            "none"
        };
        plan.push(DmaOpSource {
            op: op.name,
            source: src,
        });
    }
    (mask, plan)
}
