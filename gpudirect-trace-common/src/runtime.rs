/// `hook_ops` bits.
pub const HOOK_OPS: u32 = 0;
/// Data entries walked per scatterlist at most (`--sg-walk-max`).
pub const SG_WALK_MAX: u32 = 1;
pub const COUNT: u32 = 2;
