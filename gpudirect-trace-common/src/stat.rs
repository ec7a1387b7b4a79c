/// Ring buffer reservations that failed: events lost before userspace.
pub const RINGBUF_LOST: u32 = 0;
/// Device names that could not be read (null or bad pointer).
pub const DEVICE_NAME_FAILED: u32 = 1;
/// Insertions into the DEVICES map that failed (map full).
pub const DEVICE_MAP_FULL: u32 = 2;
/// Timed calls not timed because both nesting slots of their level were
/// in flight (`level::NEST`).
pub const TIMING_NEST_FULL: u32 = 3;
/// Unmaps whose mapping was not in `MAPPINGS` (mapped before the trace
/// began, or not tracked because the table was full): no lifetime.
pub const LIFETIME_UNMATCHED: u32 = 4;
/// DMA-API mappings not tracked in `MAPPINGS` because it was full.
pub const MAPPINGS_FULL: u32 = 5;
/// DMA-API maps the kretprobe could not report: its kprobe entry kept
/// no arguments (both nesting slots busy, or the entry was missed).
pub const HOOK_ARGS_MISSING: u32 = 6;
/// DMA-API calls whose kernel stack could not be kept (`--stacks`: the
/// stack map full, or a hash collision with another stack).
pub const STACK_LOST: u32 = 7;
/// Runs of the kprobe/kretprobe programs the loader attaches (not their
/// tail-called continuations). The kernel counts every hit of a kprobe made
/// through tracefs (kprobe_profile's nhit); a hit whose program the kernel
/// then skipped (bpf_prog_active: the probe fired inside another kprobe
/// program or a bpf() map call on that CPU) is nhit minus these runs. Linux
/// before 6.7 counts such skips nowhere else.
pub const KPROBE_RUNS: u32 = 8;
/// IOVA-API states not tracked because `IOVA_STATES` was full: their
/// destroy then counts no unmaps for their links.
pub const IOVA_STATES_FULL: u32 = 9;
pub const COUNT: u32 = 10;
