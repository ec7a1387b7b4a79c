//! The tracer's self-metrics, declared once (docs/metrics.md's table is made from them).

use super::Metric;

pub const PROBE_ATTACHED: Metric = Metric::gauge(
    "gpudirect_probe_attached",
    &["probe", "kind"],
    "1 if the probe is attached on this kernel, else 0.",
    "1 when the probe is attached on this kernel, 0 when unavailable or failed \
     (`gpudirect-trace probes` says why)",
);

pub const EVENTS_TOTAL: Metric = Metric::counter(
    "gpudirect_events",
    &["kind"],
    "Tracepoint hits counted in-kernel (loss-free), by event kind.",
    "tracepoint hits counted in-kernel, by event kind (`dma_map`, `iommu_map`, \
     `io_page_fault`, `nvidia_xid`, …)",
);

pub const EVENTS_RECEIVED_TOTAL: Metric = Metric::counter(
    "gpudirect_events_received",
    &[],
    "Event records received from the ring buffer.",
    "event records received from the ring buffer",
);

pub const EVENTS_LOST_TOTAL: Metric = Metric::counter(
    "gpudirect_events_lost",
    &[],
    "Event records the ring buffer had no room for.",
    "event records the ring buffer had no room for",
);

pub const EVENTS_MISSED_TOTAL: Metric = Metric::counter(
    "gpudirect_events_missed",
    &[],
    "Program runs the kernel skipped: already running on that CPU (recursion_misses), or \
     a kprobe hit inside another kprobe or bpf() call (kprobe_profile).",
    "program runs the kernel skipped: the program already running on that CPU \
     (`recursion_misses`, e.g. a tracepoint hit from an interrupt), or a kprobe hit \
     inside another kprobe or bpf() call (`kprobe_profile`, docs/probes.md): events \
     neither streamed nor counted",
);

pub const STACKS_LOST_TOTAL: Metric = Metric::counter(
    "gpudirect_stacks_lost",
    &[],
    "DMA-API calls whose kernel stack could not be kept (--stacks: the stack map full, or \
     three hash buckets taken).",
    "DMA-API calls whose kernel stack could not be kept (`--stacks`): the stack map full, \
     or the stack's bucket taken by another stack three times (with one and two innermost \
     frames skipped)",
);

pub const EVENTS_UNDECODABLE_TOTAL: Metric = Metric::counter(
    "gpudirect_events_undecodable",
    &[],
    "Event records that could not be decoded.",
    "records that did not decode (a bug if ever non-zero)",
);

pub const TIMINGS_SKIPPED_TOTAL: Metric = Metric::counter(
    "gpudirect_timings_skipped",
    &[],
    "Timed calls not timed: both nesting slots of their level were in flight.",
    "timed calls not timed: both nesting slots of their level were in flight on the task \
     (docs/probes.md)",
);

pub const MAPPINGS_UNTRACKED_TOTAL: Metric = Metric::counter(
    "gpudirect_mappings_untracked",
    &[],
    "DMA-API mappings the in-kernel mapping table (aggregate-only, or --stacks) had no room for.",
    "DMA-API mappings the in-kernel mapping table had no room for: in aggregate-only mode \
     no lifetime and not listed as outstanding; with `--stacks` (streaming) their unmaps \
     take a stack",
);

pub const UNMAPS_UNMATCHED_TOTAL: Metric = Metric::counter(
    "gpudirect_unmaps_unmatched",
    &[],
    "Unmaps whose mapping the in-kernel table (aggregate-only, or --stacks) did not hold.",
    "unmaps whose mapping the in-kernel table (aggregate-only, or `--stacks` in streaming \
     mode) did not hold: mapped before the trace, or untracked; with `--stacks` each took \
     a stack",
);

pub const DEVICES_FOLDED_TOTAL: Metric = Metric::counter(
    "gpudirect_devices_folded",
    &[],
    "Devices reported as device=\\\"other\\\" (past --max-devices).",
    "devices reported as `device=\"other\"`",
);

/// In the order docs/metrics.md lists them.
pub const ALL: &[&Metric] = &[
    &PROBE_ATTACHED,
    &EVENTS_TOTAL,
    &EVENTS_RECEIVED_TOTAL,
    &EVENTS_LOST_TOTAL,
    &EVENTS_MISSED_TOTAL,
    &STACKS_LOST_TOTAL,
    &EVENTS_UNDECODABLE_TOTAL,
    &TIMINGS_SKIPPED_TOTAL,
    &MAPPINGS_UNTRACKED_TOTAL,
    &UNMAPS_UNMATCHED_TOTAL,
    &DEVICES_FOLDED_TOTAL,
];
