//! What the programs find odd, told to the user through aya-log at debug
//! level (`-v`, `RUST_LOG=debug`): a scatterlist walk cut short, a
//! kretprobe whose entry kept no arguments, a full map. Each of these is
//! also counted (`STATS`, or the record's flags) whether or not it is told.
//!
//! Off unless the loader asks (`Config::debug_log`): `on()` reads the flag
//! from CONFIG, read-only data whose value the verifier knows, so with the
//! flag off the verifier never walks the log call and drops it from the
//! program; it costs the load of the flag. The loader loads without it
//! when a kernel's verifier refuses a program with it.

use crate::emit::cfg_debug_log;

/// The log target of every message: `RUST_LOG=ebpf=debug` shows these alone.
pub const TARGET: &str = "ebpf";

/// Whether the loader asked for the programs' debug messages.
#[inline(always)]
pub fn on() -> bool {
    cfg_debug_log()
}

/// `odd!(ctx, "format", args...)`: a debug message from the program whose
/// context pointer is `ctx`, when `on()`. Arguments are integers (aya-log
/// formats them in userspace).
macro_rules! odd {
    ($ctx:expr, $($msg:tt)+) => {
        if $crate::debug_log::on() {
            aya_log_ebpf::debug!(
                &$crate::ctx::AnyCtx($ctx),
                target: $crate::debug_log::TARGET,
                $($msg)+
            );
        }
    };
}
pub(crate) use odd;
