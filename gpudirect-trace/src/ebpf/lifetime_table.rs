//! The form of the in-kernel mapping table (aggregate-only lifetimes) that
//! this kernel gets, and reading it back.
//!
//! The slot table (`gpudirect_trace_common::lifetime::SLOTS`) claims slots
//! with BPF_CMPXCHG, which kernels before 5.12 lack. Those kernels reject
//! any program holding the instruction at load, reachable or not (an early
//! pass over every instruction: "BPF_STX uses reserved fields"), and every
//! DMA-API program holds it. So the loader asks the kernel (a four-line
//! program that uses it: by capability, never by version); without it, the
//! hash form is configured, which the verifier then prunes the slot code
//! away for (the form is read-only data it knows), and each compare-and-
//! exchange in the object is rewritten into the atomic add that those
//! kernels accept, so that the early pass lets the programs through.

use std::os::fd::AsFd as _;

use anyhow::Context as _;
use aya::maps::MapData;
use gpudirect_trace_common::{
    lifetime::{self, SLOT_COUNT},
    stack_mode, MapKey, MapSlot, MapValue,
};

use super::sys::{self, insn, MapView};

/// `BPF_STX | BPF_ATOMIC | BPF_DW` and `| BPF_W`: the atomic instructions.
const ATOMIC_DW: u8 = 0xdb;
const ATOMIC_W: u8 = 0xc3;
/// The atomic instruction's `imm` for compare-and-exchange (BPF_CMPXCHG),
/// and for a plain add (BPF_ADD, the one form kernels before 5.12 take).
const CMPXCHG: i32 = 0xf1;
const ADD: i32 = 0x00;

/// Whether the kernel takes BPF_CMPXCHG, asked with a socket filter that
/// exchanges a stack slot.
pub fn kernel_has_bpf_atomics() -> bool {
    #[rustfmt::skip]
    let insns: [u64; 6] = [
        insn(0x7a, 10, 0, -8, 0),       // *(u64 *)(r10 - 8) = 0
        insn(0xb7, 0, 0, 0, 0),         // r0 = 0
        insn(0xb7, 1, 0, 0, 1),         // r1 = 1
        insn(ATOMIC_DW, 10, 1, -8, CMPXCHG), // r0 = cmpxchg(r10 - 8, r0, r1)
        insn(0xb7, 0, 0, 0, 0),         // r0 = 0
        insn(0x95, 0, 0, 0, 0),         // exit
    ];
    // BPF_PROG_TYPE_SOCKET_FILTER
    sys::prog_load_insns(1, &insns).is_ok()
}

/// The programs' sampling mask (`Config::lifetime_sample_mask`) for one
/// mapping in `sample` timed: 0 (every one) without lifetimes or without
/// jiffies to date the untimed ones by (`jiffies::JiffyClock`).
pub fn sample_mask(form: u32, sample: u32, jiffies: bool) -> u32 {
    if form == lifetime::OFF || !jiffies {
        return 0;
    }
    sample.max(1).next_power_of_two() - 1
}

/// What a user is told about the sampling in use.
pub fn describe_sample(form: u32, mask: u32, jiffies: bool) -> String {
    match (form, mask) {
        (lifetime::OFF, _) => "off".into(),
        (_, 0) if !jiffies => {
            "every mapping timed (programs cannot read jiffies here to date the others)".into()
        }
        (_, 0) => "every mapping timed".into(),
        (_, m) => format!(
            "1 in {} mappings timed at random; every mapping counted and dated",
            u64::from(m) + 1
        ),
    }
}

/// The table form for a session that `wants` one (aggregate-only with
/// lifetimes, or streaming's stack filter): the slot table where the kernel
/// has BPF atomics.
pub fn form(wanted: bool, atomics: bool) -> u32 {
    match (wanted, atomics) {
        (false, _) => lifetime::OFF,
        (true, true) => lifetime::SLOTS,
        (true, false) => lifetime::HASH,
    }
}

/// `Config::stacks` for `--stacks` (`every_call`: `--stacks-every-call`).
/// The filter (`SUSPECT`) is streaming's alone: in aggregate-only mode the
/// table times lifetimes, and a filter there would leave them untimed.
pub fn stack_mode(stacks: bool, every_call: bool, stream: bool) -> u32 {
    match (stacks, every_call || !stream) {
        (false, _) => stack_mode::OFF,
        (true, true) => stack_mode::EVERY_CALL,
        (true, false) => stack_mode::SUSPECT,
    }
}

/// What a user is told the table is for: lifetimes (`timed`: the form,
/// aggregate-only), else the stack filter where a table is kept at all.
pub fn describe_use(form: u32, timed: u32, sample_mask: u32, jiffies: bool) -> String {
    if form != lifetime::OFF && timed == lifetime::OFF {
        return format!(
            "in-kernel mapping table for --stacks (an unmap or sync takes a stack only where \
             its mapping is not there as it should be): {}",
            describe(form)
        );
    }
    format!(
        "in-kernel mapping lifetimes: {}; {}",
        describe(timed),
        describe_sample(timed, sample_mask, jiffies)
    )
}

/// What a user is told about the form in use.
pub fn describe(form: u32) -> &'static str {
    match form {
        lifetime::SLOTS => "slot table (the kernel has BPF compare-and-exchange)",
        lifetime::HASH => "hash table (no BPF compare-and-exchange in this kernel: dearer per map and unmap, docs/benchmarks.md)",
        _ => "off",
    }
}

/// Rewrites every compare-and-exchange in the object's instruction
/// sections into an atomic add; how many it rewrote.
pub(super) fn without_cmpxchg(bytes: &mut [u8]) -> anyhow::Result<usize> {
    let mut patched = 0;
    super::object_code::each_section(bytes, |code| {
        for ins in code.chunks_exact_mut(8) {
            let imm = i32::from_le_bytes([ins[4], ins[5], ins[6], ins[7]]);
            if (ins[0] == ATOMIC_DW || ins[0] == ATOMIC_W) && imm == CMPXCHG {
                ins[4..8].copy_from_slice(&ADD.to_le_bytes());
                patched += 1;
            }
        }
    })?;
    Ok(patched)
}

/// The slot table, read through a read-only mmap (5 MiB: no syscall per
/// slot, where reading 131 072 slots one by one would cost a refresh
/// ~100 ms).
pub struct SlotTable {
    view: MapView,
}

impl SlotTable {
    pub fn open(map: &MapData) -> anyhow::Result<Self> {
        let len = SLOT_COUNT as usize * std::mem::size_of::<MapSlot>();
        let fd = map.fd().as_fd();
        let view = MapView::new(fd, len).context("mapping MAPPING_SLOTS")?;
        Ok(Self { view })
    }

    /// The mappings the table holds now.
    pub fn entries(&self) -> Vec<(MapKey, MapValue)> {
        let stride = std::mem::size_of::<MapSlot>();
        (0..SLOT_COUNT as usize)
            .filter_map(|i| self.view.get::<MapSlot>(i, stride))
            .filter_map(|s| s.entry())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_mask_is_a_power_of_two_less_one_and_zero_without_jiffies() {
        assert_eq!(sample_mask(lifetime::SLOTS, 16, true), 15);
        assert_eq!(sample_mask(lifetime::SLOTS, 10, true), 15);
        assert_eq!(sample_mask(lifetime::HASH, 1, true), 0);
        assert_eq!(sample_mask(lifetime::SLOTS, 0, true), 0);
        assert_eq!(sample_mask(lifetime::SLOTS, 16, false), 0);
        assert_eq!(sample_mask(lifetime::OFF, 16, true), 0);
        assert!(describe_sample(lifetime::SLOTS, 15, true).starts_with("1 in 16 "));
        assert!(describe_sample(lifetime::HASH, 0, false).contains("cannot read jiffies"));
    }

    #[test]
    fn instructions_encode_as_the_kernel_reads_them() {
        // r0 = cmpxchg(r10 - 8, r0, r1): code, src 1 / dst 10, off -8, imm.
        let i = insn(ATOMIC_DW, 10, 1, -8, CMPXCHG).to_le_bytes();
        assert_eq!(i, [0xdb, 0x1a, 0xf8, 0xff, 0xf1, 0, 0, 0]);
    }

    /// The embedded object holds compare-and-exchanges (the slot table's
    /// claims), and the rewritten bytes hold none (object_patch's test
    /// parses the copy as aya does).
    #[test]
    fn the_object_for_old_kernels_has_no_cmpxchg_left() {
        let object = super::super::EBPF_OBJECT;
        let mut bytes = object.to_vec();
        let patched = without_cmpxchg(&mut bytes).expect("patches");
        assert!(patched > 0, "no compare-and-exchange in the object");
        assert_eq!(without_cmpxchg(&mut bytes).expect("patches"), 0);
        assert_eq!(form(false, true), lifetime::OFF);
        assert_eq!(form(true, false), lifetime::HASH);
        assert_eq!(form(true, true), lifetime::SLOTS);
    }

    /// The stack filter only where streaming keeps a table for it alone;
    /// aggregate-only's table times lifetimes, so its stacks are every
    /// call's (a filter would skip the clock there).
    #[test]
    fn the_stack_filter_is_streaming_s_alone() {
        assert_eq!(stack_mode(false, false, true), stack_mode::OFF);
        assert_eq!(stack_mode(true, false, true), stack_mode::SUSPECT);
        assert_eq!(stack_mode(true, true, true), stack_mode::EVERY_CALL);
        assert_eq!(stack_mode(true, false, false), stack_mode::EVERY_CALL);
    }
}
