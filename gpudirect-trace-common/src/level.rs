pub const DMA_API: usize = 0;
pub const IOMMU: usize = 1;
pub const INNER: usize = 2;
/// Interrupt handlers (IOMMU fault IRQ), which run on top of whatever
/// task they interrupt and must not disturb its levels.
pub const IRQ: usize = 3;
/// A driver's own DMA entry points (NVIDIA nv_dma_*, nvidia_p2p_*), which
/// call into the DMA API.
pub const DRIVER: usize = 4;
pub const COUNT: usize = 5;
/// Calls in flight per level and task: the task's own, plus one made by
/// an interrupt handler that interrupted it mid-call (interrupts nest
/// strictly, so the later entry always exits first).
pub const NEST: usize = 2;
