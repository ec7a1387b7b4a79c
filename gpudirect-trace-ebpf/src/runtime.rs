//! Settings the loader writes after load, once it knows what attached
//! (`gpudirect_trace_common::runtime`): which DMA-API operations the hooks
//! report, and how far a scatterlist walk goes. The settings fixed before
//! load are `CONFIG` (emit.rs). Read by the hooks (dmaapi.rs), the
//! scatterlist walk (sg.rs) and the tracepoints alike.

use aya_ebpf::{macros::map, maps::Array};
use gpudirect_trace_common::{runtime, SG_WALK_DEFAULT};

/// Settings written by the loader after load (`gpudirect_trace_common::runtime`).
#[map]
static RUNTIME: Array<u32> = Array::with_max_entries(runtime::COUNT, 0);

/// Whether the hooks report this `hook_ops` operation.
#[inline(always)]
pub fn reports(bit: u32) -> bool {
    RUNTIME.get(runtime::HOOK_OPS).is_some_and(|v| v & bit != 0)
}

/// `--sg-walk-max` (0 until the loader set it: then the default).
#[inline(always)]
pub fn sg_walk_max() -> u32 {
    match RUNTIME.get(runtime::SG_WALK_MAX) {
        Some(&v) if v != 0 => v,
        _ => SG_WALK_DEFAULT,
    }
}

/// How many times the loader has forgotten a removed device's address
/// (`runtime::DEVICES_EPOCH`, wrapping; 0 until the first removal).
#[inline(always)]
pub fn devices_epoch() -> u32 {
    RUNTIME.get(runtime::DEVICES_EPOCH).copied().unwrap_or(0)
}
