//! Command-line interface: one subcommand per job.

use std::{process::ExitCode, time::Duration};

use clap::{Args, Parser, Subcommand};

use crate::{ebpf::DmaSource, live, probes};

const ABOUT: &str = "Trace DMA, IOMMU and GPUDirect paths with eBPF: per-device DMA activity, \
translation, faults and NVIDIA Xids.";

const LONG_ABOUT: &str = "\
Trace DMA, IOMMU and GPUDirect paths with eBPF.

gpudirect-trace attaches eBPF programs to the kernel's iommu:*, dma:* and
swiotlb:* tracepoints and the NVIDIA driver's nvidia:nvidia_dev_xid, and
aggregates what they see per device (PCI bus id): mappings, bytes by
direction, mapped sizes, outstanding mappings, bounce buffering, faults, Xids.

Start with:
  gpudirect-trace probes          what this kernel offers, what attached
  gpudirect-trace live            per-device table, refreshed every second
  gpudirect-trace serve           Prometheus metrics on http://127.0.0.1:9435/metrics

Needs root (or CAP_BPF + CAP_PERFMON) and a kernel with BPF ring buffers (5.8+).";

#[derive(Parser, Debug)]
#[command(name = "gpudirect-trace", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// List every probe point with its status on this kernel (attached,
    /// unavailable, failed) and why.
    ///
    /// Loads and attaches all programs once (so the verifier and the kernel
    /// answer for real), prints the table and detaches.
    Probes(ProbesArgs),
    /// Live per-device DMA/IOMMU view, refreshed every interval.
    ///
    /// On a terminal the table redraws in place; piped, one plain snapshot is
    /// printed per interval; with --json one JSON object per line. Ctrl-C or
    /// --duration ends it with a final summary.
    ///
    /// Example: gpudirect-trace live --device 0000:00:06.0 --interval 2s
    Live(LiveArgs),
    /// Check the host's DMA/IOMMU/PCIe setup for GPUDirect RDMA and GPU P2P.
    ///
    /// Reads /sys and /proc only (or a captured tree with --root): IOMMU mode and
    /// groups, kernel parameters, PCIe links, MaxPayload/MaxReadReq, ACS on the
    /// bridges between GPUs and NICs, BAR sizes, NUMA and IRQ affinity, NVIDIA
    /// driver parameters. Each finding shows the file and value it came from.
    /// `--capture OUT.tar.gz` saves that data for a bug report. Exit status: 0 no
    /// problem found, 2 some finding is a `problem`, 1 error.
    Doctor(crate::doctor::DoctorArgs),
    /// Explain DMA/IOMMU/GPU/PCIe faults found in a kernel log.
    ///
    /// Decodes Intel VT-d (DMAR), AMD-Vi and ARM SMMU fault lines, NVIDIA Xid
    /// reports and PCIe AER errors from `dmesg`, `dmesg -T`, `journalctl -k`
    /// or raw /dev/kmsg text into one fault object each: device, address,
    /// access, reason from the kernel's own tables, and what to check first.
    /// Rate-limited VT-d faults are reported as counts. Without a file it
    /// reads what is in /dev/kmsg now and returns.
    ///
    /// Example: dmesg | gpudirect-trace explain -
    Explain(crate::faults::ExplainArgs),
    /// Run the probes continuously and serve Prometheus metrics over HTTP.
    ///
    /// `GET /metrics` answers in the Prometheus text format, or OpenMetrics
    /// when the scrape's Accept header asks for application/openmetrics-text;
    /// `GET /healthz` says whether the tracer is being drained. Counters are
    /// the loss-free in-kernel totals, read at every scrape. Labels are
    /// bounded: a device label per PCI device (at most --max-devices, the rest
    /// fold into device="other"), never addresses or pids. Listens on
    /// loopback unless --listen says otherwise. docs/metrics.md lists every
    /// metric; deploy/ has a systemd unit, a DaemonSet and a Grafana dashboard.
    ///
    /// Example: gpudirect-trace serve --listen 127.0.0.1:9435
    Serve(crate::serve::ServeArgs),
    /// Record events to a trace file until Ctrl-C, --duration, or CMD's exit
    ///
    /// Writes the per-event stream (unless --aggregate-only), loss records and
    /// per-second checkpoints of the kernel's per-device counters into FILE
    /// (format: docs/trace-format.md), flushed every second: a recorder killed
    /// at any moment leaves a file that reads up to its last second. With
    /// `-- CMD ARGS`, runs CMD and exits with its status, like `perf record`.
    ///
    /// Examples:
    ///   gpudirect-trace record -o dma.gdt --duration 30s
    ///   gpudirect-trace record -o nccl.gdt -- ./all_reduce_perf -b 8 -e 1G
    #[command(verbatim_doc_comment)]
    Record(crate::record::RecordArgs),
    /// Per-device tables, losses, faults and Xids of a trace file
    ///
    /// The same tables as `live`, for the whole recording or a window of it
    /// (--from/--to count from the start of the recording). A file cut short
    /// (recorder killed, disk full) is read up to its last complete block,
    /// with a warning naming the byte offset where the readable part ends.
    ///
    /// Examples:
    ///   gpudirect-trace report dma.gdt
    ///   gpudirect-trace report dma.gdt --device 0000:41:00.0 --from 2s --to 5s
    ///   gpudirect-trace report dma.gdt --html dma.html   (self-contained page with plots)
    #[command(verbatim_doc_comment)]
    Report(crate::report::ReportArgs),
    /// Convert a trace file: JSON lines, Chrome/Perfetto JSON, HdrHistogram logs
    ///
    /// JSON lines: one object per event (and per loss record). Chrome: the
    /// trace-event format, one track per device, mappings as spans from map
    /// to unmap. hdr: HdrHistogram V2 interval logs of mapped sizes per
    /// device and operation, one interval per second.
    ///
    /// --redact replaces physical addresses with per-file pseudonyms so a
    /// trace can be shared (IOVAs, DMA addresses and bus ids stay).
    ///
    /// Examples:
    ///   gpudirect-trace export dma.gdt --format jsonl | jq 'select(.kind=="io_page_fault")'
    ///   gpudirect-trace export dma.gdt --format chrome -o dma.json   (open in ui.perfetto.dev)
    ///   gpudirect-trace export dma.gdt --format hdr -o sizes.hlog
    ///   gpudirect-trace export dma.gdt --format jsonl --redact -o shareable.jsonl
    #[command(verbatim_doc_comment)]
    Export(crate::export::ExportArgs),
    /// Checks of the tool's own machinery on this kernel (for its tests)
    #[command(hide = true)]
    Selftest(crate::selftest::SelftestArgs),
}

#[derive(Args, Debug)]
pub struct ProbesArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Exit with status 3 if any probe failed (unavailable ones are fine).
    #[arg(long)]
    pub strict: bool,
    /// As for `live`: which programs would report the DMA-API operations.
    #[arg(long, value_enum, default_value_t = DmaSource::Auto, value_name = "SOURCE")]
    pub dma_source: DmaSource,
}

#[derive(Args, Debug, Clone)]
pub struct TraceArgs {
    /// Count in kernel maps only; stream rare events (faults, Xids) but not
    /// every map/unmap. For hosts with millions of mappings per second.
    #[arg(long)]
    pub aggregate_only: bool,
    /// With --aggregate-only: do not keep DMA-API mappings in a kernel table.
    /// Saves ~200 ns per map and per unmap (docs/benchmarks.md) at the price
    /// of mapping lifetimes, outstanding counts and long-lived listings.
    #[arg(long, requires = "aggregate_only")]
    pub no_lifetimes: bool,
    /// BPF ring buffer size in bytes (rounded up to a power of two).
    #[arg(long, default_value_t = 8 << 20, value_name = "BYTES")]
    pub ring_size: u32,
    /// Fail (exit 3) if any probe failed to load or attach.
    #[arg(long)]
    pub strict: bool,
    /// Where DMA-API maps, unmaps and syncs come from: the dma:* tracepoints
    /// (6.8+, cheaper), or the fentry/kprobe hooks on the DMA-API functions
    /// (every kernel). auto takes the tracepoints where they exist and the
    /// hooks for the rest; hooks forces them (to compare the two).
    #[arg(long, value_enum, default_value_t = DmaSource::Auto, value_name = "SOURCE")]
    pub dma_source: DmaSource,
    /// Scatterlist entries walked per map at most, for its byte total. A
    /// longer list is counted as truncated and its bytes shown as a lower
    /// bound. Each entry costs ~30 ns (docs/benchmarks.md).
    #[arg(long, default_value_t = gpudirect_trace_common::SG_WALK_DEFAULT, value_name = "ENTRIES",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub sg_walk_max: u32,
}

#[derive(Args, Debug)]
pub struct LiveArgs {
    /// Refresh interval (e.g. 500ms, 1s, 2m).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Stop after this long (default: until Ctrl-C).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Show only this device (PCI bus id such as 0000:00:06.0, or a device
    /// name); repeat for several.
    #[arg(long = "device", value_name = "BDF")]
    pub devices: Vec<String>,
    /// One JSON object per interval on stdout.
    #[arg(long)]
    pub json: bool,
    /// Mappings still outstanding after this long are listed as leak
    /// suspects (with --aggregate-only: DMA-API mappings, from the kernel's
    /// table).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub long_lived: Duration,
    #[command(flatten)]
    pub trace: TraceArgs,
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 1s, 2m)"))?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Probes(args) => probes::run(&args),
        Command::Live(args) => live::run(&args),
        Command::Doctor(args) => crate::doctor::run(&args),
        Command::Explain(args) => crate::faults::run_explain(&args),
        Command::Serve(args) => crate::serve::run(&args),
        Command::Record(args) => crate::record::run(&args),
        Command::Report(args) => crate::report::run(&args),
        Command::Export(args) => crate::export::run(&args),
        Command::Selftest(args) => crate::selftest::run(&args),
    }
}
