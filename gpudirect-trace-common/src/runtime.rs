/// `hook_ops` bits.
pub const HOOK_OPS: u32 = 0;
/// Data entries walked per scatterlist at most (`--sg-walk-max`).
pub const SG_WALK_MAX: u32 = 1;
/// Bumped (wrapping) by the loader each time it forgets a removed device's
/// address, so that the programs read the name of the next device there
/// afresh instead of trusting what their counter caches imply they know.
pub const DEVICES_EPOCH: u32 = 2;
pub const COUNT: u32 = 3;
