//! The event ABI between gpudirect-trace's eBPF programs and its loader.
//!
//! Everything here is `#[repr(C)]` with explicit padding and compile-time size
//! checks: the kernel side writes these bytes into a BPF ring buffer or map and
//! userspace reads them back on the same machine, so layout is the contract.
//! Fields are fixed-width integers only (no `bool`, no enums) so that any bit
//! pattern is a valid value and decoding can never be undefined behaviour.
#![no_std]

/// Length of a device name buffer (`dev_name()`, e.g. `0000:00:06.0`, `nvme0`).
pub const DEV_NAME_LEN: usize = 32;
/// Bytes of an NVIDIA Xid message kept per event (the driver's text is longer
/// only for rare Xids; the tail is cut, and `XidEvent::msg_truncated` says so).
pub const XID_MSG_LEN: usize = 160;
/// Scatter-gather entry lengths carried per `dma_map_sg`/`dma_unmap_sg` event.
pub const SG_LENS: usize = 16;
/// Scatterlist entries (chain entries included) walked by the first,
/// inline part of the walk on kernels without bpf_loop(), which also
/// records the first `SG_LENS` lengths (with bpf_loop() the loop keeps them).
pub const SG_PREFIX: u32 = 32;
/// Default bound of data entries walked per scatterlist (`runtime::SG_WALK_MAX`):
/// 16 GiB of 4 KiB pages. A list longer than the bound is counted as
/// truncated (`kind::SG_TRUNCATED`), never silently cut.
pub const SG_WALK_DEFAULT: u32 = 1 << 22;
/// The kernel's limit on bpf_loop() iterations (BPF_MAX_LOOPS, 5.17+).
pub const BPF_MAX_LOOPS: u32 = 1 << 23;
/// Entries walked after the prefix by programs for kernels without
/// bpf_loop() (5.10 to 5.16): a bounded loop the verifier follows entry by
/// entry. Measured on 5.10: 6000 loads (8100 does not: more than 8192
/// pending branches), and each 1000 add ~3 s of verification per program
/// under TCG; 5000 leaves margin (docs/benchmarks.md).
pub const SG_BOUNDED_REST: u32 = 5000;
/// Scatterlist-walk scratch slots, one per program that walks a list (also
/// the index of its continuation in the `SG_CONT_*` program arrays).
pub mod sg_scratch;

/// Tail calls the kernel allows one program run (MAX_TAIL_CALL_CNT: 32 on
/// 5.10 to 5.16, the kernels that need them; 33 later): the bounded walk
/// continues in up to that many chunks.
pub const SG_TAIL_CALLS: u32 = 32;

/// `DMA_MAPPING_ERROR` (include/linux/dma-mapping.h): what a failed
/// dma_map_page/dma_map_resource returns.
pub const DMA_MAPPING_ERROR: u64 = u64::MAX;
/// `DMA_ATTR_MMIO` (6.18+): dma_map_phys of MMIO space (what
/// dma_map_resource became).
pub const DMA_ATTR_MMIO: u64 = 1 << 10;
/// `DMA_IOVA_USE_SWIOTLB` (6.17+): the high bit of `dma_iova_state.__size`,
/// set once a link bounced through swiotlb; the rest is the size.
pub const DMA_IOVA_USE_SWIOTLB: u64 = 1 << 63;

/// DMA-API records' `aux`: attributes (sync: entries; failed sg map: the
/// error, as an i32) in the low 32 bits; with `Config::stacks`, the id of
/// the call's kernel stack in `STACKS` plus one in the high 32 bits (0: no
/// stack).
pub const AUX_STACK_SHIFT: u32 = 32;

/// `Config::stacks`: which DMA-API calls take a kernel stack.
pub mod stack_mode {
    /// None (no `--stacks`).
    pub const OFF: u32 = 0;
    /// Every call (`--stacks --stacks-every-call`).
    pub const EVERY_CALL: u32 = 1;
    /// Every map, and an unmap or a single sync only where the mapping
    /// table (`lifetime`, kept in streaming mode for this alone) does not
    /// hold its mapping with the same API, size and direction: only such a
    /// call can be a finding, and a stack costs 1-2 us on a driver's path
    /// (`--stacks`).
    pub const SUSPECT: u32 = 2;
}

/// The stack id a DMA-API record's `aux` carries, if any.
pub const fn aux_stack(aux: u64) -> Option<u32> {
    match (aux >> AUX_STACK_SHIFT) as u32 {
        0 => None,
        n => Some(n - 1),
    }
}

/// Event kinds (first field of every record in the ring buffer).
pub mod kind;

/// The name of event kind `k` ("unknown" outside the ABI).
pub const fn kind_name(k: u16) -> &'static str {
    kind::info(k).name
}

/// `enum dma_data_direction` (include/linux/dma-direction.h).
pub mod dir {
    pub const BIDIRECTIONAL: u32 = 0;
    pub const TO_DEVICE: u32 = 1;
    pub const FROM_DEVICE: u32 = 2;
    pub const NONE: u32 = 3;
    pub const NAMES: [&str; 4] = ["bidirectional", "to_device", "from_device", "none"];
}

/// IOMMU invalidations: the class of a submission, packed into `Event::dir`
/// and `CounterKey::dir` of `kind::IOMMU_INVAL`, `QI_DESCRIPTOR` and
/// `CACHE_TAG_FLUSH`: vendor (bits 24..32), type (16..24), nested (15),
/// IOMMU unit (0..12; `UNIT_UNKNOWN` when not known).
pub mod inval;

/// The maps both sides name: aya names a map after its static, so these
/// are the statics' names in the eBPF crate, and the capacities it creates
/// them with. Userspace takes the maps by these names (a unit test checks
/// the embedded object has each of them).
pub mod maps;

/// Timed operations (fentry/fexit or kprobe/kretprobe pairs).
pub mod op;
pub mod pcie;

/// Nesting levels of the timed operations: a DMA-API call may map through
/// the IOMMU, which may flush the IOTLB; each level is timed separately and
/// inner levels inherit the outer level's device.
pub mod level;

/// Log2 latency buckets kept in-kernel per (device, op): bucket `b` holds
/// durations in [2^b, 2^(b+1)) ns (bucket 0 also holds 0).
pub const LAT_BUCKETS: usize = 40;

/// Key of `LAT_HIST` (per-CPU hash).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LatKey {
    pub dev: u64,
    pub op: u32,
    pub _pad: u32,
}

/// Key of `INVAL_HIST` (per-CPU hash): device and `inval::class`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InvalKey {
    pub dev: u64,
    pub class: u32,
    pub _pad: u32,
}

/// Value of `LAT_HIST`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatHist {
    pub count: u64,
    pub sum_ns: u64,
    pub max_ns: u64,
    pub buckets: [u64; LAT_BUCKETS],
}

impl LatHist {
    pub const EMPTY: Self = Self {
        count: 0,
        sum_ns: 0,
        max_ns: 0,
        buckets: [0; LAT_BUCKETS],
    };
}

impl Default for LatHist {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// The timing hooks' per-task state (`TASKS`) and the DMA-API arguments a
/// kprobe entry keeps for its kretprobe.
mod task;
pub use task::{TaskState, DMA_ARGS};

/// Slots of the `RUNTIME` array map (u32 each), written by the loader after
/// load. Settings the verifier must not see as constants live here, not in
/// `Config` (read-only data, whose values the verifier knows): a known walk
/// bound makes each bpf_loop() iteration a distinct state, and the
/// callback's verification never converges.
pub mod runtime;

/// Bits of the `RUNTIME[HOOK_OPS]` value: which DMA-API operations the hooks
/// turn into records (because no dma:* tracepoint reports them here, or
/// `--dma-source hooks`). Set by the loader after attaching.
pub mod hook_ops;

/// The in-kernel tables of outstanding DMA-API mappings (aggregate-only
/// lifetimes): the slot table and the hash kept for kernels without BPF
/// atomics.
pub mod lifetime;
pub use lifetime::{MapKey, MapSlot, MapValue};

/// Value of `IOVA_STATES`: one live IOVA-API state (a driver's `struct
/// dma_iova_state`), from dma_iova_try_alloc (or its first link seen, for
/// a state allocated before the trace began) to dma_iova_free/destroy.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IovaState {
    pub dev: u64,
    /// `state->addr`: the IOVA space's base.
    pub addr: u64,
    /// Bytes allocated (`dma_iova_size(state)`).
    pub size: u64,
    /// When it was allocated (or first seen): lifetimes of the links a
    /// destroy ends, in aggregate-only mode.
    pub ts_ns: u64,
    /// Bytes linked and not yet unlinked.
    pub linked: u64,
    /// Links made and not yet unlinked.
    pub links: u32,
    /// A dma_iova_link of this state is in flight: the unlink its error
    /// path makes is the kernel's own clean-up, not a driver's unlink.
    pub linking: u32,
    /// The process that allocated it.
    pub pid: u32,
    pub _pad: u32,
}

/// Bits of `Event::flags`.
pub mod flags;

/// The preempt-count bits that mean interrupt context: NMI (0x00f00000;
/// one bit before 5.11), hard interrupt (0x000f0000), and serving a softirq
/// (SOFTIRQ_OFFSET 0x100; 0x200 and up count local_bh_disable() in process
/// context, which is not interrupt context).
pub const PREEMPT_IRQ_MASK: u32 = 0x00f0_0000 | 0x000f_0000 | 0x100;

/// The common fixed-size event: 64 bytes, one per tracepoint hit.
///
/// Meaning of the generic fields by kind:
///
/// | kind | addr | phys | size | aux |
/// |---|---|---|---|---|
/// | IOMMU_MAP | iova | paddr | size | 0 |
/// | IOMMU_UNMAP | iova | 0 | size asked | unmapped size |
/// | IO_PAGE_FAULT | iova | 0 | 0 | fault flags (IOMMU_FAULT_READ/WRITE) |
/// | GROUP_* | 0 | 0 | 0 | group id |
/// | DMA_MAP | dma addr | phys addr | size | attrs |
/// | DMA_UNMAP | dma addr | 0 | size | attrs |
/// | DMA_ALLOC / DMA_FREE | dma addr | kernel virt addr | size | 0 |
/// | SWIOTLB_BOUNCED | dma addr | 0 | size | 0 |
/// | DMA_MAP_SG_ERR | 0 | 0 | 0 | errno (negative, as i64) |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Event {
    pub kind: u16,
    pub flags: u16,
    /// `enum dma_data_direction` (0 bidirectional, 1 to device, 2 from device, 3 none).
    pub dir: u32,
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC, the same clock as /dev/kmsg stamps.
    pub ts_ns: u64,
    pub pid: u32,
    pub tid: u32,
    /// Kernel address of the `struct device`; the key of the `DEVICES` name map.
    pub dev: u64,
    pub addr: u64,
    pub phys: u64,
    pub size: u64,
    pub aux: u64,
}

/// A scatter-gather mapping (dma_map_sg / dma_unmap_sg): the common event plus
/// entry counts and the first `SG_LENS` entry lengths. `Event::size` holds the
/// total of all walked entries, `Event::addr` the first entry's DMA address.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SgEvent {
    pub event: Event,
    /// Entries handed to the DMA API (`nents`).
    pub nents: u32,
    /// Entries after mapping (`ents`, may be fewer when the IOMMU merged them);
    /// 0 for unmap.
    pub ents: u32,
    /// Number of valid values in `lens`.
    pub n_lens: u32,
    pub _pad: u32,
    pub lens: [u32; SG_LENS],
}

/// nvidia:nvidia_dev_xid(struct pci_dev *dev, NvU32 error_number, const char *msg).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XidEvent {
    pub event: Event,
    pub xid: u32,
    /// 1 when the message did not fit into `msg`.
    pub msg_truncated: u32,
    pub msg: [u8; XID_MSG_LEN],
}

/// Value of the `DEVICES` map: the device's name as read in-kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceName {
    pub name: [u8; DEV_NAME_LEN],
}

/// Kernel structure offsets the programs need, filled from the running
/// kernel's BTF by the loader (defaults are the layout of every kernel from
/// 5.10 to 6.18 on x86_64, see docs/architecture.md).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelOffsets {
    /// offsetof(struct device, kobj) + offsetof(struct kobject, name).
    pub device_name: u32,
    /// offsetof(struct pci_dev, dev).
    pub pci_dev_device: u32,
    /// sizeof(struct scatterlist).
    pub sg_stride: u32,
    /// offsetof(struct scatterlist, page_link).
    pub sg_page_link: u32,
    /// offsetof(struct scatterlist, length).
    pub sg_length: u32,
    /// offsetof(struct scatterlist, dma_address).
    pub sg_dma_address: u32,
    /// offsetof(struct scatterlist, dma_length), or `u32::MAX` when the
    /// kernel has no CONFIG_NEED_SG_DMA_LENGTH (then `length` is used).
    pub sg_dma_length: u32,
    /// offsetof(nv_dma_device_t, dev) in the NVIDIA driver (its module BTF),
    /// or `u32::MAX` when unknown: nv_dma_* timings then carry no device.
    pub nv_dma_device_dev: u32,
    /// offsetof(struct sg_table, sgl / nents / orig_nents).
    pub sgt_sgl: u32,
    pub sgt_nents: u32,
    pub sgt_orig_nents: u32,
    /// sizeof(struct page), for page_to_phys() (0: unknown).
    pub page_size: u32,
    /// offsetof(struct intel_iommu, seq_id / segment), offsetof(struct
    /// amd_iommu, index): the invalidation hooks' unit; `u32::MAX` unknown.
    pub intel_iommu_seq_id: u32,
    pub intel_iommu_segment: u32,
    pub amd_iommu_index: u32,
    /// offsetof(struct cache_tag, type / iommu / dev) (6.10+), `u32::MAX`
    /// where the kernel has no cache tags.
    pub cache_tag_type: u32,
    pub cache_tag_iommu: u32,
    pub cache_tag_dev: u32,
    /// Argument index of `cmds` in arm_smmu_cmdq_issue_cmdlist: 1 before
    /// 6.12 (smmu, cmds, n, sync), 2 after (smmu, cmdq, cmds, n, sync).
    pub smmu_cmds_arg: u32,
    /// offsetof(struct pci_bus, self / cur_bus_speed / max_bus_speed), for
    /// pci:pcie_link_event (7.x); `u32::MAX` where BTF lacks them.
    pub pci_bus_self: u32,
    pub pci_bus_cur_speed: u32,
    pub pci_bus_max_speed: u32,
    pub _reserved: [u32; 2],
}

impl KernelOffsets {
    pub const DEFAULT: Self = Self {
        device_name: 0,
        pci_dev_device: 200,
        sg_stride: 32,
        sg_page_link: 0,
        sg_length: 12,
        sg_dma_address: 16,
        sg_dma_length: 24,
        nv_dma_device_dev: u32::MAX,
        sgt_sgl: 0,
        sgt_nents: 8,
        sgt_orig_nents: 12,
        page_size: 64,
        intel_iommu_seq_id: u32::MAX,
        intel_iommu_segment: u32::MAX,
        amd_iommu_index: u32::MAX,
        cache_tag_type: u32::MAX,
        cache_tag_iommu: u32::MAX,
        cache_tag_dev: u32::MAX,
        smmu_cmds_arg: 1,
        pci_bus_self: u32::MAX,
        pci_bus_cur_speed: u32::MAX,
        pci_bus_max_speed: u32::MAX,
        _reserved: [0; 2],
    };
}

/// Runtime settings written into the programs' read-only data at load time.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub offsets: KernelOffsets,
    /// Wake the reader only once this many bytes are waiting in the ring
    /// buffer (a wake-up per event costs the traced CPU ~1 us); the reader
    /// also drains on a timer, so nothing waits longer than its tick.
    pub wakeup_bytes: u64,
    /// 1: stream events to the ring buffer; 0: aggregate-only (maps only).
    pub stream: u32,
    /// Where DMA-API mappings are kept for in-kernel lifetimes (the
    /// aggregate-only mode's substitute for userspace mapping tracking):
    /// `lifetime::OFF`, `lifetime::SLOTS` or `lifetime::HASH`.
    pub track_lifetimes: u32,
    /// Kernel address of the `vmemmap_base` variable (x86_64, from
    /// kallsyms), for page_to_phys() in the dma_map_page_attrs hooks; 0 when
    /// unknown (the hooks then report physical address 0).
    pub vmemmap_base_ptr: u64,
    /// Which DMA-API calls take their kernel stack into `STACKS`, its id in
    /// the record's `aux` (`AUX_STACK_SHIFT`): a `stack_mode`.
    pub stacks: u32,
    /// log2 of the CPU page size (12 on x86_64).
    pub page_shift: u32,
    /// Kernel address of `__per_cpu_offset[]`, and the per-CPU address of
    /// the preempt count (`__preempt_count`, or `pcpu_hot` plus the offset
    /// of its `preempt_count` on 6.2 to 6.14), both from kallsyms: a
    /// record's `flags::IN_INTERRUPT` is read from them. 0: unknown (no
    /// data symbols in kallsyms, or not x86_64); the flag is never set.
    pub per_cpu_offset_ptr: u64,
    pub preempt_count_ptr: u64,
    /// 1: the programs tell what they find odd (a scatterlist walk cut
    /// short, a kretprobe whose entry kept no arguments, a full map) through
    /// aya-log at debug level. 0: the verifier, which knows this read-only
    /// value, drops the log calls from the programs.
    pub debug_log: u32,
    /// Aggregate-only lifetimes, sampled: a map times its mapping with the
    /// fine clock when a random u32 has none of these bits set (mask 15: 1
    /// in 16), and dates the others in jiffies (`bpf_jiffies64`), enough for
    /// their age while outstanding; only timed mappings read the clock again
    /// at unmap. 0: every mapping is timed (exact; also where the loader
    /// could not read jiffies, and then the verifier, knowing this read-only
    /// value, never reaches the jiffies call). `lifetime::TIMED`.
    pub lifetime_sample_mask: u32,
    /// 1: the loader made every `PREEMPT_COUNT_KSYM` constant of the
    /// programs a typed per-CPU ksym (BPF_PSEUDO_BTF_ID of the preempt
    /// count's BTF variable), read through `bpf_this_cpu_ptr()` with a
    /// plain load instead of `bpf_probe_read_kernel()` at kallsyms'
    /// address. 0: the constant stays one, and the verifier, knowing this
    /// read-only value, never reaches the call that would refuse it.
    pub preempt_count_ksym: u32,
    /// Byte offset of the count in that variable: 0 for `__preempt_count`,
    /// the member's for `pcpu_hot.preempt_count` (6.2 to 6.14).
    pub preempt_count_member: u32,
}

/// What the programs load where they want the preempt count as a typed
/// ksym (`Config::preempt_count_ksym`): a 64-bit constant no code has
/// otherwise ("gdt_pcnt"), which the loader finds in each `ld_imm64` and
/// makes BPF_PSEUDO_BTF_ID of the variable.
pub const PREEMPT_COUNT_KSYM: u64 = u64::from_be_bytes(*b"gdt_pcnt");

impl Config {
    pub const DEFAULT: Self = Self {
        offsets: KernelOffsets::DEFAULT,
        wakeup_bytes: 256 * 1024,
        stream: 1,
        track_lifetimes: 0,
        vmemmap_base_ptr: 0,
        stacks: 0,
        page_shift: 12,
        per_cpu_offset_ptr: 0,
        preempt_count_ptr: 0,
        debug_log: 0,
        lifetime_sample_mask: 0,
        preempt_count_ksym: 0,
        preempt_count_member: 0,
    };
}

mod counter;
pub use counter::{
    Counter, CounterKey, CpuState, COUNTER_CACHE, COUNTER_FROM_HOOK, COUNTER_IOVA, COUNTER_SLOTS,
    LIFETIME_CACHE, RARE_WAKE_GAP_NS,
};

/// Per-CPU self-metrics kept by the programs (array map `STATS`, one slot per
/// index below).
pub mod stat;

const _: () = assert!(core::mem::size_of::<Event>() == 64);
const _: () = assert!(core::mem::size_of::<SgEvent>() == 64 + 16 + 4 * SG_LENS);
const _: () = assert!(core::mem::size_of::<XidEvent>() == 64 + 8 + XID_MSG_LEN);
const _: () = assert!(core::mem::size_of::<DeviceName>() == DEV_NAME_LEN);
const _: () = assert!(core::mem::size_of::<KernelOffsets>() == 96);
const _: () = assert!(core::mem::size_of::<Config>() == 160);
const _: () = assert!(core::mem::size_of::<InvalKey>() == 16);
const _: () = assert!(core::mem::align_of::<Event>() == 8);
const _: () = assert!(core::mem::size_of::<LatKey>() == 16);
const _: () = assert!(core::mem::size_of::<LatHist>() == 24 + 8 * LAT_BUCKETS);
const _: () = assert!(core::mem::size_of::<IovaState>() == 56);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_of_known_and_unknown_kinds() {
        assert_eq!(kind_name(kind::AER), "pcie_aer");
        assert_eq!(kind_name(999), "unknown");
    }

    #[test]
    fn invalidation_classes_round_trip() {
        let c = inval::class(inval::VENDOR_INTEL, inval::QI_IOTLB, 3, true);
        assert_eq!(inval::vendor(c), inval::VENDOR_INTEL);
        assert_eq!(inval::ty(c), inval::QI_IOTLB);
        assert_eq!(inval::unit(c), 3);
        assert!(inval::nested(c));
        let u = inval::class(inval::VENDOR_AMD, 0, u32::MAX, false);
        assert_eq!(
            (inval::unit(u), inval::nested(u)),
            (inval::UNIT_UNKNOWN, false)
        );
        assert!(kind::is_counter_only(kind::QI_DESCRIPTOR));
        assert!(!kind::is_counter_only(kind::IOMMU_INVAL));
        assert!(kind::is_hit(kind::CACHE_TAG_FLUSH) && !kind::is_hit(kind::SG_TRUNCATED));
        assert_eq!(kind_name(kind::IOMMU_INVAL), "iommu_invalidation");
        assert_eq!(kind_name(kind::UNMAP_NOT_NEEDED), "unmap_not_needed");
        assert!(kind::is_counter_only(kind::IOVA_DECLINED) && !kind::is_hit(kind::IOVA_DECLINED));
        assert!(!kind::is_counter_only(kind::IOVA_ALLOC));
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain-old-data, repr(C), no padding holes, every bit pattern valid.
    unsafe impl aya::Pod for super::Event {}
    unsafe impl aya::Pod for super::SgEvent {}
    unsafe impl aya::Pod for super::XidEvent {}
    unsafe impl aya::Pod for super::DeviceName {}
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::CounterKey {}
    unsafe impl aya::Pod for super::Counter {}
    unsafe impl aya::Pod for super::CpuState {}
    unsafe impl aya::Pod for super::LatKey {}
    unsafe impl aya::Pod for super::InvalKey {}
    unsafe impl aya::Pod for super::LatHist {}
    unsafe impl aya::Pod for super::TaskState {}
    unsafe impl aya::Pod for super::MapKey {}
    unsafe impl aya::Pod for super::MapValue {}
    unsafe impl aya::Pod for super::MapSlot {}
    unsafe impl aya::Pod for super::IovaState {}
}
