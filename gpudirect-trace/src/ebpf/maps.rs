//! The maps userspace reads, taken from the loaded object once into one
//! typed struct, by the names of the shared contract
//! (`gpudirect_trace_common::maps`).

use anyhow::Context as _;
use aya::{
    maps::{Array, HashMap, Map, MapData, PerCpuArray, PerCpuHashMap, StackTraceMap},
    Ebpf,
};
use gpudirect_trace_common::{
    maps as names, Counter, CounterKey, CpuState, DeviceName, InvalKey, IovaState, LatHist, LatKey,
    MapKey, MapValue, TaskState,
};

use super::{lifetime_table::SlotTable, ring::EventRing};

pub struct Maps {
    /// The event stream, until a session driver takes it.
    pub ring: Option<EventRing>,
    pub devices: HashMap<MapData, u64, DeviceName>,
    pub stats: PerCpuArray<MapData, u64>,
    pub hits: PerCpuArray<MapData, u64>,
    pub counters: PerCpuHashMap<MapData, CounterKey, Counter>,
    /// Each CPU's hot-path state, whose counter cache holds counts not yet
    /// in `counters`.
    pub cpu_state: PerCpuArray<MapData, CpuState>,
    pub latency: PerCpuHashMap<MapData, LatKey, LatHist>,
    /// Per (device, invalidation class) log2 histograms (aggregate-only).
    pub invalidations: PerCpuHashMap<MapData, InvalKey, LatHist>,
    /// Written by userspace only in tests (setting a task's timing state).
    #[cfg_attr(not(any(test, feature = "test-support")), allow(dead_code))]
    pub tasks: HashMap<MapData, u32, TaskState>,
    pub mappings: HashMap<MapData, MapKey, MapValue>,
    /// The slot form of the mapping table, when in use (`lifetime::SLOTS`).
    pub mapping_slots: Option<SlotTable>,
    /// Live IOVA-API states (their links are outstanding mappings).
    pub iova_states: HashMap<MapData, u64, IovaState>,
    /// Kernel stacks of DMA-API calls (`--stacks`).
    pub stacks: StackTraceMap<MapData>,
    /// Settings written after load (`gpudirect_trace_common::runtime`).
    pub runtime: Array<MapData, u32>,
}

fn take<T>(ebpf: &mut Ebpf, name: &str) -> anyhow::Result<T>
where
    T: TryFrom<Map>,
    <T as TryFrom<Map>>::Error: std::error::Error + Send + Sync + 'static,
{
    let map = ebpf
        .take_map(name)
        .with_context(|| format!("the eBPF object has no map {name}"))?;
    T::try_from(map).with_context(|| format!("map {name} has an unexpected type"))
}

/// The event stream, read by our own reader (`super::ring`).
fn take_ring(ebpf: &mut Ebpf) -> anyhow::Result<EventRing> {
    let map = ebpf
        .take_map(names::EVENTS)
        .with_context(|| format!("the eBPF object has no map {}", names::EVENTS))?;
    let Map::RingBuf(data) = map else {
        anyhow::bail!("map {} is not a ring buffer", names::EVENTS);
    };
    EventRing::new(data)
}

impl Maps {
    /// The maps; `slots`: the slot table is in use and gets read.
    pub fn take(ebpf: &mut Ebpf, slots: bool) -> anyhow::Result<Self> {
        let mapping_slots = if slots {
            let map = ebpf
                .map(names::MAPPING_SLOTS)
                .with_context(|| format!("the eBPF object has no map {}", names::MAPPING_SLOTS))?;
            let Map::Array(data) = map else {
                anyhow::bail!("map {} is not an array", names::MAPPING_SLOTS);
            };
            Some(SlotTable::open(data)?)
        } else {
            None
        };
        Ok(Self {
            ring: Some(take_ring(ebpf)?),
            devices: take(ebpf, names::DEVICES)?,
            stats: take(ebpf, names::STATS)?,
            hits: take(ebpf, names::HITS)?,
            counters: take(ebpf, names::DEV_COUNTERS)?,
            cpu_state: take(ebpf, names::CPU_STATE)?,
            latency: take(ebpf, names::LAT_HIST)?,
            invalidations: take(ebpf, names::INVAL_HIST)?,
            tasks: take(ebpf, names::TASKS)?,
            mappings: take(ebpf, names::MAPPINGS)?,
            mapping_slots,
            iova_states: take(ebpf, names::IOVA_STATES)?,
            stacks: take(ebpf, names::STACKS)?,
            runtime: take(ebpf, names::RUNTIME)?,
        })
    }
}

/// Slot `i` of a per-CPU counter array (`STATS`, `HITS`), summed over CPUs;
/// 0 when unreadable.
pub fn cpu_sum(map: &PerCpuArray<MapData, u64>, i: u32) -> u64 {
    map.get(&i, 0).map(|v| v.iter().sum()).unwrap_or(0)
}
