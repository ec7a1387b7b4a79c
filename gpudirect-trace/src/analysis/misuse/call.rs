//! One DMA-API call as the checker sees it, from a record of either
//! source (dma:* tracepoints or the DMA-API hooks).

use gpudirect_trace_common::{aux_stack, dir, flags, kind};

use crate::{decode::Record, model::misuse::ApiClass, model::task_of};

/// `DMA_ATTR_SKIP_CPU_SYNC`: the driver syncs itself, so dma-debug lets
/// such mappings share cachelines.
pub const DMA_ATTR_SKIP_CPU_SYNC: u64 = 1 << 5;

pub use gpudirect_trace_common::DMA_MAPPING_ERROR;

/// What a DMA-API record asks of the checker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Map,
    Unmap,
    /// dma_sync_*_for_cpu (`true`) or _for_device.
    Sync {
        for_cpu: bool,
    },
    MapFailed,
}

/// One DMA-API call, as the checker keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DmaCall {
    pub op: Op,
    pub class: ApiClass,
    pub api: &'static str,
    pub ts_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub addr: u64,
    /// Physical address of single (page) mappings.
    pub phys: Option<u64>,
    pub size: u64,
    pub dir: u32,
    pub attrs: u64,
    /// Scatterlist entries handed to the call.
    pub entries: Option<u32>,
    /// Kernel stack id (`--stacks`).
    pub stack: Option<u32>,
}

impl DmaCall {
    /// The DMA-API call a record reports, if it is one; `stacks`: records
    /// carry stack ids (`--stacks`).
    pub fn from_record(r: &Record, stacks: bool) -> Option<DmaCall> {
        let ev = r.event();
        // The IOVA API has rules of its own (iova.rs).
        if ev.flags & flags::IOVA != 0 {
            return None;
        }
        let resource = ev.flags & flags::RESOURCE != 0;
        let sg = ev.flags & flags::SCATTERLIST != 0;
        let (op, class, api) = match (r, ev.kind) {
            (Record::Event(_), kind::DMA_MAP_ERR) if ev.flags & flags::COHERENT != 0 => {
                (Op::MapFailed, ApiClass::Coherent, "dma_alloc_attrs")
            }
            (Record::Event(_), kind::DMA_MAP_ERR) if resource => {
                (Op::MapFailed, ApiClass::Resource, "dma_map_resource")
            }
            (Record::Event(_), kind::DMA_MAP_ERR) => {
                (Op::MapFailed, ApiClass::Single, "dma_map_page")
            }
            (Record::Event(_), kind::DMA_SYNC_CPU) if sg => (
                Op::Sync { for_cpu: true },
                ApiClass::ScatterGather,
                "dma_sync_sg_for_cpu",
            ),
            (Record::Event(_), kind::DMA_SYNC_CPU) => (
                Op::Sync { for_cpu: true },
                ApiClass::Single,
                "dma_sync_single_for_cpu",
            ),
            (Record::Event(_), kind::DMA_SYNC_DEVICE) if sg => (
                Op::Sync { for_cpu: false },
                ApiClass::ScatterGather,
                "dma_sync_sg_for_device",
            ),
            (Record::Event(_), kind::DMA_SYNC_DEVICE) => (
                Op::Sync { for_cpu: false },
                ApiClass::Single,
                "dma_sync_single_for_device",
            ),
            (Record::Event(_), kind::DMA_MAP) if resource => {
                (Op::Map, ApiClass::Resource, "dma_map_resource")
            }
            (Record::Event(_), kind::DMA_MAP) => (Op::Map, ApiClass::Single, "dma_map_page"),
            (Record::Event(_), kind::DMA_UNMAP) if resource => {
                (Op::Unmap, ApiClass::Resource, "dma_unmap_resource")
            }
            (Record::Event(_), kind::DMA_UNMAP) => (Op::Unmap, ApiClass::Single, "dma_unmap_page"),
            (Record::Event(_), kind::DMA_ALLOC) => (Op::Map, ApiClass::Coherent, "dma_alloc_attrs"),
            (Record::Event(_), kind::DMA_FREE) => (Op::Unmap, ApiClass::Coherent, "dma_free_attrs"),
            (Record::Sg(_), kind::DMA_MAP_SG) => (Op::Map, ApiClass::ScatterGather, "dma_map_sg"),
            (Record::Sg(_), kind::DMA_UNMAP_SG) => {
                (Op::Unmap, ApiClass::ScatterGather, "dma_unmap_sg")
            }
            (_, kind::DMA_MAP_SG_ERR) => (Op::MapFailed, ApiClass::ScatterGather, "dma_map_sg"),
            _ => return None,
        };
        let entries = match r {
            Record::Sg(s) => Some(s.nents),
            _ if ev.kind == kind::DMA_MAP_SG_ERR => Some(ev.size as u32),
            // dma_sync_sg_*: the entries handed to it.
            _ if sg => Some(ev.aux as u32),
            _ => None,
        };
        let mut c = DmaCall {
            op,
            class,
            api,
            ts_ns: ev.ts_ns,
            pid: task_of(ev),
            tid: ev.tid,
            addr: ev.addr,
            phys: (class == ApiClass::Single && matches!(op, Op::Map)).then_some(ev.phys),
            size: if ev.kind == kind::DMA_MAP_SG_ERR {
                0
            } else {
                ev.size
            },
            dir: ev.dir,
            // Coherent and sync records carry no attributes in aux; the
            // high half is the stack id (AUX_STACK_SHIFT).
            attrs: if class == ApiClass::Coherent || matches!(op, Op::Sync { .. }) {
                0
            } else {
                ev.aux & 0xffff_ffff
            },
            entries,
            stack: if stacks { aux_stack(ev.aux) } else { None },
        };
        // dma:dma_map_page fires for failed maps too, with the error as
        // the handle; a coherent allocation that failed has no CPU address.
        let failed = match class {
            ApiClass::Coherent => op == Op::Map && ev.phys == 0,
            _ => op == Op::Map && ev.addr == DMA_MAPPING_ERROR,
        };
        if failed {
            c.op = Op::MapFailed;
        }
        Some(c)
    }
}

/// dma-debug's direction names.
pub fn dir_name(d: u32) -> &'static str {
    match d {
        dir::BIDIRECTIONAL => "DMA_BIDIRECTIONAL",
        dir::TO_DEVICE => "DMA_TO_DEVICE",
        dir::FROM_DEVICE => "DMA_FROM_DEVICE",
        dir::NONE => "DMA_NONE",
        _ => "DMA_(invalid)",
    }
}
