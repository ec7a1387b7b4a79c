//! Loading the embedded eBPF object, attaching what the running kernel has,
//! and reading back events and maps.

mod dma_source;
pub mod explain;
mod feature_fallback;
pub mod hook_support;
mod jiffies;
mod kprobe_events;
mod lifetime_table;
pub mod maps;
pub mod module_fentry;
mod names;
mod object_code;
mod object_patch;
mod readback;
pub use readback::ProgramStat;
pub mod plan;
pub mod program_log;
pub mod ring;
mod self_stats;
mod sg_cont;
pub mod sys;
pub mod task_context;
pub mod testrun;
pub mod timing;
mod tracepoints;

use std::{
    collections::HashMap,
    os::fd::{AsFd as _, AsRawFd},
    sync::Arc,
};

use anyhow::Context as _;
use aya::{Ebpf, EbpfLoader};
use gpudirect_trace_common::{
    lifetime, maps as maps_names, runtime, stack_mode, stat, Config, KernelOffsets, LatHist,
    MapKey, MapValue,
};
use serde::Serialize;

use self::{dma_source::dma_plan, tracepoints::load_program};
pub use self::{
    dma_source::{DmaOpSource, DmaSource},
    program_log::ProgramLog,
    ring::EventRing,
    self_stats::SelfStats,
    tracepoints::offsets_from_btf,
};
use crate::kernel::{self, KernelInfo};

/// The eBPF object built by build.rs (aya-build), embedded in the binary.
static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gpudirect-trace"));

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Attached,
    Unavailable,
    Failed,
    /// Loaded and verified but deliberately not attached (tests, benchmarks).
    Loaded,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Attached => "attached",
            Status::Unavailable => "unavailable",
            Status::Failed => "failed",
            Status::Loaded => "loaded",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct ProbeStatus {
    pub name: &'static str,
    pub kind: &'static str,
    pub program: &'static str,
    pub status: Status,
    pub reason: String,
    pub hot: bool,
}

/// The default ring buffer: 8 MiB, 116 508 records of 72 bytes (a 64-byte
/// event and the ring's 8-byte header), with the reader woken at 256 KiB
/// of backlog (`Config::DEFAULT.wakeup_bytes`) and draining on its own
/// every 100 ms (`session::driver::DRAIN_EVERY`). Measured by `cargo xtask
/// bench` (ring_* rows, docs/benchmarks.md "Ring size and wake-ups") on 2
/// shared vCPUs, the reader pinned to one:
/// - 10 k events/s: the ring covers 11.7 s of a reader that does not run;
///   no threshold wake-up ever, 20 wake-ups/s (the timer), records wait
///   ~50 ms (p99 98 ms), reader CPU 0.1%.
/// - 1 M events/s: covers 117 ms; 140-250 wake-ups/s; records wait
///   ~2-3 ms (p99 4-11 ms); reader 7-9% of a core (75-98 ns/event); no
///   loss; a staged 58 ms reader stall loses nothing, a 233 ms one loses
///   (stall - cover) x rate, within 3% in quiet runs.
/// - 10 M events/s (not offerable here: derived, and time-scaled at 8 M/s
///   as 1 M/s into a ring and threshold 8x smaller): covers 11.7 ms,
///   ~2 760 wake-ups/s (~0.4% of one traced CPU at ~1.4 us each), reader
///   ~70-100% of a core. No loss in 8 of 9 runs; in the 9th other work
///   took the reader's core for over 60 ms and rings 4x larger lost too.
///
/// Not raised: 8 MiB already covers 100+ ms up to 1 M events/s; above
/// that, loss depends on whether the reader gets its core (a 32 MiB ring
/// did not save the busy run), every loss is counted in the stream and
/// the file, and the in-kernel counters stay exact. `--ring-size` buys
/// cover at 11.7 ms per 8 MiB per 10 M events/s.
pub const DEFAULT_RING_BYTES: u32 = 8 << 20;

/// Frames kept per kernel stack (`--stack-depth`) unless asked otherwise.
pub const DEFAULT_STACK_DEPTH: u32 = object_patch::COMPILED_STACK_DEPTH;

#[derive(Clone, Debug)]
pub struct TracerOptions {
    /// Stream hot events through the ring buffer (false: aggregate-only).
    pub stream: bool,
    pub ring_bytes: u32,
    pub wakeup_bytes: u64,
    /// Aggregate-only: keep DMA-API mappings in-kernel for lifetimes,
    /// outstanding counts and long-lived lists (ignored when streaming).
    pub lifetimes: bool,
    /// One mapping in this many has its lifetime timed (`--lifetime-sample`,
    /// a power of two; 1: all); every mapping stays in the table.
    pub lifetime_sample: u32,
    /// `selftest module-hook`: also attach the nv_dma_map_sgt slot's
    /// programs to this (module, function), through the module's BTF.
    pub module_standin: Option<(String, String)>,
    /// Attach to the kernel's tracepoints (false: load and verify only, for
    /// tests that drive the programs with BPF_PROG_TEST_RUN).
    pub attach: bool,
    /// Where the DMA-API records come from (`--dma-source`).
    pub dma_source: DmaSource,
    /// Scatterlist entries walked per map at most (`--sg-walk-max`).
    pub sg_walk_max: u32,
    /// Take the kernel stacks of DMA-API calls (`--stacks`): every map's,
    /// and an unmap's or a sync's where it may be a finding
    /// (`stack_mode::SUSPECT`).
    pub stacks: bool,
    /// With `stacks`: every unmap's and sync's too (`--stacks-every-call`).
    pub stacks_every_call: bool,
    /// Frames kept per stack (`--stack-depth`), 1 to 127.
    pub stack_depth: u32,
    /// The programs' debug messages (aya-log): by default, asked for where
    /// the logger shows debug messages (`-v`, `RUST_LOG=debug`).
    pub program_log: ProgramLog,
    /// Whether the kernel takes BPF atomics (the slot table's claims). None:
    /// ask it. Some(false) on a kernel that has them loads what a kernel
    /// without them gets (the hash table, the patched object): for tests.
    pub bpf_atomics: Option<bool>,
    /// Whether the programs may read the preempt count as a typed ksym
    /// (where found, by default; `Forced` for tests of a kernel's refusal).
    pub preempt_count_ksym: task_context::KsymUse,
}

impl Default for TracerOptions {
    fn default() -> Self {
        Self {
            stream: true,
            ring_bytes: DEFAULT_RING_BYTES,
            wakeup_bytes: Config::DEFAULT.wakeup_bytes,
            lifetimes: true,
            lifetime_sample: lifetime::DEFAULT_SAMPLE,
            module_standin: None,
            attach: true,
            dma_source: DmaSource::Auto,
            sg_walk_max: gpudirect_trace_common::SG_WALK_DEFAULT,
            stacks: false,
            stacks_every_call: false,
            stack_depth: DEFAULT_STACK_DEPTH,
            program_log: ProgramLog::wanted(),
            bpf_atomics: None,
            preempt_count_ksym: task_context::KsymUse::WhereFound,
        }
    }
}

pub struct Tracer {
    ebpf: Ebpf,
    pub kernel: KernelInfo,
    pub probes: Vec<ProbeStatus>,
    pub offsets: KernelOffsets,
    maps: maps::Maps,
    /// Per DMA-API operation, where its records come from.
    pub dma_plan: Vec<DmaOpSource>,
    /// The form of aggregate-only mode's mapping table on this kernel.
    pub lifetime_table: &'static str,
    /// How many mappings aggregate-only lifetimes time (the sampling).
    pub lifetime_sampling: String,
    /// One mapping in this many has its lifetime timed (1: every one; 0:
    /// this session keeps no lifetimes in the kernel).
    pub lifetime_sample: u32,
    /// Turns the untimed mappings' jiffies into CLOCK_MONOTONIC time.
    jiffy_clock: Option<jiffies::JiffyClock>,
    /// fentry/fexit on module functions, loaded outside aya (detach on drop).
    module_hooks: Vec<module_fentry::ModuleHook>,
    /// Kprobes made through tracefs, whose hits count the runs the kernel
    /// skipped (detached and removed on drop).
    kprobes: timing::Kprobes,
    /// Device names by `struct device` address, looked up once per record:
    /// foldhash, not SipHash (SipHash was ~8% of the live path's CPU per
    /// event, `cargo xtask bench` reader_cpu).
    names: HashMap<u64, Arc<str>, foldhash::fast::RandomState>,
    /// Stand-in names of devices whose name could not be read (yet).
    unnamed: HashMap<u64, Arc<str>, foldhash::fast::RandomState>,
    unattributed: Arc<str>,
    /// The last named device looked up (0: none): records come in runs of
    /// one device, and its hash lookup was ~4% of the reader's CPU per
    /// event (perf, bench_reader_cpu).
    last_dev: u64,
    last_name: Arc<str>,
    /// Devices that left the bus: their counts until then, and the
    /// baselines that keep a new device at a freed address from taking them.
    removed: names::RemovedDevices,
    /// The reader of the programs' debug messages, while they are read.
    program_log: Option<program_log::Reader>,
    /// The programs read the preempt count as a typed ksym.
    typed_ksym: bool,
}

impl Tracer {
    /// Loads the programs and attaches them as the plan says, with their
    /// debug messages where `opts.program_log` asks and the kernel takes them.
    pub fn load(opts: &TracerOptions) -> anyhow::Result<Self> {
        program_log::load(opts, |opts, debug_log| {
            task_context::load(opts, debug_log, Self::load_with)
        })
    }

    /// Whether the programs' debug messages are being read.
    pub fn program_log_on(&self) -> bool {
        self.program_log.is_some()
    }

    fn load_with(
        opts: &TracerOptions,
        debug_log: bool,
        ksym_use: &task_context::KsymUse,
    ) -> anyhow::Result<Self> {
        kernel::check_privileges()?;
        kernel::raise_memlock();
        let kernel = match &opts.module_standin {
            Some((module, _)) => KernelInfo::discover_with_module_btf(module),
            None => KernelInfo::discover(),
        };
        let offsets = offsets_from_btf(kernel.btf.as_ref());
        let hooks = hook_support::HookSupport::discover(&kernel);
        let task_context =
            task_context::discover(&hooks.task_context_syms, kernel.btf.as_ref(), ksym_use);
        // The typed ksym of the preempt count, where it is read as one.
        let ksym = task_context.as_ref().ok().and_then(|f| f.ksym);
        // The largest power of two in u32 (2 GiB) bounds it (cli::MAX_RING_SIZE).
        let ring_bytes = opts
            .ring_bytes
            .max(4096)
            .checked_next_power_of_two()
            .unwrap_or(1 << 31);
        let atomics = opts
            .bpf_atomics
            .unwrap_or_else(lifetime_table::kernel_has_bpf_atomics);
        let stack_mode =
            lifetime_table::stack_mode(opts.stacks, opts.stacks_every_call, opts.stream);
        // Streaming keeps the mapping table for the stack filter alone.
        let stack_filter = stack_mode == stack_mode::SUSPECT;
        let lifetimes =
            lifetime_table::form((!opts.stream && opts.lifetimes) || stack_filter, atomics);
        let jiffy_clock = jiffies::JiffyClock::calibrate();
        let timed = if opts.stream {
            lifetime::OFF
        } else {
            lifetimes
        };
        let sample_mask =
            lifetime_table::sample_mask(timed, opts.lifetime_sample, jiffy_clock.is_some());
        log::info!(
            "{}",
            lifetime_table::describe_use(lifetimes, timed, sample_mask, jiffy_clock.is_some())
        );
        let object = object_patch::object_for(
            EBPF_OBJECT,
            object_patch::Patches {
                atomics,
                stack_depth: if opts.stacks {
                    opts.stack_depth
                } else {
                    object_patch::COMPILED_STACK_DEPTH
                },
                preempt_count_ksym: ksym.map(|k| k.btf_id),
            },
        )?;
        let config = Config {
            offsets,
            // A ring smaller than 4x the threshold would fill before the
            // reader is woken (or never wake it: threshold >= ring), leaving
            // only its 100 ms timer: `--ring-size 256K` at 100 k events/s
            // lost 62% of them (bench ring_small) before this clamp.
            wakeup_bytes: opts.wakeup_bytes.min(u64::from(ring_bytes) / 4),
            stream: u32::from(opts.stream),
            // Streaming pairs maps with unmaps in userspace, exactly.
            track_lifetimes: lifetimes,
            vmemmap_base_ptr: hooks.vmemmap_base.unwrap_or(0),
            stacks: stack_mode,
            page_shift: 12,
            per_cpu_offset_ptr: task_context.as_ref().map_or(0, |f| f.per_cpu_offset),
            preempt_count_ptr: task_context.as_ref().map_or(0, |f| f.preempt_count),
            debug_log: u32::from(debug_log),
            lifetime_sample_mask: sample_mask,
            preempt_count_ksym: u32::from(ksym.is_some()),
            preempt_count_member: ksym.map_or(0, |k| k.member),
        };
        // The stack map costs ~1 KiB of kernel memory per entry: one entry
        // unless --stacks.
        let stack_entries = if opts.stacks {
            gpudirect_trace_common::maps::STACKS_CAP
        } else {
            1
        };
        let mut ebpf = EbpfLoader::new()
            .set_global("CONFIG", &config, true)
            .set_max_entries("EVENTS", ring_bytes)
            .set_max_entries(gpudirect_trace_common::maps::STACKS, stack_entries)
            // Each form of the mapping table takes its kernel memory (the
            // slots 5 MiB, the preallocated hash ~6 MiB) only when in use.
            .set_max_entries(
                gpudirect_trace_common::maps::MAPPING_SLOTS,
                if lifetimes == lifetime::SLOTS {
                    lifetime::SLOT_COUNT
                } else {
                    1
                },
            )
            .set_max_entries(
                gpudirect_trace_common::maps::MAPPINGS,
                if lifetimes == lifetime::HASH {
                    gpudirect_trace_common::maps::MAPPINGS_CAP
                } else {
                    1
                },
            )
            .load(object.bytes())
            .map_err(|e| explain_load_error(&e, &kernel.release))?;

        let facts = plan::Facts::discover(
            &kernel,
            &hooks,
            opts.module_standin
                .as_ref()
                .map(|(m, f)| crate::families::nvidia::standin_spec(m, f)),
        );
        let mut probes = Vec::new();
        let mut load_errors: HashMap<&str, String> = HashMap::new();
        for name in plan::programs_to_load(&facts, opts.attach) {
            if let Err(e) = load_program(&mut ebpf, name, &facts.env) {
                load_errors.insert(name, e);
            }
        }
        let plan_opts = plan::Options {
            attach: opts.attach,
            dma_source: opts.dma_source,
        };
        for spec in crate::families::tracepoints() {
            let step = plan::tracepoint(
                &facts,
                spec,
                plan_opts,
                load_errors.get(spec.program).map(String::as_str),
            );
            probes.push(plan::tracepoint_outcome(&facts, spec, step, || {
                tracepoints::attach(&mut ebpf, spec)
            }));
        }

        let attached = timing::attach_all(
            &mut ebpf,
            object.bytes(),
            &facts,
            &hooks,
            opts.attach,
            opts.module_standin
                .as_ref()
                .map(|(m, f)| crate::families::nvidia::standin_spec(m, f)),
        );
        let module_hooks = attached.module_hooks;
        let kprobes = attached.kprobes;
        let (hook_mask, dma_plan) =
            dma_plan(&probes, opts.dma_source, attached.dma_hooked, opts.attach);
        let mut runtime = aya::maps::Array::<_, u32>::try_from(
            ebpf.map_mut(maps_names::RUNTIME)
                .with_context(|| format!("the eBPF object has no map {}", maps_names::RUNTIME))?,
        )?;
        runtime.set(runtime::HOOK_OPS, hook_mask, 0)?;
        runtime.set(runtime::SG_WALK_MAX, opts.sg_walk_max.max(1), 0)?;
        probes.extend(attached.statuses);
        probes.push(task_context::status(&task_context, opts.attach));

        let maps = maps::Maps::take(&mut ebpf, lifetimes == lifetime::SLOTS)?;
        // What aggregate-only would get here, whatever this session's mode
        // (`probes` tells it).
        let aggregate_form = lifetime_table::form(true, atomics);
        let jiffies = jiffy_clock.is_some();
        Ok(Self {
            ebpf,
            kernel,
            probes,
            offsets,
            maps,
            dma_plan,
            lifetime_table: lifetime_table::describe(aggregate_form),
            lifetime_sampling: lifetime_table::describe_sample(
                aggregate_form,
                lifetime_table::sample_mask(aggregate_form, opts.lifetime_sample, jiffies),
                jiffies,
            ),
            jiffy_clock,
            lifetime_sample: if lifetimes == lifetime::OFF {
                0
            } else {
                sample_mask + 1
            },
            module_hooks,
            kprobes,
            names: HashMap::default(),
            unnamed: HashMap::default(),
            unattributed: Arc::from(crate::aggregate::UNATTRIBUTED),
            last_dev: 0,
            last_name: Arc::from(crate::aggregate::UNATTRIBUTED),
            removed: names::RemovedDevices::default(),
            program_log: None,
            typed_ksym: ksym.is_some(),
        })
    }

    pub fn attached(&self) -> usize {
        self.probes
            .iter()
            .filter(|p| p.status == Status::Attached)
            .count()
    }

    /// The probes that failed to load or attach, `name: reason` each: what
    /// `--strict` refuses to start with and the messages' loader reports.
    pub fn failed(&self) -> Vec<String> {
        self.probes
            .iter()
            .filter(|p| p.status == Status::Failed)
            .map(|p| format!("{}: {}", p.name, p.reason))
            .collect()
    }

    /// The file descriptor of a loaded program (for BPF_PROG_TEST_RUN).
    #[cfg(any(test, feature = "test-support"))]
    pub fn program_fd(&self, name: &str) -> anyhow::Result<std::os::fd::BorrowedFd<'_>> {
        let prog = self
            .ebpf
            .program(name)
            .ok_or_else(|| anyhow::anyhow!("no program {name}"))?;
        Ok(prog.fd()?.as_fd())
    }

    /// Hands the event stream to its owner (the session driver's async fd,
    /// which wakes on it); `drain` then finds nothing.
    pub fn take_ring(&mut self) -> Option<EventRing> {
        self.maps.ring.take()
    }

    /// Hands every waiting record to `f`; returns how many there were.
    pub fn drain(&mut self, f: impl FnMut(&[u8])) -> usize {
        match self.maps.ring.as_mut() {
            Some(ring) => drain_ring(ring, f),
            None => 0,
        }
    }
}

/// Hands every record waiting in `ring` to `f`; returns how many there were.
pub fn drain_ring(ring: &mut EventRing, mut f: impl FnMut(&[u8])) -> usize {
    let mut n = 0;
    while let Some(item) = ring.next_record() {
        f(item);
        n += 1;
    }
    n
}

fn explain_load_error(e: &aya::EbpfError, release: &str) -> anyhow::Error {
    let env = explain::Env {
        release: release.to_owned(),
        policy: explain::Policy::discover(),
    };
    let why = explain::explain(
        &explain::Failure::from_error(e),
        explain::Stage::Load,
        explain::Target::Object,
        &env,
    );
    anyhow::anyhow!("loading the eBPF object failed: {why}")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use gpudirect_trace_common::maps;

    use super::EBPF_OBJECT;
    use crate::families::{self, iommu::ATTACH_LEARN};

    /// The contract, checked without root: the embedded object (parsed with
    /// aya-obj, as aya parses it to load) has every map userspace takes and
    /// every program the catalog and the loader name.
    #[test]
    fn the_embedded_object_has_every_map_and_program_the_loader_names() {
        let obj = aya_obj::Object::parse(EBPF_OBJECT).expect("the embedded object parses");
        let have_maps: BTreeSet<&str> = obj.maps.keys().map(String::as_str).collect();
        for m in maps::ALL {
            assert!(have_maps.contains(m), "map {m} missing: {have_maps:?}");
        }
        let have: BTreeSet<&str> = obj.programs.keys().map(String::as_str).collect();
        for p in families::programs() {
            assert!(have.contains(p), "tracepoint program {p} missing");
        }
        // Every hook's four programs, of each build (scatterlist walkers
        // have a `_nl` build too).
        for spec in families::hooks().filter(|s| s.slot != ATTACH_LEARN.slot) {
            let builds: &[&str] = if spec.sg_walk { &["", "_nl"] } else { &[""] };
            let slots = std::iter::once(spec.slot).chain(spec.programs.iter().map(|(_, s)| *s));
            for slot in slots {
                for b in builds {
                    for side in ["in", "out"] {
                        for prefix in ["t", "k"] {
                            let name = format!("{prefix}_{slot}_{side}{b}");
                            assert!(
                                have.contains(name.as_str()),
                                "timing program {name} missing"
                            );
                        }
                    }
                }
            }
        }
        assert_eq!(ATTACH_LEARN.slot, "attach");
        for p in ["attach_fentry", "attach_kprobe"] {
            assert!(have.contains(p), "{p} missing");
        }
        // The benchmarks' empty program ships only in the test object.
        assert!(
            !have.contains("bench_floor"),
            "bench_floor in the tool's object"
        );
        let support: &[u8] =
            aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gdt-test-support"));
        let obj = aya_obj::Object::parse(support).expect("the test-support object parses");
        assert!(obj.programs.contains_key("bench_floor"));
    }

    /// No program calls the memory builtins bpf-linker exports: each stores
    /// or copies a byte per iteration, and a zeroing written as such a call
    /// cost dma_map_sg 60-80 ns (gpudirect-trace-ebpf/build.rs says why
    /// LLVM made them, and how they went).
    #[test]
    fn no_program_calls_a_byte_loop_memset_or_memcpy() {
        use object::{Object as _, ObjectSection as _, ObjectSymbol as _, RelocationTarget};
        let file = object::File::parse(EBPF_OBJECT).expect("the embedded object parses");
        let mut calls = BTreeSet::new();
        for section in file.sections() {
            for (_, reloc) in section.relocations() {
                let RelocationTarget::Symbol(i) = reloc.target() else {
                    continue;
                };
                let name = file.symbol_by_index(i).and_then(|s| s.name());
                if let Ok(n @ ("memset" | "memcpy" | "memmove" | "memcmp" | "bcmp")) = name {
                    calls.insert((section.name().unwrap_or("?").to_owned(), n));
                }
            }
        }
        assert!(calls.is_empty(), "calls to memory builtins in {calls:?}");
    }
}
