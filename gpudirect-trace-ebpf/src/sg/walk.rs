//! The scatterlist walk itself: a cursor in the program's scratch slot,
//! one entry per step inline, eight per bpf_loop() iteration
//! (`step_batch`), or jump-free steps on kernels without bpf_loop()
//! (`step_bounded`). `sg` builds the records around it.

use core::ffi::c_void;

use aya_ebpf::helpers::{bpf_loop, bpf_probe_read_kernel};
use gpudirect_trace_common::{BPF_MAX_LOOPS, SG_BOUNDED_REST, SG_LENS, SG_PREFIX};

use crate::{emit::config, runtime::sg_walk_max};

/// `page_link` bit 0: this entry is a chain pointer to the next array.
const SG_CHAIN: u64 = 0x01;
/// `page_link` bit 1: this entry is the last one.
const SG_END: u64 = 0x02;

#[inline(always)]
pub(super) fn read_u64(addr: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_kernel tolerates any address.
    unsafe { bpf_probe_read_kernel(addr as *const u64) }.ok()
}

#[inline(always)]
fn read_2u64(addr: u64) -> Option<[u64; 2]> {
    // SAFETY: as above.
    unsafe { bpf_probe_read_kernel(addr as *const [u64; 2]) }.ok()
}

#[inline(always)]
fn read_u32(addr: u64) -> Option<u32> {
    // SAFETY: as above.
    unsafe { bpf_probe_read_kernel(addr as *const u32) }.ok()
}

/// Where the walk is (in the program's scratch slot). The layout offsets
/// are copied in once: the callback then reads no configuration.
#[repr(C)]
pub struct Cursor {
    /// The next entry to read (0: none).
    sg: u64,
    pub(super) total: u64,
    /// Data entries still allowed: min(nents, sg_walk_max) minus those walked.
    left: u64,
    /// 1 once the walk reached the list's end (SG_END or `nents` entries).
    pub(super) ended: u64,
    /// 1 when `sg_walk_max` < nents: running out of `left` is then a cut,
    /// not the end.
    cut: u64,
    stride: u64,
    page_link: u64,
    /// offsetof(length) when it is not in the entry's first 16 bytes, else 0.
    length: u64,
    /// Bit shift of `length` in the second u64 of the entry's head.
    len_shift: u64,
    /// The entry being read (`step_bounded`).
    head: [u64; 2],
    /// The entries being read (`step_batch`).
    batch: [u64; BATCH_WORDS],
    /// The first data entries' lengths, as the batched walk finds them
    /// (`note_len`); the slots past `SG_LENS` take the writes after it is
    /// full, so that a write needs no branch. Never cleared: only the
    /// first `n_lens` are this walk's, and only those are read.
    lens: [u32; LENS_SLOTS],
    n_lens: u64,
    /// Where `opaque` passes values through.
    tmp: u64,
}

/// What one step found.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A data entry of this length; the walk goes on.
    Data(u32),
    /// A chain entry: the walk continues in the next array.
    Chain,
    /// A data entry of this length that ended the walk.
    Last(u32),
    /// No entry: the walk was over, or the entry could not be read.
    Stop,
}

/// One entry of the walk. Every x86_64 kernel has page_link and length in
/// the entry's first 16 bytes (offsets 0 and 12): one read covers both.
#[inline(always)]
fn step(c: &mut Cursor) -> Step {
    // A NULL list (or chain pointer) has nothing more to walk: its end.
    if c.sg == 0 {
        c.ended = 1;
        return Step::Stop;
    }
    if c.left == 0 {
        return Step::Stop;
    }
    let Some(head) = read_2u64(c.sg + c.page_link) else {
        return Step::Stop;
    };
    let page_link = head[0];
    if page_link & SG_CHAIN != 0 {
        c.sg = page_link & !(SG_CHAIN | SG_END);
        return Step::Chain;
    }
    let len = if c.length == 0 {
        (head[1] >> (c.len_shift & 63)) as u32
    } else {
        match read_u32(c.sg + c.length) {
            Some(l) => l,
            None => return Step::Stop,
        }
    };
    c.total += len as u64;
    c.left -= 1;
    c.sg += c.stride;
    if page_link & SG_END != 0 {
        c.ended = 1;
        return Step::Last(len);
    }
    if c.left == 0 {
        c.ended = 1 - c.cut;
        return Step::Last(len);
    }
    Step::Data(len)
}

/// Entries one bpf_loop() iteration reads at once (`step_batch`), and the
/// bytes it reads: one helper call and one callback for eight entries
/// instead of eight, where those two were most of an entry's ~30 ns.
/// Measured on the CI host (bench_sg_walk, 3 interleaved runs): four at
/// once 12.5 ns per entry at 4096 entries, 12.9-14.1 at 1024, 16.6-17.2 at
/// 128; eight at once 8.0-9.1, 8.6-10.1 and 13.3-17.1. Only lists of at
/// most `LOOP_PREFIX` entries never reach it.
const BATCH: u64 = 8;
const BATCH_WORDS: usize = 40;
const BATCH_BYTES: u32 = 8 * BATCH_WORDS as u32;

/// Up to `BATCH` entries of the walk from one read of the array (a chain
/// entry or the walk's end stops it early); whether the walk goes on. An
/// array's last entries may lie at the end of its memory, where a read of
/// `BATCH_BYTES` can fail: that entry is then read alone (`step`). Lists
/// whose entries do not fit the buffer eight times (no x86_64 kernel:
/// 32 or 40 bytes a piece) or whose length is not in the head take `step`.
#[inline(always)]
fn step_batch(c: &mut Cursor) -> bool {
    let fits = c.length == 0
        && c.stride % 8 == 0
        && c.page_link + (BATCH - 1) * c.stride + 16 <= BATCH_BYTES as u64;
    if !fits || c.sg == 0 || c.left == 0 {
        return step_noting(c);
    }
    // SAFETY: the destination is this CPU's scratch value; the helper
    // tolerates any source address.
    let ret = unsafe {
        aya_ebpf::helpers::gen::bpf_probe_read_kernel(
            c.batch.as_mut_ptr() as *mut c_void,
            BATCH_BYTES,
            (c.sg + c.page_link) as *const c_void,
        )
    };
    if ret < 0 {
        return step_noting(c);
    }
    // One branch a batch, not one an entry: past the first `SG_LENS`
    // lengths the batch keeps none (long lists walk as fast as before the
    // lengths were kept here).
    if c.n_lens < SG_LENS as u64 {
        batch_entries::<true>(c)
    } else {
        batch_entries::<false>(c)
    }
}

/// The entries of one batch read (`step_batch`); `NOTE`: keep their
/// lengths (`note_len`).
#[inline(always)]
fn batch_entries<const NOTE: bool>(c: &mut Cursor) -> bool {
    for i in 0..BATCH {
        let at = ((i * c.stride) / 8) as usize;
        let (Some(&page_link), Some(&second)) = (c.batch.get(at), c.batch.get(at + 1)) else {
            return true;
        };
        if page_link & SG_CHAIN != 0 {
            c.sg = page_link & !(SG_CHAIN | SG_END);
            return true;
        }
        let len = (second >> (c.len_shift & 63)) & 0xffff_ffff;
        c.total += len;
        if NOTE {
            note_len(c, len as u32);
        }
        c.left -= 1;
        c.sg += c.stride;
        if page_link & SG_END != 0 {
            c.ended = 1;
            return false;
        }
        if c.left == 0 {
            c.ended = 1 - c.cut;
            return false;
        }
    }
    true
}

/// `Cursor::lens`' size: a power of two above `SG_LENS`, for the mask.
const LENS_SLOTS: usize = 2 * SG_LENS;

/// Keeps a data entry's length while the cursor has room for it, without a
/// conditional jump (one per entry of the loop's eight multiplied the 6.1
/// verifier's work: the tracer did not load within 120 s). `n_lens` stops
/// at `SG_LENS`; later writes land in slot `SG_LENS`, never read.
#[inline(always)]
fn note_len(c: &mut Cursor, len: u32) {
    let n = c.n_lens;
    // SAFETY: the index is masked into the array.
    unsafe { *c.lens.get_unchecked_mut(n as usize & (LENS_SLOTS - 1)) = len };
    // 1 while n < SG_LENS (n never exceeds it).
    let room = opaque(&mut c.tmp, (n.wrapping_sub(SG_LENS as u64) >> 63) & 1);
    c.n_lens = n + room;
}

/// One `step` of the batched walk, its length kept; whether it goes on.
#[inline(always)]
fn step_noting(c: &mut Cursor) -> bool {
    match step(c) {
        Step::Data(len) => {
            note_len(c, len);
            true
        }
        Step::Last(len) => {
            note_len(c, len);
            false
        }
        Step::Chain => true,
        Step::Stop => false,
    }
}

/// `v`, hidden from the compiler: a volatile store and load through map
/// memory, so that it cannot turn the masks below back into `select`s,
/// which the BPF backend lowers to conditional jumps.
#[inline(always)]
fn opaque(slot: &mut u64, v: u64) -> u64 {
    // SAFETY: `slot` is a field of this CPU's scratch value.
    unsafe {
        core::ptr::write_volatile(slot, v);
        core::ptr::read_volatile(slot)
    }
}

/// One entry of the bounded walk (kernels without bpf_loop()), without
/// conditional jumps: the verifier checks a bounded loop by following every
/// iteration and keeps each branch it did not take pending, and more than
/// 8192 pending branches fail the load ("the sequence of 8193 jumps is too
/// complex"). With one branch per entry (the loop's exit) instead of seven,
/// the walk gets that many more entries. Returns 0 when the walk is over.
#[inline(always)]
fn step_bounded(c: &mut Cursor) -> u64 {
    // SAFETY: the destination is this CPU's scratch value; the helper
    // zeroes it and returns a negative errno where the source is unreadable.
    let ret = unsafe {
        aya_ebpf::helpers::gen::bpf_probe_read_kernel(
            c.head.as_mut_ptr() as *mut c_void,
            16,
            (c.sg + c.page_link) as *const c_void,
        )
    };
    let ok = opaque(&mut c.tmp, ((ret as u64) >> 63) ^ 1);
    let page_link = c.head[0];
    let chain = opaque(&mut c.tmp, page_link & SG_CHAIN & ok);
    let data = opaque(&mut c.tmp, ((page_link & SG_CHAIN) ^ 1) & ok);
    let dmask = 0u64.wrapping_sub(data);
    let cmask = 0u64.wrapping_sub(chain);
    let len = (c.head[1] >> (c.len_shift & 63)) & 0xffff_ffff;
    c.total += len & dmask;
    let left = c.left - data;
    c.left = left;
    // A chain entry jumps, a data entry steps, an unreadable one ends at 0.
    c.sg = ((page_link & !(SG_CHAIN | SG_END)) & cmask) | ((c.sg + c.stride) & dmask);
    let end = (page_link >> 1) & data;
    // 1 when this entry used the last one allowed (`left` < 2^63).
    let spent = (left.wrapping_sub(1) >> 63) & data;
    c.ended |= end | (spent & (c.cut ^ 1));
    ok & (end ^ 1) & (spent ^ 1)
}

/// bpf_loop()'s context, on the caller's stack (ARG_PTR_TO_STACK).
#[repr(C)]
struct LoopCtx {
    cur: *mut Cursor,
}

/// bpf_loop() callback: one step per iteration; 1 stops the loop.
unsafe extern "C" fn loop_step(_index: u32, ctx: *mut c_void) -> i64 {
    // SAFETY: `ctx` is the caller's `LoopCtx` (bpf_loop hands the pointer
    // through unchanged); its cursor is the caller's map value.
    let c = unsafe { &mut *(*(ctx as *mut LoopCtx)).cur };
    i64::from(!step_batch(c))
}

/// Walks the list from `sgl` with the cursor `c`: the first lengths into
/// `lens`, the total into the cursor. Returns how many lengths it wrote and
/// whether the bounded walk used up its steps with the list going on (a
/// continuation may walk on). `LOOP`: the kernel has bpf_loop().
#[inline(always)]
pub(super) fn walk<const LOOP: bool>(
    c: &mut Cursor,
    sgl: u64,
    nents: u32,
    mut lens: Option<&mut [u32; SG_LENS]>,
) -> (u32, bool) {
    let off = config().offsets;
    // From a map, not read-only data: the verifier must not know it (see
    // `runtime`).
    let walk_max = sg_walk_max();
    let (max, cut) = if nents <= walk_max {
        (nents, 0)
    } else {
        (walk_max, 1)
    };
    let in_head =
        off.sg_length >= off.sg_page_link + 8 && off.sg_length + 4 <= off.sg_page_link + 16;
    c.sg = sgl;
    c.total = 0;
    c.left = max as u64;
    c.ended = u64::from(max == 0);
    c.cut = cut;
    c.stride = off.sg_stride as u64;
    c.page_link = off.sg_page_link as u64;
    c.length = if in_head { 0 } else { off.sg_length as u64 };
    c.len_shift = (off.sg_length.wrapping_sub(off.sg_page_link + 8) & 7) as u64 * 8;
    c.head = [0; 2];
    c.tmp = 0;
    if LOOP {
        return walk_looped(c, lens);
    }
    let mut n_lens: u32 = 0;
    // One loop counter only: a second counter that diverges from it at chain
    // entries multiplies the verifier's states past its 1M-instruction limit.
    for i in 0..SG_PREFIX {
        let s = step(c);
        let len = match s {
            Step::Data(l) | Step::Last(l) => l,
            // Chain entries leave a 0 here; userspace skips zero lengths.
            Step::Chain => 0,
            Step::Stop => return (n_lens, false),
        };
        if let Some(lens) = lens.as_deref_mut() {
            if (i as usize) < SG_LENS {
                lens[i as usize] = len;
                n_lens = i + 1;
            }
        }
        if matches!(s, Step::Last(_)) {
            return (n_lens, false);
        }
    }
    (n_lens, walk_bounded(c))
}

/// The walk on kernels with bpf_loop(): `LOOP_PREFIX` entries inline, then
/// eight per read in the loop (one read per entry cost ~17-29 ns per entry
/// of a 16-entry list; bpf_loop() itself more than a one-entry list's
/// inline step). Every length found, the prefix's and the loop's, goes into
/// the cursor, which is copied out whole at the end. The first form of
/// this (c6273a4, reverted) kept lengths with a branch per entry and copied
/// out as many as were found: the 6.1 verifier then did not finish within
/// the VM scenario's 120 s. Measured in the 6.1 VM (sg-many-exact): the
/// copy-out without branches alone still failed; `note_len` without a
/// branch and a single branch per batch load as fast as before (35 s for
/// the whole scenario, two tracers).
#[inline(always)]
fn walk_looped(c: &mut Cursor, lens: Option<&mut [u32; SG_LENS]>) -> (u32, bool) {
    c.n_lens = 0;
    for _ in 0..LOOP_PREFIX {
        match step(c) {
            Step::Data(len) => note_len(c, len),
            // Chain entries leave a 0 here; userspace skips zero lengths.
            Step::Chain => note_len(c, 0),
            Step::Last(len) => {
                note_len(c, len);
                return lens_out(c, lens);
            }
            Step::Stop => return lens_out(c, lens),
        }
    }
    walk_batched(c);
    lens_out(c, lens)
}

/// Copies the cursor's lengths to the record: all `SG_LENS` of them,
/// without a branch on how many were found; the record's `n_lens` says
/// how many are this walk's (userspace reads no more, as with the inline
/// walk, which leaves the rest as they were). Clearing the cursor's
/// lengths first cost ~100 ns on every map (bench_sg_walk, no list: 289
/// against 182 ns), more than the batched reads save on a 16-entry list.
#[inline(always)]
fn lens_out(c: &Cursor, lens: Option<&mut [u32; SG_LENS]>) -> (u32, bool) {
    let Some(lens) = lens else {
        return (0, false);
    };
    lens.copy_from_slice(&c.lens[..SG_LENS]);
    (c.n_lens.min(SG_LENS as u64) as u32, false)
}

/// Entries walked inline before bpf_loop() takes over (kernels with it).
const LOOP_PREFIX: u32 = 2;

/// The rest of the walk in bpf_loop(), `BATCH` entries per iteration.
#[inline(always)]
fn walk_batched(c: &mut Cursor) {
    // Iterations: every data entry left, plus at most one chain entry
    // per data entry (an array holds at least one data entry).
    let left = c.left.saturating_mul(2);
    let n = if left < BPF_MAX_LOOPS as u64 {
        left as u32
    } else {
        BPF_MAX_LOOPS
    };
    let mut ctx = LoopCtx { cur: c };
    // SAFETY: the callback is a static function of the program; the
    // context is this stack frame's, alive for the call.
    unsafe {
        bpf_loop(
            n,
            loop_step as *mut c_void,
            &mut ctx as *mut LoopCtx as *mut c_void,
            0,
        )
    };
}

/// `SG_BOUNDED_REST` jump-free steps; true when they ran out with the walk
/// going on.
#[inline(always)]
pub(super) fn walk_bounded(c: &mut Cursor) -> bool {
    // Lists whose length is not in the entry's head (no such x86_64
    // kernel) are not walked further here: cut, and counted so.
    if c.length != 0 {
        return false;
    }
    for _ in 0..SG_BOUNDED_REST {
        if step_bounded(c) == 0 {
            return false;
        }
    }
    true
}
