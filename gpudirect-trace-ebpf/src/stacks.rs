//! Kernel stacks of DMA-API calls (`--stacks`): the misuse checks show the
//! code that mapped and the code that misused. Off by default: the map
//! then has one entry and no program walks a stack.

use core::ffi::c_void;

use aya_ebpf::{macros::map, maps::StackTrace, EbpfContext};
use gpudirect_trace_common::{maps, stat, AUX_STACK_SHIFT};

use crate::emit::{cfg_stacks, stat_inc};

/// The loader sizes it: `maps::STACKS_CAP` with `--stacks`, else 1.
#[map]
static STACKS: StackTrace = StackTrace::with_max_entries(maps::STACKS_CAP, 0);

/// Any program's context, for the helper (which only passes it on).
struct Raw(*mut c_void);

impl EbpfContext for Raw {
    fn as_ptr(&self) -> *mut c_void {
        self.0
    }
}

/// The current kernel stack's id, shifted into place for a record's `aux`
/// (`AUX_STACK_SHIFT`); 0 without `--stacks` or when it could not be kept
/// (counted: `stat::STACK_LOST`). `ctx` is the program's context.
#[inline(always)]
pub fn take(ctx: *mut c_void) -> u64 {
    if !cfg_stacks() {
        return 0;
    }
    // Flags 0: kernel stack, no frames skipped, a different stack in the
    // same bucket is not reused (ids stay valid for userspace).
    // SAFETY: ctx is the running program's context.
    match unsafe { STACKS.get_stackid(&Raw(ctx), 0) } {
        Ok(id) if id >= 0 => ((id as u64) + 1) << AUX_STACK_SHIFT,
        _ => {
            stat_inc(stat::STACK_LOST);
            0
        }
    }
}
