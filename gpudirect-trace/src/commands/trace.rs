//! Options shared by the subcommands that trace (live, record, serve), and
//! the parsers of values several subcommands take.

use std::time::Duration;

use clap::Args;

use crate::{outfile, session::SessionOptions};

/// The flags every command that writes a file takes.
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct OutputFlags {
    /// Replace the output file if it exists (the new file takes its place
    /// only once it is written; a symlink is replaced, never followed).
    #[arg(long)]
    pub force: bool,
    /// Allow a device node, FIFO or socket as output (e.g. /dev/stdout);
    /// it is written as it is, never truncated or chmod-ed.
    #[arg(long)]
    pub output_special: bool,
}

impl From<OutputFlags> for outfile::Options {
    fn from(f: OutputFlags) -> Self {
        Self {
            force: f.force,
            allow_special: f.output_special,
            ..Self::default()
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct TraceArgs {
    /// Count in kernel maps only; stream rare events (faults, Xids) but not
    /// every map/unmap. For hosts with millions of mappings per second.
    #[arg(long)]
    pub aggregate_only: bool,
    /// With --aggregate-only: do not keep DMA-API mappings in a kernel table.
    /// Saves the table's cost (~25 ns per map and ~10 per unmap, more with
    /// --lifetime-sample 1: docs/benchmarks.md) at the price of mapping
    /// lifetimes, outstanding counts and long-lived listings.
    #[arg(long, requires = "aggregate_only")]
    pub no_lifetimes: bool,
    /// With --aggregate-only: time the lifetime of one mapping in N, chosen
    /// at random (a power of two; 1 times every one). Every mapping is still
    /// counted, kept and dated, so outstanding counts and the oldest
    /// mappings stay exact; only the lifetime histogram is a sample. The
    /// clock is most of a lifetime's cost (docs/benchmarks.md).
    #[arg(
        long,
        value_name = "N",
        default_value_t = gpudirect_trace_common::lifetime::DEFAULT_SAMPLE,
        value_parser = parse_lifetime_sample,
        requires = "aggregate_only",
        conflicts_with = "no_lifetimes"
    )]
    pub lifetime_sample: u32,
    /// BPF ring buffer size in bytes (rounded up to a power of two; 4096 to
    /// 2147483648).
    #[arg(
        long,
        default_value_t = crate::ebpf::DEFAULT_RING_BYTES,
        value_name = "BYTES",
        value_parser = parse_ring_size
    )]
    pub ring_size: u32,
    /// Exit with status 3 if any probe failed to load or attach
    /// (unavailable ones are normal: kernels differ).
    #[arg(long)]
    pub strict: bool,
    /// Check DMA-API use as the kernel's dma-debug does (double unmaps,
    /// size/direction/API mismatches, syncs after unmap or outside the
    /// mapping, overlapping cachelines, leaks at driver unbind, maps of
    /// kernel text), on kernels built without CONFIG_DMA_API_DEBUG. Only
    /// what the trace proves is reported: handles mapped before the trace
    /// started are counted as unknown.
    #[arg(long, conflicts_with = "aggregate_only")]
    pub check: bool,
    /// With --check: take kernel stacks of DMA-API calls, so each finding
    /// shows the code that mapped and the code that misused. Every map
    /// takes one; an unmap or a single sync only where it may be a finding
    /// (its mapping is not in the kernel's table with the same API, size
    /// and direction), since a stack costs 1-2 us on a driver's path.
    #[arg(long, requires = "check")]
    pub stacks: bool,
    /// With --stacks: every unmap and sync takes its stack too, so that
    /// `export` shows each call's (about twice the cost of --stacks on a
    /// map-unmap pair).
    #[arg(long, requires = "stacks")]
    pub stacks_every_call: bool,
    /// With --stacks: frames kept per stack, 1 to 127. Fewer take less
    /// kernel memory (8 MiB at 127, 1 MiB at 16); the time they save
    /// depends on the driver's stacks and varied between runs on a GPU's
    /// real calls, from ~40% of a scatterlist map to nothing
    /// (docs/benchmarks.md, "Kernel stacks"). The innermost few are the
    /// tracer's own and the DMA-API's, the driver's follow.
    #[arg(long, requires = "stacks", value_name = "FRAMES",
          default_value_t = crate::ebpf::DEFAULT_STACK_DEPTH,
          value_parser = clap::value_parser!(u32).range(1..=127))]
    pub stack_depth: u32,
    /// Where DMA-API maps, unmaps and syncs come from: the dma:* tracepoints
    /// (6.8+, cheaper), or the fentry/kprobe hooks on the DMA-API functions
    /// (every kernel). auto takes the tracepoints where they exist and the
    /// hooks for the rest; hooks forces them (to compare the two).
    #[arg(long, value_enum, default_value_t = DmaSourceArg::Auto, value_name = "SOURCE")]
    pub dma_source: DmaSourceArg,
    /// Scatterlist entries walked per map at most, for its byte total. A
    /// longer list is counted as truncated and its bytes shown as a lower
    /// bound. Each entry costs ~30 ns (docs/benchmarks.md).
    #[arg(long, default_value_t = gpudirect_trace_common::SG_WALK_DEFAULT, value_name = "ENTRIES",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub sg_walk_max: u32,
    /// Debug messages on stderr, among them what the eBPF programs find odd
    /// (a scatterlist walk cut short, a hook that lost its arguments, a
    /// full map). RUST_LOG=debug does the same; RUST_LOG=ebpf=debug shows
    /// the programs' alone.
    #[arg(short, long)]
    pub verbose: bool,
}

/// `--dma-source`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DmaSourceArg {
    /// The dma:* tracepoints where the kernel has them (6.8+, cheaper),
    /// the hooks on the DMA-API functions for the operations they miss.
    Auto,
    /// Only the dma:* tracepoints (no DMA-API records before 6.8).
    Tracepoints,
    /// Only the hooks, even where the tracepoints exist (for comparing).
    Hooks,
}

impl From<DmaSourceArg> for crate::ebpf::DmaSource {
    fn from(a: DmaSourceArg) -> Self {
        match a {
            DmaSourceArg::Auto => Self::Auto,
            DmaSourceArg::Tracepoints => Self::Tracepoints,
            DmaSourceArg::Hooks => Self::Hooks,
        }
    }
}

impl TraceArgs {
    pub fn session_options(&self) -> SessionOptions {
        SessionOptions {
            stream: !self.aggregate_only,
            lifetimes: !self.no_lifetimes,
            lifetime_sample: self.lifetime_sample,
            ring_bytes: self.ring_size,
            strict: self.strict,
            follow_kmsg: true,
            check: self.check,
            stacks: self.stacks,
            stacks_every_call: self.stacks_every_call,
            stack_depth: self.stack_depth,
            dma_source: self.dma_source.into(),
            sg_walk_max: self.sg_walk_max,
        }
    }
}

/// Longest duration accepted: far beyond any recording, far within what
/// the clock can add (`--duration 18446744073709551615s` used to panic with
/// "overflow when adding duration to instant" after attaching).
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 31_557_600); // humantime: 1y = 365.25d

/// A time with a unit (500ms, 1s, 2m, 1h 30m) or plain seconds (`10`,
/// `1.5`): the tool prints its times in seconds everywhere, so a number
/// typed back from a table means seconds, as for timeout(1) and sleep(1).
fn parse_time(s: &str, examples: &str) -> Result<Duration, String> {
    match plain_seconds(s.trim()) {
        Some(d) => d,
        None => humantime::parse_duration(s).map_err(|e| format!("{e} (examples: {examples})")),
    }
}

/// `10` or `1.5` as seconds, exactly (digits past nanoseconds dropped);
/// None when `s` is not a plain decimal number.
fn plain_seconds(s: &str) -> Option<Result<Duration, String>> {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && frac.is_empty() || !digits(whole) || !digits(frac) {
        return None;
    }
    let Ok(secs) = (if whole.is_empty() {
        Ok(0)
    } else {
        whole.parse::<u64>()
    }) else {
        return Some(Err(format!("{s}: too large a number of seconds")));
    };
    let nanos = frac
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(9)
        .fold(0u32, |n, b| n * 10 + u32::from(b - b'0'));
    Some(Ok(Duration::new(secs, nanos)))
}

/// A positive duration such as 500ms, 1s, 2m or 10 (seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = parse_time(s, "500ms, 1s, 2m, or plain seconds: 10")?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    if d > MAX_DURATION || std::time::Instant::now().checked_add(d).is_none() {
        return Err("too long: at most 100y".into());
    }
    Ok(d)
}

/// Shortest refresh: each one reads every per-CPU counter map and redraws;
/// below this the tool only burns a CPU (`--interval 1ns` did).
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < MIN_INTERVAL {
        return Err(format!(
            "too short: at least {}",
            humantime::format_duration(MIN_INTERVAL)
        ));
    }
    Ok(d)
}

/// Largest ring buffer: the kernel wants a power of two in the 32-bit
/// max_entries (above 2^31 the rounding overflowed and the kernel answered
/// "failed to create map EVENTS with code -1").
pub const MAX_RING_SIZE: u64 = 1 << 31;

pub fn parse_ring_size(s: &str) -> Result<u32, String> {
    let n: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of bytes (e.g. 8388608)"))?;
    if n > MAX_RING_SIZE {
        return Err(format!(
            "at most {MAX_RING_SIZE} (2 GiB): the kernel's ring buffer size is a power of two \
             that fits in 32 bits"
        ));
    }
    u32::try_from(n).map_err(|e| e.to_string())
}

/// `--lifetime-sample`: a power of two from 1 to 65536.
pub fn parse_lifetime_sample(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number (e.g. 16: one mapping in 16 timed)"))?;
    if !(1..=65_536).contains(&n) || !n.is_power_of_two() {
        return Err(format!(
            "{n}: a power of two from 1 (every mapping) to 65536, e.g. 16"
        ));
    }
    Ok(n)
}

/// A time offset: like a duration, but zero is allowed.
pub fn parse_offset(s: &str) -> Result<Duration, String> {
    let d = parse_time(s, "0s, 1.5s, 2m, or plain seconds: 1.5")?;
    // Trace time is u64 nanoseconds: 18446744075s wrapped to a window
    // near the start before (issue 30).
    if d.as_nanos() > u128::from(u64::MAX) {
        return Err("too far: a recording spans at most 584 years".into());
    }
    Ok(d)
}

/// Where `--device` names are looked up.
pub enum DeviceNames<'a> {
    /// The live host's sysfs: `/sys/class/*/NAME`.
    Host(&'a crate::hosttree::Tree),
    /// The PCI inventory a recording kept (each function's class device
    /// names, from the recording's host).
    Recording(&'a [crate::tracefile::PciDevice]),
}

impl DeviceNames<'_> {
    /// `name` looked up where these names come from.
    fn look_up(&self, name: &str) -> crate::gpu::identity::HostName {
        match self {
            Self::Host(t) => crate::gpu::identity::host_device_name(t, name),
            Self::Recording(devices) => recorded_name(devices, name),
        }
    }

    /// Where the GPUs a `--device GPU...` is looked up among are, in words.
    fn gpus_place(&self) -> &'static str {
        match self {
            Self::Host(_) => "on this host",
            Self::Recording(_) => "in the recording",
        }
    }

    /// What a note adds to a name found (a recording's is its host's).
    fn whose(&self) -> &'static str {
        match self {
            Self::Host(_) => "",
            Self::Recording(_) => " (as the recording's host named it)",
        }
    }
}

/// A recording opened once (it may be a FIFO), and `--device` values
/// resolved by what its header kept of its host (report and export).
pub fn open_recording(
    file: &std::path::Path,
    devices: &[String],
) -> anyhow::Result<(
    crate::tracefile::TraceReader<std::io::BufReader<std::fs::File>>,
    Vec<String>,
)> {
    let reader =
        crate::tracefile::open(file).map_err(|e| crate::ftrace::with_import_hint(file, e))?;
    let header = reader.header();
    let wanted = resolve_devices(
        devices,
        &header.gpus,
        DeviceNames::Recording(&header.devices),
    )?;
    Ok((reader, wanted))
}

/// `--device` values as the tables name devices: a GPU index (`0`, `GPU0`) or
/// UUID (`GPU-4f39...`, a unique prefix) becomes that GPU's bus id, any
/// printed bus id is normalised, anything else stays a device name. A name
/// the kernel gives a class device (`nvme0`, `eth0`) becomes the PCI
/// function it sits on, as the tables name it (`--device nvme0` showed an
/// empty table before): on the live host from sysfs, where a name the host
/// does not have is said at once rather than after an empty session; in a
/// report from the names the recording kept of its host.
pub fn resolve_devices(
    specs: &[String],
    gpus: &[crate::gpu::GpuIdentity],
    names: DeviceNames<'_>,
) -> anyhow::Result<Vec<String>> {
    use crate::gpu::identity::HostName;
    specs
        .iter()
        .map(|spec| {
            let s = spec.trim();
            // As typed, in the notes below: one field, whatever it holds.
            let shown = crate::sanitize::text(s);
            let gpu_like =
                s.bytes().all(|b| b.is_ascii_digit()) || s.to_ascii_lowercase().starts_with("gpu");
            if gpu_like {
                return crate::gpu::resolve_device(s, gpus, names.gpus_place());
            }
            if let Some(bdf) = crate::faults::normalize_bdf(s) {
                if let DeviceNames::Host(t) = names {
                    if !t.exists(&format!("/sys/bus/pci/devices/{bdf}")) {
                        crate::output::warn(&format!(
                            "--device {shown}: no PCI device {bdf} on this host (shown if one appears)"
                        ));
                    }
                }
                return Ok(bdf);
            }
            match names.look_up(s) {
                HostName::PciFunction(bdf) => {
                    let whose = names.whose();
                    crate::output::note(&format!("--device {shown}: PCI device {bdf}{whose}"));
                    Ok(bdf)
                }
                HostName::Unknown => {
                    crate::output::warn(&format!(
                        "--device {shown}: no device of that name on this host (not in \
                         /sys/class or /sys/bus; shown if one appears)"
                    ));
                    Ok(s.to_owned())
                }
                HostName::Device => Ok(s.to_owned()),
            }
        })
        .collect()
}

/// `name` among the class device names a recording kept of its host's PCI
/// functions. Not found is not "unknown": recordings of older tools kept
/// no names, and the name may be one the tables show (the end of the
/// report says when it matched nothing). The function's bus id is the
/// file's: taken only in the shape of one (it is printed).
fn recorded_name(
    devices: &[crate::tracefile::PciDevice],
    name: &str,
) -> crate::gpu::identity::HostName {
    use crate::gpu::identity::HostName;
    let function = devices
        .iter()
        .filter(|d| d.names.iter().any(|n| n == name))
        .find_map(|d| crate::faults::normalize_bdf(&d.bus_id));
    match function {
        Some(bdf) => HostName::PciFunction(bdf),
        None => HostName::Device,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report finds a name by the class device names its recording kept;
    /// a name it did not keep (or a recording of an older tool, which kept
    /// none) stays as typed, as the tables may show it.
    #[test]
    fn a_report_finds_names_the_recording_kept_of_its_host() {
        let devices = [
            crate::tracefile::PciDevice {
                bus_id: "0000:00:04.0".into(),
                names: vec!["nvme0".into(), "nvme0n1".into()],
                ..Default::default()
            },
            crate::tracefile::PciDevice {
                bus_id: "0000:00:06.0".into(),
                ..Default::default()
            },
            // A crafted file's bus id is printed: not taken unless one.
            crate::tracefile::PciDevice {
                bus_id: "\u{1b}[31mevil".into(),
                names: vec!["eth9".into()],
                ..Default::default()
            },
        ];
        let specs: Vec<String> = ["nvme0n1", " nvme0 ", "eth9", "00:06.0"]
            .map(String::from)
            .to_vec();
        let got = resolve_devices(&specs, &[], DeviceNames::Recording(&devices)).expect("resolve");
        assert_eq!(
            got,
            ["0000:00:04.0", "0000:00:04.0", "eth9", "0000:00:06.0"]
        );
        let got = resolve_devices(&specs[..1], &[], DeviceNames::Recording(&[])).expect("older");
        assert_eq!(got, ["nvme0n1"]);
    }

    #[test]
    fn offsets_past_u64_nanoseconds_are_refused_not_wrapped() {
        assert_eq!(parse_offset("2s"), Ok(Duration::from_secs(2)));
        assert!(parse_offset("18446744075s").is_err());
        assert!(parse_offset("584y").is_ok());
    }

    #[test]
    fn durations_too_long_for_the_clock_are_refused_at_parse_time() {
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("100y").is_ok());
        for s in ["18446744073709551615s", "1000000000y", "101y"] {
            let e = parse_duration(s).expect_err(s);
            assert!(
                e.contains("too long") || e.contains("too large"),
                "{s}: {e}"
            );
        }
        assert!(parse_duration("0s").is_err());
    }

    #[test]
    fn plain_numbers_are_seconds_as_the_tables_print_them() {
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration(" 2 "), Ok(Duration::from_secs(2)));
        assert_eq!(parse_offset("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_offset(".25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_offset("0"), Ok(Duration::ZERO));
        assert_eq!(
            parse_offset("0.1234567891"),
            Ok(Duration::from_nanos(123_456_789))
        );
        assert_eq!(parse_interval("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_interval("0.05")
            .expect_err("short")
            .contains("at least"));
        assert!(parse_duration("0")
            .expect_err("zero")
            .contains("greater than zero"));
        for s in ["99999999999999999999", "18446744073709551615", "3155760001"] {
            let e = parse_duration(s).expect_err(s);
            assert!(e.contains("too"), "{s}: {e}");
        }
        assert!(parse_offset("18446744075").is_err());
        // Not plain numbers: the unit parser's message, with examples.
        for s in [".", "1.2.3", "-1", "1e3", "", "10 s s"] {
            let e = parse_duration(s).expect_err(s);
            assert!(e.contains("examples"), "{s}: {e}");
        }
    }

    #[test]
    fn intervals_have_a_lower_bound() {
        assert!(parse_interval("100ms").is_ok());
        let e = parse_interval("1ns").expect_err("1ns");
        assert!(e.contains("at least 100ms"), "{e}");
    }

    #[test]
    fn ring_sizes_beyond_the_kernel_limit_are_refused() {
        assert_eq!(parse_ring_size("4096"), Ok(4096));
        assert_eq!(parse_ring_size("2147483648"), Ok(1 << 31));
        let e = parse_ring_size("2147483649").expect_err("over");
        assert!(e.contains("at most 2147483648"), "{e}");
        assert!(parse_ring_size("4294967296").is_err());
        assert!(parse_ring_size("lots").is_err());
    }
}
