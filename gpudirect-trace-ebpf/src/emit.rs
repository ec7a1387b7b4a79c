//! Building events and handing them to userspace: the ring buffer for the
//! event stream, per-CPU maps for counters that need no streaming.

use aya_ebpf::{
    bindings::{BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        bpf_probe_read_kernel, gen::bpf_this_cpu_ptr,
    },
    macros::map,
    maps::{PerCpuArray, PerCpuHashMap, RingBuf},
};
use gpudirect_trace_common::{
    flags, kind, maps, stat, Config, Counter, CounterKey, CpuState, Event, COUNTER_FROM_HOOK,
    COUNTER_IOVA, COUNTER_SLOTS, PREEMPT_COUNT_KSYM, PREEMPT_IRQ_MASK, RARE_WAKE_GAP_NS,
};

use crate::{
    device::remember_device,
    runtime::devices_epoch,
    stats::{atomic_add, stat_inc},
};

/// Settings patched in by the loader (`EbpfLoader::set_global`).
#[no_mangle]
static CONFIG: Config = Config::DEFAULT;

/// The event stream. Its size is set by the loader (`--ring-size`).
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(maps::EVENTS_DEFAULT_BYTES, 0);

/// Hits per event kind, whether streamed or not.
#[map]
static HITS: PerCpuArray<u64> = PerCpuArray::with_max_entries(kind::COUNT, 0);

/// Per (device, kind, direction) event and byte counts: the aggregate that
/// survives any ring buffer overflow.
#[map]
static DEV_COUNTERS: PerCpuHashMap<CounterKey, Counter> =
    PerCpuHashMap::with_max_entries(maps::DEV_COUNTERS_CAP, 0);

#[inline(always)]
pub fn config() -> Config {
    // SAFETY: CONFIG is plain data in .rodata; the volatile read stops the
    // compiler from folding the default values into the code.
    unsafe { core::ptr::read_volatile(&CONFIG) }
}

// Single fields of CONFIG for the hot path: a volatile read of the whole
// struct loads every field (a dozen loads per call).

#[inline(always)]
pub fn cfg_stream() -> bool {
    // SAFETY: as in `config`.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(CONFIG.stream)) != 0 }
}

#[inline(always)]
pub fn cfg_track_lifetimes() -> u32 {
    // SAFETY: as in `config`.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(CONFIG.track_lifetimes)) }
}

#[inline(always)]
pub fn cfg_lifetime_sample_mask() -> u32 {
    // SAFETY: as in `config`.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(CONFIG.lifetime_sample_mask)) }
}

#[inline(always)]
pub fn cfg_stacks() -> bool {
    // SAFETY: as in `config`.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(CONFIG.stacks)) != 0 }
}

/// `stack_mode::SUSPECT`: an unmap or single sync whose mapping the table
/// holds as it should takes no stack.
#[inline(always)]
pub fn cfg_stack_filter() -> bool {
    // SAFETY: as in `config`.
    unsafe {
        core::ptr::read_volatile(core::ptr::addr_of!(CONFIG.stacks))
            == gpudirect_trace_common::stack_mode::SUSPECT
    }
}

#[inline(always)]
pub fn cfg_debug_log() -> bool {
    // SAFETY: as in `config`.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(CONFIG.debug_log)) != 0 }
}

#[inline(always)]
fn cfg_wakeup_bytes() -> u64 {
    // SAFETY: as in `config`.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(CONFIG.wakeup_bytes)) }
}

#[inline(always)]
pub fn lost() {
    stat_inc(stat::RINGBUF_LOST);
}

#[inline(always)]
pub fn count(k: u16) {
    count_n(k, 1);
}

/// `n` hits of kind `k` that no counter could take.
#[inline(always)]
fn count_n(k: u16, n: u64) {
    if let Some(slot) = HITS.get_ptr_mut(k as u32) {
        atomic_add(slot, n);
    }
}

/// The common part of every event: kind and device. Time and task are
/// stamped only when the event is streamed (`stamp`), and the device's name
/// is read only when a counter for it is created (`add_counter`): an
/// aggregate-only hit then costs no helper call beyond its counter update.
#[inline(always)]
pub fn base_event(k: u16, dev: u64, extra_flags: u16) -> Event {
    Event {
        kind: k,
        flags: if dev == 0 {
            extra_flags | flags::NO_DEVICE
        } else {
            extra_flags
        },
        dir: 0,
        ts_ns: 0,
        pid: 0,
        tid: 0,
        dev,
        addr: 0,
        phys: 0,
        size: 0,
        aux: 0,
    }
}

/// Time and task of an event about to be streamed.
#[inline(always)]
pub fn stamp(ev: &mut Event) {
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: helper without preconditions.
    ev.ts_ns = unsafe { bpf_ktime_get_ns() };
    ev.pid = (pid_tgid >> 32) as u32;
    ev.tid = pid_tgid as u32;
    if in_interrupt() {
        ev.flags |= flags::IN_INTERRUPT;
    }
}

/// Whether this program runs in interrupt context, from the kernel's
/// preempt count. Where the kernel's BTF has the count as a per-CPU
/// variable (and kallsyms lists its name), the loader made
/// `PREEMPT_COUNT_KSYM` a typed ksym of it: this CPU's copy is then
/// `bpf_this_cpu_ptr()`, an add of the CPU's offset, and a plain load. Else,
/// read at kallsyms' address:
/// `per_cpu(preempt_count, cpu)`, i.e. the per-CPU address
/// plus `__per_cpu_offset[cpu]` (the same sum for zero-based per-CPU
/// symbols before 6.15 and for relocated ones after), computed once per
/// CPU into `CpuState::preempt_count_at`. Then one 4-byte kernel read per
/// record (two cost 51 ns net in `bench_hot_path_parts`). False where
/// userspace found no addresses.
#[inline(always)]
fn in_interrupt() -> bool {
    // SAFETY: as in `config`.
    let (ksym, member) = unsafe {
        (
            core::ptr::read_volatile(core::ptr::addr_of!(CONFIG.preempt_count_ksym)),
            core::ptr::read_volatile(core::ptr::addr_of!(CONFIG.preempt_count_member)),
        )
    };
    if ksym != 0 {
        // SAFETY: the loader made the constant the BTF id of a per-CPU
        // variable holding a u32 at `member` (the verifier checks both: a
        // typed pointer, the load inside the variable's type).
        let pc = unsafe {
            let this_cpu = bpf_this_cpu_ptr(PREEMPT_COUNT_KSYM as *const _);
            core::ptr::read_volatile(this_cpu.cast::<u8>().add(member as usize).cast::<u32>())
        };
        return pc & PREEMPT_IRQ_MASK != 0;
    }
    // SAFETY: as in `config`.
    let (offsets, count) = unsafe {
        (
            core::ptr::read_volatile(core::ptr::addr_of!(CONFIG.per_cpu_offset_ptr)),
            core::ptr::read_volatile(core::ptr::addr_of!(CONFIG.preempt_count_ptr)),
        )
    };
    if offsets == 0 || count == 0 {
        return false;
    }
    let st = cpu_state();
    if st.is_null() {
        return false;
    }
    // SAFETY: this CPU's value; a nested program computes the same address.
    let mut at = unsafe { (*st).preempt_count_at };
    if at == 0 {
        // SAFETY: helper without preconditions.
        let cpu = u64::from(unsafe { bpf_get_smp_processor_id() });
        // SAFETY: bpf_probe_read_kernel checks the address.
        let Ok(base) = (unsafe { bpf_probe_read_kernel((offsets + cpu * 8) as *const u64) }) else {
            return false;
        };
        at = count.wrapping_add(base);
        // SAFETY: as above.
        unsafe { (*st).preempt_count_at = at };
    }
    // SAFETY: as above.
    match unsafe { bpf_probe_read_kernel(at as *const u32) } {
        Ok(pc) => pc & PREEMPT_IRQ_MASK != 0,
        Err(_) => false,
    }
}

/// Per-CPU bookkeeping of the hot path, in one map value so that a hot
/// event looks it up once (`emit_hot`): nesting depth, wake-up checks and
/// the counter cache (`gpudirect_trace_common::COUNTER_CACHE`).
#[map]
static CPU_STATE: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's state (null only if the map lookup failed); the lifetime
/// sampler looks it up where no `emit_hot` handed it over.
#[inline(always)]
pub fn cpu_state() -> *mut CpuState {
    CPU_STATE.get_ptr_mut(0).unwrap_or(core::ptr::null_mut())
}

/// Records between two looks at the ring's backlog.
const WAKE_CHECK_EVERY: u64 = 16;

/// Wake the reader once per `wakeup_bytes` of backlog. (Forcing a wake-up
/// for every record above the threshold costs the traced CPU an irq_work
/// each until the reader catches up: measured ~3.5 us per event.) Every
/// `WAKE_CHECK_EVERY`th record of a CPU looks at the backlog (the query
/// costs ~14 ns, a quarter of streaming's own work) and wakes the reader if
/// the backlog crossed the threshold since that CPU's previous look; the
/// reader also drains on its own timer, so nothing waits longer than that.
/// Rare events wake it at once (`rare_wake_flag`).
#[inline(always)]
pub fn wake_flag() -> u64 {
    wake_flag_in(cpu_state())
}

/// The submit flag of a rare event stamped `ts`: a forced wake-up, unless
/// this CPU forced one less than `RARE_WAKE_GAP_NS` before (then the record
/// waits for the reader's next drain, as a hot one does). A preempting
/// program that races the plain update only forces one wake-up more or
/// one fewer; the reader's timer bounds the wait either way.
#[inline(always)]
pub fn rare_wake_flag(ts: u64) -> u64 {
    rare_wake_flag_in(ts, cpu_state())
}

#[inline(always)]
fn rare_wake_flag_in(ts: u64, st: *mut CpuState) -> u64 {
    if st.is_null() {
        return BPF_RB_FORCE_WAKEUP as u64;
    }
    // SAFETY: this CPU's value (see above for why a plain update is enough).
    let last = unsafe { &mut (*st).rare_woke_ns };
    if *last != 0 && ts.wrapping_sub(*last) < RARE_WAKE_GAP_NS {
        return BPF_RB_NO_WAKEUP as u64;
    }
    *last = ts;
    BPF_RB_FORCE_WAKEUP as u64
}

#[inline(always)]
fn wake_flag_in(st: *mut CpuState) -> u64 {
    if st.is_null() {
        return BPF_RB_NO_WAKEUP as u64;
    }
    // SAFETY: this CPU's value. A nested program may interleave with these
    // plain updates: that only shifts when the next look happens.
    let w = unsafe { &mut *st };
    w.records += 1;
    if w.records % WAKE_CHECK_EVERY != 0 {
        return BPF_RB_NO_WAKEUP as u64;
    }
    let avail = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    let before = w.last_avail;
    w.last_avail = avail;
    let threshold = cfg_wakeup_bytes();
    if avail >= threshold && before < threshold {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

/// Counts the event in `DEV_COUNTERS`, from a program that runs with
/// preemption disabled (a tracepoint's). Plain adds into the copy of the
/// counter that belongs to this nesting depth: an interrupt's program that
/// lands mid-update takes the next copy, so no increment is lost, and the
/// two atomic adds per event (~28 ns of the ~60 ns an update cost) are
/// saved. These counts are also the per-kind hit counts (userspace sums
/// them by kind); `HITS` only takes what no counter could hold.
#[inline(always)]
pub fn add_counter(ev: &Event) {
    add_counter_in(ev, cpu_state());
}

#[inline(always)]
fn add_counter_in(ev: &Event, st: *mut CpuState) {
    if st.is_null() {
        return add_counter_atomic(ev);
    }
    // SAFETY: this CPU's value; see above for why plain accesses are enough.
    let depth = unsafe { core::ptr::addr_of_mut!((*st).depth) };
    // SAFETY: as above.
    let d = unsafe { *depth };
    if d >= u64::from(COUNTER_SLOTS - 1) {
        return add_counter_atomic(ev);
    }
    // SAFETY: as above.
    unsafe { *depth = d + 1 };
    if d == 0 {
        cached_add(ev, st);
    } else if let Some(c) = counter(ev, d as u32) {
        // SAFETY: this depth's copy: no other writer until we return.
        unsafe {
            (*c).count += 1;
            (*c).bytes += ev.size;
        }
    }
    // SAFETY: as above.
    unsafe { *depth = d };
}

/// Runs `f` on this CPU's state with the CPU to itself, for a tracepoint
/// program (preemption off) at nesting depth 0: the depth is raised while
/// `f` runs, so an interrupt's program that lands meanwhile finds it
/// non-zero and takes its own fallback instead of interleaving plain
/// updates. False (and `f` not run) when the state is in use or missing;
/// else what `f` returns.
#[inline(always)]
pub fn with_cpu_to_itself(f: impl FnOnce(&mut CpuState) -> bool) -> bool {
    let st = cpu_state();
    if st.is_null() {
        return false;
    }
    // SAFETY: this CPU's value; the volatile depth writes keep the compiler
    // from moving `f`'s writes outside the raised depth.
    unsafe {
        let depth = core::ptr::addr_of_mut!((*st).depth);
        if core::ptr::read_volatile(depth) != 0 {
            return false;
        }
        core::ptr::write_volatile(depth, 1);
        let done = f(&mut *st);
        core::ptr::write_volatile(depth, 0);
        done
    }
}

/// Counts the event in this CPU's counter cache, from the outermost
/// tracepoint program (depth 0: nothing else writes this CPU's cache until
/// it returns). A key that takes a slot from another moves the other's
/// counts into `DEV_COUNTERS` (slot 0, this depth's copy) first. Writes are
/// ordered so that userspace, which reads the cache and the hash while we
/// run, may see counts late but never twice: the old counts leave the
/// cache before they reach the hash, and a new key is set before its counts.
#[inline(always)]
fn cached_add(ev: &Event, st: *mut CpuState) {
    let key = counter_key(ev, 0);
    let i = key.cache_index();
    // SAFETY: this CPU's value (see above); `i` is below COUNTER_CACHE.
    unsafe {
        let keys = core::ptr::addr_of_mut!((*st).cache_keys);
        let slots = core::ptr::addr_of_mut!((*st).cache);
        let named = core::ptr::addr_of_mut!((*st).cache_named);
        let (Some(k), Some(c), Some(n)) =
            ((*keys).get_mut(i), (*slots).get_mut(i), (*named).get_mut(i))
        else {
            return;
        };
        let epoch = devices_epoch();
        if *k == key {
            if *n != epoch {
                // The loader forgot a removed device's address since this
                // slot last made sure of the name: the device here may be
                // a new one, whose name the loader needs.
                remember_device(ev.dev, &config().offsets);
                *n = epoch;
            }
            c.count += 1;
            c.bytes += ev.size;
            return;
        }
        let (old_key, old) = (*k, *c);
        core::ptr::write_volatile(c, Counter::default());
        if old.count != 0 {
            match hash_counter(&old_key, false) {
                Some(h) => {
                    (*h).count += old.count;
                    (*h).bytes += old.bytes;
                }
                None => count_n(old_key.kind as u16, old.count),
            }
        }
        // A key new to this CPU's cache: make sure its device is named
        // (the hash does it when it creates a counter).
        remember_device(ev.dev, &config().offsets);
        *n = epoch;
        core::ptr::write_volatile(k, key);
        core::ptr::write_volatile(
            c,
            Counter {
                count: 1,
                bytes: ev.size,
            },
        );
    }
}

/// Counts the event from any context (fentry/fexit programs can be
/// preempted mid-update by another task on the same CPU): atomic adds into
/// the last copy, which no plain writer uses.
#[inline(always)]
pub fn add_counter_atomic(ev: &Event) {
    if let Some(c) = counter(ev, COUNTER_SLOTS - 1) {
        // SAFETY: map value pointer; fields are u64.
        unsafe {
            atomic_add(core::ptr::addr_of_mut!((*c).count), 1);
            atomic_add(core::ptr::addr_of_mut!((*c).bytes), ev.size);
        }
    }
}

/// `add_counter_atomic` for an event that stands for `n` operations (a
/// dma_iova_destroy ends every link of its state): `n` counts, the event's
/// bytes once.
#[inline(always)]
pub fn add_counter_atomic_n(ev: &Event, n: u64) {
    if let Some(c) = counter(ev, COUNTER_SLOTS - 1) {
        // SAFETY: map value pointer; fields are u64.
        unsafe {
            atomic_add(core::ptr::addr_of_mut!((*c).count), n);
            atomic_add(core::ptr::addr_of_mut!((*c).bytes), ev.size);
        }
    }
}

/// The key of the event's counter in nesting copy `slot`.
#[inline(always)]
fn counter_key(ev: &Event, slot: u32) -> CounterKey {
    let mut key = CounterKey::new(ev.dev, ev.kind, slot, ev.dir);
    if ev.flags & flags::FROM_HOOK != 0 {
        key.kind |= COUNTER_FROM_HOOK;
    }
    if ev.flags & flags::IOVA != 0 {
        key.kind |= COUNTER_IOVA;
    }
    key
}

/// This CPU's copy `slot` of the event's counter, created (and the device's
/// name learnt) on first use; None (and the hit kept in `HITS`) if the map
/// is full.
#[inline(always)]
fn counter(ev: &Event, slot: u32) -> Option<*mut Counter> {
    if devices_epoch() != 0 {
        // A removed device's address was forgotten this session: these
        // paths keep no per-key memory of when they last named a device,
        // so after the first removal they make sure on every event (one
        // DEVICES lookup; nested and fentry programs only).
        remember_device(ev.dev, &config().offsets);
    }
    let c = hash_counter(&counter_key(ev, slot), true);
    if c.is_none() {
        count(ev.kind);
    }
    c
}

/// The counter of `key` in `DEV_COUNTERS`, created on first use (learning
/// the device's name if `name` is set: the caller knows it is not known
/// yet); None if the map is full.
#[inline(always)]
fn hash_counter(key: &CounterKey, name: bool) -> Option<*mut Counter> {
    if let Some(c) = DEV_COUNTERS.get_ptr_mut(key) {
        return Some(c);
    }
    if name {
        remember_device(key.dev, &config().offsets);
    }
    // Insert zero and add after, so that an interrupting insert of the same
    // key (which makes ours fail with EEXIST) loses nothing.
    let _ = DEV_COUNTERS.insert(key, &Counter::default(), BPF_NOEXIST as u64);
    DEV_COUNTERS.get_ptr_mut(key)
}

/// A high-rate event from a tracepoint program: counted in maps always,
/// streamed unless aggregate-only.
#[inline(always)]
pub fn emit_hot(ev: &mut Event) -> *mut CpuState {
    // One per-CPU state lookup serves the counter, the stream and the
    // caller (the lifetime sampler).
    let st = cpu_state();
    add_counter_in(ev, st);
    stream_hot(ev, st);
    st
}

/// `emit_hot` for programs that may be preempted (fentry/fexit).
#[inline(always)]
pub fn emit_hot_any(ev: &mut Event) -> *mut CpuState {
    add_counter_atomic(ev);
    let st = cpu_state();
    stream_hot(ev, st);
    st
}

/// Streams a hot event already counted (`add_counter_atomic_n`).
#[inline(always)]
pub fn stream_hot_any(ev: &mut Event) {
    stream_hot(ev, cpu_state());
}

#[inline(always)]
fn stream_hot(ev: &mut Event, st: *mut CpuState) {
    if cfg_stream() {
        stamp(ev);
        output_in::<_, false>(ev, 0, st);
    }
}

/// A rare, important event (faults, group changes): always streamed, and it
/// wakes the reader at once (at most once a millisecond a CPU:
/// `rare_wake_flag`).
#[inline(always)]
pub fn emit_rare(ev: &mut Event) {
    rare::<false>(ev);
}

/// `emit_rare` for programs that may be preempted (fentry/fexit).
#[inline(always)]
pub fn emit_rare_any(ev: &mut Event) {
    rare::<true>(ev);
}

/// `ATOMIC`: the counter add must be atomic (a preemptible program).
#[inline(always)]
fn rare<const ATOMIC: bool>(ev: &mut Event) {
    if !remember_device(ev.dev, &config().offsets) {
        ev.flags |= flags::NO_DEVICE;
    }
    if ATOMIC {
        add_counter_atomic(ev);
    } else {
        add_counter(ev);
    }
    stamp(ev);
    output_in::<_, true>(ev, ev.ts_ns, cpu_state());
}

/// Streams `ev`; `RARE`: a rare event stamped `ts` (its wake-up policy),
/// else a hot one. The flag is chosen after the write, where the hot path
/// always chose it (the order its benchmarks measured).
#[inline(always)]
fn output_in<T: 'static + Copy, const RARE: bool>(ev: &T, ts: u64, st: *mut CpuState) {
    match EVENTS.reserve::<T>(0) {
        Some(mut entry) => {
            entry.write(*ev);
            entry.submit(if RARE {
                rare_wake_flag_in(ts, st)
            } else {
                wake_flag_in(st)
            });
        }
        None => lost(),
    }
}

/// Stream a larger record that lives in map memory (scatter-gather events):
/// bpf_ringbuf_output copies it without a trip through the stack.
#[inline(always)]
pub fn output_hot<T: 'static>(ev: &T) {
    if EVENTS.output(ev, wake_flag()).is_err() {
        lost();
    }
}
