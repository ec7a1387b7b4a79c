//! The timing hooks' per-task state, shared by the programs (`TASKS`) and
//! the loader (its map's value type).

use crate::level;

/// Per-task state of the timed operations in flight (`TASKS`, LRU hash keyed
/// by thread id). Also how iommu:map/unmap events learn their device.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskState {
    /// Entry time per level and nesting depth; 0 when nothing is in flight.
    pub ts: [[u64; level::NEST]; level::COUNT],
    /// Device per level and depth (0: unknown).
    pub dev: [[u64; level::NEST]; level::COUNT],
    /// Address argument per level and depth, when the function has one.
    pub addr: [[u64; level::NEST]; level::COUNT],
    /// Arguments 1 to 5 of the DMA-API call in flight per depth, kept by
    /// the kprobe entry for its kretprobe (which sees only the return value).
    pub args: [[u64; DMA_ARGS]; level::NEST],
    /// Per depth, 1 when the DMA-API call in flight is itself IOMMU work
    /// (`op::is_iommu_work`): the invalidations inside it are nested time.
    pub iommu_work: [u64; level::NEST],
}

/// Arguments kept per DMA-API call for the kretprobe (arg 0, the device, is
/// in `TaskState::dev`).
pub const DMA_ARGS: usize = 5;

const _: () = assert!(
    core::mem::size_of::<TaskState>()
        == 3 * 8 * level::NEST * level::COUNT + 8 * DMA_ARGS * level::NEST + 8 * level::NEST
);
