//! The command-line interface: one file per subcommand, each holding its
//! arguments and the code that turns them into the core's options and runs
//! it (as cargo keeps `cli()` and `exec()` together in `commands/*.rs`).
//! Nothing outside this module and `main.rs` sees clap's types.

mod doctor;
mod explain;
mod export;
mod flight;
mod import;
mod live;
mod probes;
mod record;
mod report;
mod selftest;
mod serve;
pub mod trace;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
  gpudirect-trace record -o F     the same into a trace file; report/export read it
  gpudirect-trace serve           Prometheus metrics on http://127.0.0.1:9435/metrics
  gpudirect-trace doctor          check the host's IOMMU/PCIe/GPU setup
  gpudirect-trace explain FILE    decode fault lines of a kernel log
  gpudirect-trace import T -o F   ftrace text of dma/iommu tracepoints into a trace file (no eBPF)

Times are seconds since the start of the trace everywhere (JSON also has
the kernel's monotonic nanoseconds and, where known, the wall-clock time).

Needs root (or CAP_BPF + CAP_PERFMON) and a kernel with BPF ring buffers (5.8+).
Exit status: 0 success, 1 error, 2 usage error, 3 --strict and a probe failed,
4 doctor found a problem.";

#[derive(Parser, Debug)]
#[command(name = "gpudirect-trace", version, long_version = crate::version::long_version(), about = ABOUT, long_about = LONG_ABOUT)]
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
    Probes(probes::ProbesArgs),
    /// Live per-device DMA/IOMMU view, refreshed every interval.
    ///
    /// On a terminal the table redraws in place; piped, one plain snapshot is
    /// printed per interval; with --json one JSON object per line. Ctrl-C,
    /// SIGTERM, SIGHUP or --duration ends it with a final summary.
    ///
    /// Example: gpudirect-trace live --device 0000:00:06.0 --interval 2s
    Live(live::LiveArgs),
    /// Check the host's DMA/IOMMU/PCIe setup for GPUDirect RDMA and GPU P2P.
    ///
    /// Reads /sys and /proc only (or a captured tree with --root): IOMMU mode and
    /// groups, kernel parameters, PCIe links, MaxPayload/MaxReadReq, ACS on the
    /// bridges between GPUs and NICs, BAR sizes, NUMA and IRQ affinity, NVIDIA
    /// driver parameters. Each finding shows the file and value it came from.
    /// `--capture OUT.tar.gz` saves that data for a bug report. Exit status: 0 no
    /// problem found, 4 some finding is a `problem`, 1 error, 2 usage error.
    Doctor(doctor::DoctorArgs),
    /// Explain DMA/IOMMU/GPU/PCIe faults found in a kernel log.
    ///
    /// Decodes Intel VT-d (DMAR), AMD-Vi, ARM SMMU and virtio-iommu fault lines, NVIDIA Xid
    /// reports and PCIe AER errors from `dmesg`, `dmesg -T`, `journalctl -k`
    /// or raw /dev/kmsg text into one fault object each: device, address,
    /// access, reason from the kernel's own tables, and what to check first.
    /// Rate-limited VT-d faults are reported as counts. Without a file it
    /// reads what is in /dev/kmsg now and returns.
    ///
    /// Example: dmesg | gpudirect-trace explain -
    Explain(explain::ExplainArgs),
    /// Run the probes continuously and serve Prometheus metrics over HTTP.
    ///
    /// `GET /metrics` answers in the Prometheus text format, or OpenMetrics
    /// when the scrape's Accept header asks for application/openmetrics-text;
    /// `GET /healthz` says whether the tracer is being drained. Counters are
    /// the loss-free in-kernel totals, refreshed every second. Labels are
    /// bounded: a device label per PCI device (at most --max-devices, the rest
    /// fold into device="other"), never addresses or pids. Listens on
    /// loopback unless --listen says otherwise; --web.config.file adds TLS,
    /// client certificates and basic auth. docs/metrics.md lists every
    /// metric; deploy/ has a systemd unit, a DaemonSet, a Grafana dashboard
    /// and Prometheus alerting rules.
    ///
    /// Example: gpudirect-trace serve --listen 127.0.0.1:9435
    Serve(serve::ServeArgs),
    /// Record events to a trace file until Ctrl-C, --duration, or CMD's exit
    ///
    /// Writes the per-event stream (unless --aggregate-only), the faults the
    /// kernel log reports, loss records and per-second checkpoints of the
    /// kernel's per-device counters into FILE (format: docs/trace-format.md),
    /// flushed every second: a recorder killed at any moment leaves a file
    /// that reads up to its last second. With `-- CMD ARGS`, runs CMD and
    /// exits with its status, like `perf record`.
    ///
    /// Examples:
    ///   gpudirect-trace record -o dma.gdt --duration 30s
    ///   gpudirect-trace record -o nccl.gdt -- ./all_reduce_perf -b 8 -e 1G
    #[command(verbatim_doc_comment)]
    Record(record::RecordArgs),
    /// Per-device tables, losses, faults and Xids of a trace file (or a fleet's)
    ///
    /// The same tables and incidents as `live`, for the whole recording or a
    /// window of it (--from/--to count from the start of the recording). A
    /// file cut short (recorder killed, disk full) is read up to its last
    /// complete block, with a warning naming the byte offset where the
    /// readable part ends. Over many files or a directory (a fleet's
    /// snapshots, any number of hosts): one summary of hosts, GPUs,
    /// incidents by kind, each host's first cause and what hosts share.
    ///
    /// Examples:
    ///   gpudirect-trace report dma.gdt
    ///   gpudirect-trace report dma.gdt --device 0000:41:00.0 --from 2s --to 5s
    ///   gpudirect-trace report dma.gdt --html dma.html   (self-contained page with plots)
    ///   gpudirect-trace report /srv/snapshots/ --html fleet.html   (every *.gdt below)
    #[command(verbatim_doc_comment)]
    Report(report::ReportArgs),
    /// Convert a trace file: JSON lines, Chrome/Perfetto JSON, HdrHistogram logs
    ///
    /// JSON lines: one object per event (and per loss record and log fault);
    /// a process exit (`"kind":"process_exit"`, device `(processes)`) names
    /// the process in `comm` and its cgroup v2 id in `cgroup_id`. Chrome:
    /// the trace-event format, one track per device, mappings as spans from
    /// map to unmap. hdr: HdrHistogram V2 interval logs of mapped sizes per
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
    Export(export::ExportArgs),
    /// Turn ftrace text of the dma, iommu and swiotlb tracepoints into a trace file
    ///
    /// For hosts where no eBPF program may be loaded (lockdown, no BPF) but
    /// tracefs is there: enable the kernel's own tracepoints, run the
    /// workload, save the text, and import it. `report`, `export` and
    /// `report --html` then read the file as they read a recording: per-device
    /// maps, bytes, sizes, lifetimes, outstanding mappings, IOMMU faults,
    /// bounce buffering, and the losses the kernel's ring reported.
    ///
    /// Reads the tracefs `trace` file of any kernel (with or without
    /// record-tgid), `trace-cmd report` and `perf script` output, plain,
    /// gzip or zstd. ftrace prints no wall clock, host or kernel: times are
    /// the trace's own clock (since boot, as the kernel log's), and tracepoints
    /// it does not read are counted by name in the summary. The kernel prints
    /// a dma_unmap_sg's physical addresses only: its DMA address and size are
    /// those of the dma_map_sg of the same pages, where the text has it.
    ///
    /// Examples:
    ///   cd /sys/kernel/tracing && echo 1 > events/dma/enable && echo 1 > events/iommu/enable
    ///   cat trace > /tmp/dma.txt      (or: trace-cmd record -e dma -e iommu; trace-cmd report)
    ///   gpudirect-trace import /tmp/dma.txt -o dma.gdt && gpudirect-trace report dma.gdt
    #[command(verbatim_doc_comment)]
    Import(import::ImportArgs),
    /// Checks of the tool's own machinery on this kernel (for its tests)
    #[command(hide = true)]
    Selftest(selftest::SelftestArgs),
}

/// Options that parse one by one but not together (clap cannot say it) in
/// `subcommand`: clap's own usage error, printed as clap prints it (with the
/// subcommand's usage) and exit status 2, so that a script tells a wrong
/// command line from a failure of the work.
fn usage(subcommand: &str, what: &str) -> anyhow::Error {
    let mut cli = <Cli as clap::CommandFactory>::command();
    let cmd = cli.find_subcommand_mut(subcommand).cloned();
    let mut cmd = cmd
        .unwrap_or(cli)
        .bin_name(format!("gpudirect-trace {subcommand}"));
    cmd.error(clap::error::ErrorKind::ArgumentConflict, what)
        .into()
}

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    start_logging(cli.command.verbose());
    let result = match cli.command {
        Command::Probes(a) => probes::exec(&a),
        Command::Live(a) => live::exec(&a),
        Command::Doctor(a) => doctor::exec(&a),
        Command::Explain(a) => explain::exec(&a),
        Command::Serve(a) => serve::exec(&a),
        Command::Record(a) => record::exec(&a),
        Command::Report(a) => report::exec(&a),
        Command::Export(a) => export::exec(&a),
        Command::Import(a) => import::exec(&a),
        Command::Selftest(a) => selftest::exec(&a),
    };
    // Out of file descriptors, wherever it struck, is said first (it read
    // as the kernel refusing a map, or a map of the wrong type).
    result.map_err(|e| match crate::ebpf::explain::out_of_descriptors(&e) {
        Some(why) if !format!("{e:#}").contains("ulimit -n") => e.context(why),
        _ => e,
    })
}

impl Command {
    /// `-v`, on the commands that load the eBPF programs.
    fn verbose(&self) -> bool {
        match self {
            Self::Probes(a) => a.verbose,
            Self::Live(a) => a.trace.verbose,
            Self::Serve(a) => a.trace.verbose,
            Self::Record(a) => a.trace.verbose,
            _ => false,
        }
    }
}

/// The `log` crate's logger, on stderr: what RUST_LOG asks for (errors
/// only without it, as env_logger does), and with `-v` debug messages too.
/// The eBPF programs' debug messages are asked for only when shown
/// (`ebpf::ProgramLog::wanted`), so this comes before any loading.
fn start_logging(verbose: bool) {
    let mut b = env_logger::Builder::new();
    b.parse_env(env_logger::Env::default());
    if verbose {
        b.filter_level(log::LevelFilter::Debug);
    }
    // Err only if a logger is set already (a second run in one process).
    let _ = b.try_init();
}
