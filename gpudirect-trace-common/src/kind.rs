//! Event kinds: the first field of every record, and of every in-kernel
//! counter's key. The programs use the `u16` constants; everything else
//! reads what a kind is from [`KINDS`], the one catalogue: its name, its
//! class, its record layout, the mapping level it opens or closes, and the
//! sets it belongs to. No set of kinds is matched anywhere else.

pub const IOMMU_MAP: u16 = 1;
pub const IOMMU_UNMAP: u16 = 2;
pub const IO_PAGE_FAULT: u16 = 3;
pub const GROUP_ADD_DEVICE: u16 = 4;
pub const GROUP_REMOVE_DEVICE: u16 = 5;
pub const DOMAIN_ATTACH: u16 = 6;
pub const DOMAIN_DETACH: u16 = 7;
/// dma_map_page (5.x-6.17), dma_map_phys (6.18+), dma_map_resource.
pub const DMA_MAP: u16 = 8;
pub const DMA_UNMAP: u16 = 9;
pub const DMA_MAP_SG: u16 = 10;
pub const DMA_UNMAP_SG: u16 = 11;
pub const DMA_MAP_SG_ERR: u16 = 12;
pub const DMA_ALLOC: u16 = 13;
pub const DMA_FREE: u16 = 14;
pub const SWIOTLB_BOUNCED: u16 = 15;
pub const NV_XID: u16 = 16;
/// A timed kernel function returned: `size` = nanoseconds spent,
/// `aux` = the operation (`op::*`), `addr` = its IOVA/DMA address argument
/// when it has one.
pub const LATENCY: u16 = 17;
/// ras:aer_event: a PCIe AER error. `addr` = the AER status register,
/// `aux` = severity (0 uncorrected non-fatal, 1 fatal, 2 corrected),
/// `dev` = a tagged key (bit 0 set) of the DEVICES name map: the
/// tracepoint names the device by string, not by `struct device *`.
pub const AER: u16 = 18;
/// A DMA-API map that failed: dma_map_page/phys/resource returned
/// `DMA_MAPPING_ERROR`, or dma_alloc_attrs returned NULL (with
/// `flags::COHERENT`). `phys`, `size`, `dir`, `aux` (attrs) as for DMA_MAP.
pub const DMA_MAP_ERR: u16 = 19;
/// dma_sync_single_for_cpu / dma_sync_sg_for_cpu (`flags::SCATTERLIST`):
/// `addr` = DMA address (first entry's), `size` = bytes synced, `aux` =
/// entries (sg).
pub const DMA_SYNC_CPU: u16 = 20;
/// dma_sync_*_for_device, as DMA_SYNC_CPU.
pub const DMA_SYNC_DEVICE: u16 = 21;
/// Counter-only (never a record): scatter-gather MAPS whose walk stopped
/// before the end of the list (`--sg-walk-max`, a kernel limit or
/// an unreadable entry). `DEV_COUNTERS` count = such maps, bytes = what
/// was walked of them (their total is a lower bound).
pub const SG_TRUNCATED: u16 = 22;
/// Counter-only: the same for scatter-gather unmaps.
pub const SG_UNMAP_TRUNCATED: u16 = 23;
/// An IOMMU invalidation submission returned (Intel qi_submit_sync, AMD
/// completion wait, SMMUv3 command-queue batch): `size` = nanoseconds
/// spent, `dir` = its class (`inval::class`: vendor, type, unit, nested),
/// `phys` / `addr` = the first descriptor's qw0 / qw1 (Intel; SMMUv3:
/// the first command's two words), `aux` = descriptors submitted (low 32
/// bits) and the unit's PCI segment (bits 32..48, Intel).
pub const IOMMU_INVAL: u16 = 24;
/// Counter-only: descriptors queued (intel_iommu:qi_submit), by class
/// (`dir`); bytes = pages of page-selective IOTLB invalidations.
pub const QI_DESCRIPTOR: u16 = 25;
/// Counter-only: cache-tag flushes (intel_iommu:cache_tag_flush_*,
/// 6.10+): `dev` = the tag's device, `dir` = class (type = the tag's
/// type | the tracepoint << 4), bytes = pages asked for.
pub const CACHE_TAG_FLUSH: u16 = 26;
/// dma_iova_try_alloc() succeeded (the IOVA API, 6.17+: the block layer,
/// RDMA, HMM and VFIO dma-buf map through it): `addr` = the IOVA space's
/// base (`state->addr`), `size` = bytes allocated, `phys` = the phys
/// argument (used by the kernel only for alignment). Links into it are
/// `DMA_MAP` records with `flags::IOVA`, unlinks `DMA_UNMAP` with it, and
/// dma_iova_destroy a `DMA_UNMAP` with `flags::IOVA_DESTROY` (every link in
/// `[addr, addr + size)` ends; `phys` = the links it ended) followed by an
/// `IOVA_FREE`.
pub const IOVA_ALLOC: u16 = 27;
/// dma_iova_free(), or the free inside dma_iova_destroy
/// (`flags::IOVA_DESTROY`): `addr` = base, `size` = bytes allocated, `phys`
/// = links still outstanding in it (a free with links is a driver bug).
pub const IOVA_FREE: u16 = 28;
/// dma_iova_sync(): `addr` = base + offset, `size` = bytes synced.
pub const IOVA_SYNC: u16 = 29;
/// Counter-only: dma_iova_try_alloc() returned false (the device does not
/// use the IOMMU's DMA ops: the driver falls back to dma_map_*).
pub const IOVA_DECLINED: u16 = 30;
/// Counter-only: dma_need_unmap() returned false for the device (6.17+):
/// the kernel may skip unmapping its streaming mappings (dma-direct with
/// nothing to sync), so a map without an unmap is normal there.
pub const UNMAP_NOT_NEEDED: u16 = 31;
/// sched:sched_process_exit of a process (its thread-group leader): `pid`
/// and the name it had (`comm`, 16 bytes in `addr` and `phys`, little
/// endian, NUL-padded), `size` its cgroup v2 id (bpf_get_current_cgroup_id:
/// the cgroup directory's inode). Short-lived processes (dd, insmod, a reproducer)
/// are gone from /proc before their pids are looked up; this keeps their
/// names. Streaming mode only (aggregate-only names no processes).
pub const PROC_EXIT: u16 = 32;
/// A PCIe link's state, as the kernel updated it (pci:pcie_link_event,
/// 7.x) or as sysfs showed it (`flags::FROM_USERSPACE`: polled where the
/// kernel has no link event, and each link's state when the trace starts).
/// `dev` names the downstream port above the link (the kernel's
/// `bus->self`), `addr` = the current speed (`enum pci_bus_speed`: 0x14
/// 2.5 GT/s .. 0x19 64 GT/s, 0xff unknown) | its maximum << 8 (0 unknown),
/// `size` = the negotiated width in lanes (0: link down), `phys` = the
/// maximum width (0 unknown), `aux` = the reason (`pcie::REASON_*`: enum
/// pcie_link_change_reason, or the poll's own), `dir` = the link status
/// bits the kernel gives (LNKSTA's LT, DLLLA, LBMS, LABS).
pub const PCIE_LINK: u16 = 33;
/// A hotplug slot's event (pci:pci_hp_event, 7.x: `aux` = enum
/// pci_hotplug_event, `dev` = the port, tagged name key as for AER), or a
/// PCI device added or removed (kernel uevent, `flags::FROM_USERSPACE`:
/// `aux` = `pcie::HP_DEVICE_ADDED` / `HP_DEVICE_REMOVED`, `addr` = the
/// upstream port's packed address (`pcie::pack_bdf`), 0 unknown).
pub const PCI_HOTPLUG: u16 = 34;
/// One past the largest kind: sizes per-kind counter arrays.
pub const COUNT: u32 = 35;

/// What a kind is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A DMA-API call (dma:* tracepoints or the DMA-API hooks, the IOVA
    /// API included).
    DmaApi,
    /// IOMMU page tables, groups, domains, invalidations.
    Iommu,
    /// Bounce buffering.
    Swiotlb,
    /// Rare events each of which is an incident (faults, Xids, AER).
    Rare,
    /// The timing hooks' durations.
    Timing,
    /// About tasks, not devices: what the tracer needs to name them.
    Task,
    /// PCIe link and slot state: a few per change, kept whole (some are
    /// incidents: a link down, a downtrain, a removal).
    Pcie,
}

impl Class {
    /// Whether its records and counters belong to a device's row (a task's
    /// exit names a process; its `dev` is 0, which is not "unattributed
    /// IOMMU activity").
    pub const fn about_devices(self) -> bool {
        !matches!(self, Class::Task)
    }
}

/// The layout of a kind's record in the ring buffer and in trace files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `Event` (64 bytes).
    Event,
    /// `SgEvent`.
    Sg,
    /// `XidEvent`.
    Xid,
    /// Never a record: only an in-kernel counter.
    CounterOnly,
}

/// A level of mappings (`aggregate::Level`): what map/unmap kinds open and
/// close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapLevel {
    Dma,
    Iommu,
    Coherent,
}

/// What a record of the kind does to a level's mappings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span {
    Opens(MapLevel),
    Closes(MapLevel),
    None,
}

/// One kind, as data.
#[derive(Clone, Copy, Debug)]
pub struct KindInfo {
    pub kind: u16,
    /// As output and metric labels use it.
    pub name: &'static str,
    pub class: Class,
    pub layout: Layout,
    pub span: Span,
    /// Its counts are hits of a tracepoint or hook (kernel_events); not for
    /// counters that count something else (truncated walks count maps also
    /// counted as maps; declined IOVA allocations and dma_need_unmap()
    /// answers are calls, not events).
    pub hit: bool,
    /// The `catalog::DMA_OPS` operation it reports (before `flags::IOVA` /
    /// `flags::RESOURCE` say more), for per-operation sources.
    pub dma_op: Option<&'static str>,
    /// A DMA-API call's record: its `aux` may carry a stack id (`--stacks`).
    pub stack: bool,
}

const fn k(kind: u16, name: &'static str, class: Class) -> KindInfo {
    KindInfo {
        kind,
        name,
        class,
        layout: Layout::Event,
        span: Span::None,
        hit: true,
        dma_op: None,
        stack: false,
    }
}

/// A DMA-API call of operation `op`.
const fn dma(kind: u16, name: &'static str, op: &'static str, span: Span) -> KindInfo {
    KindInfo {
        dma_op: Some(op),
        stack: true,
        span,
        ..k(kind, name, Class::DmaApi)
    }
}

const fn counter_only(kind: u16, name: &'static str, class: Class, hit: bool) -> KindInfo {
    KindInfo {
        layout: Layout::CounterOnly,
        hit,
        ..k(kind, name, class)
    }
}

use MapLevel::{Coherent, Dma, Iommu};
use Span::{Closes, Opens};

/// Every kind, indexed by its number (0 is no kind).
pub const KINDS: [KindInfo; COUNT as usize] = [
    KindInfo {
        hit: false,
        layout: Layout::CounterOnly,
        ..k(0, "unknown", Class::Rare)
    },
    KindInfo {
        span: Opens(Iommu),
        ..k(IOMMU_MAP, "iommu_map", Class::Iommu)
    },
    KindInfo {
        span: Closes(Iommu),
        ..k(IOMMU_UNMAP, "iommu_unmap", Class::Iommu)
    },
    k(IO_PAGE_FAULT, "io_page_fault", Class::Rare),
    k(GROUP_ADD_DEVICE, "group_add_device", Class::Iommu),
    k(GROUP_REMOVE_DEVICE, "group_remove_device", Class::Iommu),
    k(DOMAIN_ATTACH, "domain_attach", Class::Iommu),
    k(DOMAIN_DETACH, "domain_detach", Class::Iommu),
    dma(DMA_MAP, "dma_map", "map", Opens(Dma)),
    dma(DMA_UNMAP, "dma_unmap", "unmap", Closes(Dma)),
    KindInfo {
        layout: Layout::Sg,
        ..dma(DMA_MAP_SG, "dma_map_sg", "map_sg", Opens(Dma))
    },
    KindInfo {
        layout: Layout::Sg,
        ..dma(DMA_UNMAP_SG, "dma_unmap_sg", "unmap_sg", Closes(Dma))
    },
    dma(DMA_MAP_SG_ERR, "dma_map_sg_err", "map_sg_err", Span::None),
    dma(DMA_ALLOC, "dma_alloc", "coherent", Opens(Coherent)),
    dma(DMA_FREE, "dma_free", "coherent", Closes(Coherent)),
    k(SWIOTLB_BOUNCED, "swiotlb_bounced", Class::Swiotlb),
    KindInfo {
        layout: Layout::Xid,
        ..k(NV_XID, "nvidia_xid", Class::Rare)
    },
    k(LATENCY, "latency", Class::Timing),
    k(AER, "pcie_aer", Class::Rare),
    dma(DMA_MAP_ERR, "dma_map_err", "map", Span::None),
    dma(DMA_SYNC_CPU, "dma_sync_for_cpu", "sync", Span::None),
    dma(DMA_SYNC_DEVICE, "dma_sync_for_device", "sync", Span::None),
    counter_only(SG_TRUNCATED, "sg_map_truncated", Class::DmaApi, false),
    counter_only(
        SG_UNMAP_TRUNCATED,
        "sg_unmap_truncated",
        Class::DmaApi,
        false,
    ),
    k(IOMMU_INVAL, "iommu_invalidation", Class::Iommu),
    counter_only(QI_DESCRIPTOR, "qi_descriptor", Class::Iommu, true),
    counter_only(CACHE_TAG_FLUSH, "cache_tag_flush", Class::Iommu, true),
    dma(IOVA_ALLOC, "iova_alloc", "iova", Span::None),
    dma(IOVA_FREE, "iova_free", "iova", Span::None),
    dma(IOVA_SYNC, "iova_sync", "iova", Span::None),
    KindInfo {
        dma_op: Some("iova"),
        ..counter_only(IOVA_DECLINED, "iova_declined", Class::DmaApi, false)
    },
    counter_only(UNMAP_NOT_NEEDED, "unmap_not_needed", Class::DmaApi, false),
    KindInfo {
        hit: false,
        ..k(PROC_EXIT, "process_exit", Class::Task)
    },
    k(PCIE_LINK, "pcie_link", Class::Pcie),
    k(PCI_HOTPLUG, "pci_hotplug", Class::Pcie),
];

const fn check(i: usize) -> bool {
    i == KINDS.len() || (KINDS[i].kind as usize == i && check(i + 1))
}
const _: () = assert!(check(0), "KINDS is indexed by kind");

/// What `k` is (kind 0, "unknown", outside the ABI).
pub const fn info(k: u16) -> &'static KindInfo {
    if (k as usize) < KINDS.len() {
        &KINDS[k as usize]
    } else {
        &KINDS[0]
    }
}

/// Kinds that exist only as in-kernel counters, never as records.
pub const fn is_counter_only(k: u16) -> bool {
    matches!(info(k).layout, Layout::CounterOnly) && k != 0
}

/// Whether `k`'s counts are tracepoint or hook hits (`KindInfo::hit`).
pub const fn is_hit(k: u16) -> bool {
    info(k).hit
}
