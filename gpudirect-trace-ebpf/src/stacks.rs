//! Kernel stacks of DMA-API calls (`--stacks`): the misuse checks show the
//! code that mapped and the code that misused. Off by default: the map
//! then has one entry and no program walks a stack.

use core::ffi::c_void;

use aya_ebpf::{macros::map, maps::StackTrace};
use gpudirect_trace_common::{maps, stat, AUX_STACK_SHIFT};

use crate::{ctx::AnyCtx, debug_log::odd, emit::cfg_stacks, stats::stat_inc};

/// The loader sizes it: `maps::STACKS_CAP` with `--stacks`, else 1.
#[map]
static STACKS: StackTrace = StackTrace::with_max_entries(maps::STACKS_CAP, 0);

/// The current kernel stack's id, shifted into place for a record's `aux`
/// (`AUX_STACK_SHIFT`); 0 without `--stacks` or when it could not be kept
/// (counted: `stat::STACK_LOST`). `ctx` is the program's context.
///
/// The stack map keeps one stack per bucket of a hash of its frames (seed
/// 0) and, without BPF_F_REUSE_STACKID, refuses a different stack in a
/// taken bucket (-EEXIST): with ~100 distinct stacks in 8192 buckets, about
/// one stack in 80 (100/8192) is refused; the dma-misuse-module scenario on
/// 6.1 lost cmd_sync_after_unmap's that way. Reusing would make earlier ids name the wrong
/// stack. So a refused stack is tried again without its innermost frame,
/// then two (the program's own frames first: noise to the user): another
/// hash, another bucket. A stack is lost only if all three are taken.
#[inline(always)]
pub fn take(ctx: *mut c_void) -> u64 {
    if !cfg_stacks() {
        return 0;
    }
    // Flags: kernel stack, `skip` innermost frames (BPF_F_SKIP_FIELD_MASK).
    for skip in 0..3u64 {
        // SAFETY: ctx is the running program's context.
        match unsafe { STACKS.get_stackid(&AnyCtx(ctx), skip) } {
            Ok(id) if id >= 0 => return ((id as u64) + 1) << AUX_STACK_SHIFT,
            Err(e) if e == -(EEXIST as i64) => continue,
            _ => break,
        }
    }
    stat_inc(stat::STACK_LOST);
    odd!(
        ctx,
        "--stacks: a kernel stack was not kept (STACKS full, or its buckets taken by \
         other stacks); counted in stacks_lost"
    );
    0
}

/// Where a record's stack comes from, for the calls whose stack waits for
/// the mapping table's word (`stack_mode::SUSPECT`): taken already, or to
/// be taken from the program's context if needed. Not a closure: rustc
/// kept closures as BPF-to-BPF calls (a subprogram each), which cost
/// aggregate-only's unmap ~6-15 ns a hit (bench_program_cost) even where
/// no stack is ever taken.
#[derive(Clone, Copy)]
pub enum Stack {
    Taken(u64),
    From(*mut c_void),
}

impl Stack {
    /// The stack id for the record's `aux` (`take`).
    #[inline(always)]
    pub fn get(self) -> u64 {
        match self {
            Stack::Taken(s) => s,
            Stack::From(ctx) => take(ctx),
        }
    }
}

/// errno EEXIST: the bucket holds a different stack.
const EEXIST: i32 = 17;
