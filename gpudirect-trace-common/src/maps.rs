/// The event stream (its size is set by the loader).
pub const EVENTS: &str = "EVENTS";
/// Default ring size in the object, before the loader sets its own.
pub const EVENTS_DEFAULT_BYTES: u32 = 4 << 20;
/// Self-metrics, indexed by `stat`.
pub const STATS: &str = "STATS";
/// Hits per event kind that no counter could take.
pub const HITS: &str = "HITS";
/// Per (device, kind, direction, nesting slot) counts and bytes.
pub const DEV_COUNTERS: &str = "DEV_COUNTERS";
pub const DEV_COUNTERS_CAP: u32 = 8192;
/// Per-CPU hot-path bookkeeping (nesting depth, wake-up checks).
pub const CPU_STATE: &str = "CPU_STATE";
/// `struct device *` -> name.
pub const DEVICES: &str = "DEVICES";
pub const DEVICES_CAP: u32 = 4096;
/// Per-task timing state (LRU).
pub const TASKS: &str = "TASKS";
pub const TASKS_CAP: u32 = 16384;
/// IOMMU domain -> device.
pub const DOMAIN_DEVS: &str = "DOMAIN_DEVS";
pub const DOMAIN_DEVS_CAP: u32 = 4096;
/// Per (device, op) log2 latency histograms.
pub const LAT_HIST: &str = "LAT_HIST";
pub const LAT_HIST_CAP: u32 = 4096;
/// Outstanding DMA-API mappings (aggregate-only lifetimes).
pub const MAPPINGS: &str = "MAPPINGS";
pub const MAPPINGS_CAP: u32 = 65536;
/// Outstanding DMA-API mappings, the slot form (`lifetime::SLOTS`); one
/// slot unless in use.
pub const MAPPING_SLOTS: &str = "MAPPING_SLOTS";
/// Scatter-gather records under construction, one per program.
pub const SG_SCRATCH: &str = "SG_SCRATCH";
/// Settings the loader writes after load (`runtime`).
pub const RUNTIME: &str = "RUNTIME";
/// Tail-call continuations of bounded scatterlist walks (kernels
/// without bpf_loop()), per program type: tracing, kprobe, raw tracepoint.
pub const SG_CONT_T: &str = "SG_CONT_T";
pub const SG_CONT_K: &str = "SG_CONT_K";
pub const SG_CONT_R: &str = "SG_CONT_R";
/// Kernel stacks of DMA-API calls (`--stacks`); one entry when off.
pub const STACKS: &str = "STACKS";
pub const STACKS_CAP: u32 = 8192;
/// All-zero initial values of new task states and histograms.
pub const ZERO_TASK: &str = "ZERO_TASK";
pub const ZERO_HIST: &str = "ZERO_HIST";
/// Per-task state of the invalidation hooks (LRU).
pub const INVAL_TASKS: &str = "INVAL_TASKS";
pub const INVAL_TASKS_CAP: u32 = 16384;
/// Per (device, invalidation class) log2 latency histograms
/// (aggregate-only mode).
pub const INVAL_HIST: &str = "INVAL_HIST";
pub const INVAL_HIST_CAP: u32 = 1024;
/// Live IOVA-API states (`struct dma_iova_state *` -> `IovaState`): links
/// per state, so that dma_iova_destroy counts the unmaps it makes.
pub const IOVA_STATES: &str = "IOVA_STATES";
pub const IOVA_STATES_CAP: u32 = 16384;
/// The device argument of dma_need_unmap() in flight, per task, for its
/// kretprobe (which sees only the return value).
pub const NEED_UNMAP_ARGS: &str = "NEED_UNMAP_ARGS";
pub const NEED_UNMAP_ARGS_CAP: u32 = 4096;
/// Devices for which dma_need_unmap() said false: their DMA-API maps are
/// not put into `MAPPINGS` (the kernel will not unmap them).
pub const NO_UNMAP_DEVS: &str = "NO_UNMAP_DEVS";
pub const NO_UNMAP_DEVS_CAP: u32 = 4096;
/// One flag: whether `NO_UNMAP_DEVS` holds anything (the map path's cheap
/// test before the hash).
pub const NO_UNMAP_ANY: &str = "NO_UNMAP_ANY";
/// Every map of the object.
pub const ALL: [&str; 25] = [
    EVENTS,
    STATS,
    HITS,
    DEV_COUNTERS,
    CPU_STATE,
    DEVICES,
    TASKS,
    DOMAIN_DEVS,
    LAT_HIST,
    MAPPINGS,
    MAPPING_SLOTS,
    SG_SCRATCH,
    RUNTIME,
    SG_CONT_T,
    SG_CONT_K,
    SG_CONT_R,
    ZERO_TASK,
    ZERO_HIST,
    STACKS,
    INVAL_TASKS,
    INVAL_HIST,
    IOVA_STATES,
    NEED_UNMAP_ARGS,
    NO_UNMAP_DEVS,
    NO_UNMAP_ANY,
];
