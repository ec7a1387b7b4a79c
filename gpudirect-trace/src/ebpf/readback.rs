//! Reading back what the programs keep in the kernel: their run
//! statistics, the stack map, the in-kernel latency and invalidation
//! histograms, the lifetime table; and the test hook into task state.

use std::collections::BTreeMap;

use gpudirect_trace_common::op;

use super::*;

/// The kernel's accounting of one program (non-zero only while
/// kernel.bpf_stats_enabled is 1).
#[derive(Clone, Debug, Serialize)]
pub struct ProgramStat {
    pub program: String,
    pub run_count: u64,
    pub run_time_ns: u64,
    pub ns_per_run: f64,
    /// Runs the kernel skipped (recursion_misses: the program was already
    /// running on that CPU, e.g. an interrupt's call inside a task's).
    pub missed: u64,
}

/// A program's recursion_misses, from its fd's fdinfo (5.12+; 0 where the
/// kernel does not report it).
fn fd_misses(fd: std::os::fd::RawFd) -> u64 {
    std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}"))
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("recursion_misses:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .unwrap_or(0)
}

impl Tracer {
    /// Program runs the kernel skipped: the programs' recursion_misses,
    /// and the misses of the kprobes made through tracefs (whose programs'
    /// own recursion_misses, 6.7+, are the same skips, so they are left out).
    pub(super) fn missed_runs(&self) -> u64 {
        let via_tracefs = !self.kprobes.probes.is_empty();
        let kprobe_missed = match &self.kprobes.tracefs {
            Some(t) if via_tracefs => {
                // Hits first, then runs (`kprobe_events::missed`).
                let (hits, nmissed) =
                    super::kprobe_events::counts(t, &self.kprobes.probes).unwrap_or((0, 0));
                let runs = super::maps::cpu_sum(&self.maps.stats, stat::KPROBE_RUNS);
                if self.kprobes.through_pmu == 0 {
                    super::kprobe_events::missed(hits, nmissed, runs)
                } else {
                    // Some runs are the PMU kprobes': only the kprobe
                    // layer's own count is exact.
                    nmissed
                }
            }
            _ => 0,
        };
        kprobe_missed + self.recursion_misses(via_tracefs)
    }

    /// Sum of the programs' recursion_misses (from /proc/self/fdinfo),
    /// without the kprobe programs' when `skip_kprobes`, nor the tasks
    /// family's (no DMA record is lost with them: `tasks::PROGRAMS`).
    fn recursion_misses(&self, skip_kprobes: bool) -> u64 {
        self.ebpf
            .programs()
            .filter(|(_, prog)| {
                !(skip_kprobes && matches!(prog, aya::programs::Program::KProbe(_)))
            })
            .filter(|(name, _)| !crate::families::tasks::PROGRAMS.contains(name))
            .filter_map(|(_, prog)| prog.fd().ok().map(|fd| fd.as_fd().as_raw_fd()))
            .chain(self.module_hooks.iter().map(|h| h.prog.as_raw_fd()))
            .map(fd_misses)
            .sum()
    }

    /// Per-program run counts and time from the kernel (BPF_OBJ_GET_INFO),
    /// for programs that ran; empty unless kernel.bpf_stats_enabled is set.
    pub fn program_stats(&self) -> Vec<ProgramStat> {
        let mut out: Vec<ProgramStat> = self
            .ebpf
            .programs()
            .filter_map(|(name, prog)| {
                let info = prog.info().ok()?;
                let n = info.run_count();
                let missed = prog.fd().map_or(0, |fd| fd_misses(fd.as_fd().as_raw_fd()));
                (n > 0 || missed > 0).then(|| {
                    let t = info.run_time().as_nanos() as u64;
                    ProgramStat {
                        program: name.to_owned(),
                        run_count: n,
                        run_time_ns: t,
                        ns_per_run: if n > 0 { t as f64 / n as f64 } else { 0.0 },
                        missed,
                    }
                })
            })
            .collect();
        for hook in &self.module_hooks {
            if let Ok((n, t)) = hook.run_stats() {
                let missed = fd_misses(hook.prog.as_raw_fd());
                if n > 0 || missed > 0 {
                    out.push(ProgramStat {
                        program: hook.program.clone(),
                        run_count: n,
                        run_time_ns: t,
                        ns_per_run: if n > 0 { t as f64 / n as f64 } else { 0.0 },
                        missed,
                    });
                }
            }
        }
        out.sort_by_key(|s| std::cmp::Reverse(s.run_count));
        out
    }

    /// Loads one more raw tracepoint program of the object without
    /// attaching it (tests: `bench_sg_bounded`).
    #[cfg(any(test, feature = "test-support"))]
    pub fn load_unattached(&mut self, name: &str) -> anyhow::Result<()> {
        let env = explain::Env {
            release: self.kernel.release.clone(),
            policy: explain::Policy::default(),
        };
        load_program(&mut self.ebpf, name, &env).map_err(|e| anyhow::anyhow!(e))
    }

    /// The instruction pointers of kernel stack `id` (`--stacks`), innermost
    /// first; None when the map no longer has it.
    pub fn stack(&self, id: u32) -> Option<Vec<u64>> {
        let st = self.maps.stacks.get(&id, 0).ok()?;
        Some(st.frames().iter().map(|f| f.ip).collect())
    }

    /// The kernel's log2 latency histograms, summed over CPUs, by device name:
    /// `LAT_HIST` plus the lifetime histograms each CPU keeps in its
    /// `CPU_STATE` (`LIFETIME_CACHE`). Read in that order: a slot is never
    /// emptied into the hash, so nothing is counted twice; a sample being
    /// added while we read shows at the next refresh.
    pub fn kernel_latency(&mut self) -> Vec<(Arc<str>, u32, LatHist)> {
        let mut merged: BTreeMap<(u64, u32), LatHist> = BTreeMap::new();
        let mut add = |dev: u64, op: u32, h: &LatHist| {
            let total = merged.entry((dev, op)).or_default();
            *total = crate::aggregate::sum_log2([&*total, h].into_iter());
        };
        for (k, h) in summed_over_cpus(self.maps.latency.iter()) {
            add(k.dev, k.op, &h);
        }
        if let Ok(per_cpu) = self.maps.cpu_state.get(&0, 0) {
            for st in per_cpu.iter() {
                for (&dev, h) in st.lifetime_devs.iter().zip(&st.lifetimes) {
                    if dev != 0 && h.count != 0 {
                        add(dev, op::LIFETIME, h);
                    }
                }
            }
        }
        merged
            .into_iter()
            .map(|((dev, o), h)| (self.device_name(dev), o, h))
            .collect()
    }

    /// The kernel's log2 invalidation histograms (aggregate-only mode),
    /// summed over CPUs: (device name, `inval::class`, histogram).
    pub fn kernel_invalidations(&mut self) -> Vec<(Arc<str>, u32, LatHist)> {
        let raw = summed_over_cpus(self.maps.invalidations.iter());
        raw.into_iter()
            .map(|(k, h)| (self.device_name(k.dev), k.class, h))
            .collect()
    }

    /// The kernel's table of outstanding DMA-API mappings (aggregate-only
    /// mode), by device name.
    /// An IOVA-API state with live links counts as one mapping of the
    /// bytes linked, at its base, from its allocation: its links are not
    /// kept one by one in the kernel (a destroy ends them all at once).
    pub fn kernel_mappings(&mut self) -> Vec<(Arc<str>, MapKey, MapValue)> {
        let mut raw: Vec<(MapKey, MapValue)> = match &self.maps.mapping_slots {
            Some(slots) => slots.entries(),
            None => self.maps.mappings.iter().filter_map(Result::ok).collect(),
        };
        raw.extend(
            self.maps
                .iova_states
                .iter()
                .filter_map(Result::ok)
                .filter(|(_, s)| s.links > 0)
                .map(|(_, s)| {
                    let key = MapKey {
                        dev: s.dev,
                        addr: s.addr,
                    };
                    let value = MapValue {
                        ts_ns: s.ts_ns,
                        size: s.linked,
                        pid: s.pid,
                        kind: u32::from(gpudirect_trace_common::kind::DMA_MAP)
                            | gpudirect_trace_common::lifetime::TIMED,
                    };
                    (key, value)
                }),
        );
        let clock = self.jiffy_clock;
        raw.into_iter()
            .map(|(k, mut v)| {
                // An untimed mapping (sampled lifetimes) is dated in jiffies.
                if !v.timed() {
                    if let Some(c) = clock {
                        v.ts_ns = c.ns(v.ts_ns);
                    }
                }
                (self.device_name(k.dev), k, v)
            })
            .collect()
    }

    /// Sets the in-flight state of thread `tid` as the timing hooks would
    /// (test support: lets host tests check in-kernel attribution on kernels
    /// without fentry or kprobes).
    #[cfg(any(test, feature = "test-support"))]
    pub fn set_task_state(
        &mut self,
        tid: u32,
        state: &gpudirect_trace_common::TaskState,
    ) -> anyhow::Result<()> {
        self.maps.tasks.insert(tid, state, 0)?;
        Ok(())
    }
}

/// A per-CPU histogram map's entries, each summed over the CPUs (entries
/// that fail to read, as one deleted while iterating, are passed over).
fn summed_over_cpus<K>(
    entries: impl Iterator<Item = Result<(K, aya::maps::PerCpuValues<LatHist>), aya::maps::MapError>>,
) -> Vec<(K, LatHist)> {
    entries
        .filter_map(Result::ok)
        .map(|(k, per_cpu)| (k, crate::aggregate::sum_log2(per_cpu.iter())))
        .collect()
}
