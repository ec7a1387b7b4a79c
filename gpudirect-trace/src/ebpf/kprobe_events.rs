//! Kprobes made through tracefs (`kprobe_events`) instead of the kprobe
//! PMU, so that every hit the programs never saw is counted.
//!
//! A kprobe that fires while another kprobe handler runs on the same CPU
//! (the NVMe completion interrupt landing inside our dma_map hook, and the
//! unmap it does) is skipped by the kprobe layer (`nmissed`); one that fires
//! while a kprobe program or a bpf() map call holds `bpf_prog_active` runs
//! no program (trace_call_bpf). Linux before 6.7 counts neither anywhere a
//! PMU kprobe's owner can read: measured on 5.10 (nvme-dma-hooks), the
//! kprobe tracer saw 14 of 16 NVMe unmaps and reported 0 missed. A
//! tracefs kprobe has `kprobe_profile`: per probe, `nhit` (every dispatch)
//! and `nmissed` (the kprobe layer's skips). With each attached program
//! counting its runs (`stat::KPROBE_RUNS`), the missed runs are
//! `Σ nmissed + (Σ nhit - runs)`.
//!
//! Events are named `p<pid>_<seq>_<function>` (`r` for return probes) in
//! group `gpudirect_trace`, removed when dropped; ones left by a tracer
//! that died (its pid gone) are removed before the first new one is made.

use std::{
    collections::HashMap,
    fs::OpenOptions,
    io::{self, Write as _},
    os::fd::{AsFd as _, BorrowedFd, OwnedFd},
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
};

use super::sys;

pub const GROUP: &str = "gpudirect_trace";
/// The kernel's MAX_EVENT_NAME_LEN, with its terminating NUL.
const MAX_NAME: usize = 63;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// One kprobe or kretprobe event with a program on it; detached and
/// removed on drop.
pub struct TracefsKprobe {
    pub name: String,
    events: PathBuf,
    perf: Option<OwnedFd>,
}

impl Drop for TracefsKprobe {
    fn drop(&mut self) {
        // Closing the perf event unregisters the kprobe; only then may the
        // event be removed (EBUSY while in use).
        drop(self.perf.take());
        let _ = append(&self.events, &format!("-:{GROUP}/{}\n", self.name));
    }
}

/// The event name for `func`: unique per process and attach, within the
/// kernel's length limit and its character set (`[A-Za-z0-9_]`).
pub fn event_name(ret: bool, pid: u32, seq: u32, func: &str) -> String {
    let mut name = format!("{}{pid}_{seq}_", if ret { 'r' } else { 'p' });
    name.extend(
        func.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(MAX_NAME.saturating_sub(name.len())),
    );
    name
}

/// `kprobe_events` under `tracefs`, when this process may write it.
pub fn usable(tracefs: &Path) -> Result<PathBuf, String> {
    let events = tracefs.join("kprobe_events");
    // Never create or truncate it: truncating removes every kprobe event
    // of every tool on the host.
    OpenOptions::new()
        .append(true)
        .open(&events)
        .map(|_| events.clone())
        .map_err(|e| format!("{}: {e}", events.display()))
}

/// Puts `prog` on a new kprobe (or, `ret`, kretprobe) of `func`.
pub fn attach(
    tracefs: &Path,
    prog: BorrowedFd<'_>,
    func: &str,
    ret: bool,
) -> io::Result<TracefsKprobe> {
    let events = tracefs.join("kprobe_events");
    let name = event_name(
        ret,
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        func,
    );
    // A kretprobe keeps one instance per call in flight; the default
    // (max(10, 2 x CPUs)) runs out under deep interrupt nesting on small
    // machines. Exhausted instances are counted in nmissed (5.14+).
    let kind = if ret {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        format!("r{}", (4 * cpus).clamp(64, 4096))
    } else {
        "p".to_owned()
    };
    append(&events, &format!("{kind}:{GROUP}/{name} {func}\n"))?;
    // From here on, drop removes the event again.
    let mut probe = TracefsKprobe {
        name,
        events,
        perf: None,
    };
    let id_path = tracefs
        .join("events")
        .join(GROUP)
        .join(&probe.name)
        .join("id");
    let id: u64 = std::fs::read_to_string(&id_path)?
        .trim()
        .parse()
        .map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {e}", id_path.display()),
            )
        })?;
    let perf = sys::perf::open_tracepoint(id)?;
    sys::perf::set_bpf_and_enable(perf.as_fd(), prog)?;
    probe.perf = Some(perf);
    Ok(probe)
}

/// Removes the events of tracers that are gone (crashed or killed before
/// their drop ran), so that names never pile up in kprobe_events.
pub fn remove_stale(tracefs: &Path) {
    let events = tracefs.join("kprobe_events");
    let Ok(text) = std::fs::read_to_string(&events) else {
        return;
    };
    for name in stale(&text, |pid| Path::new(&format!("/proc/{pid}")).exists()) {
        let _ = append(&events, &format!("-:{GROUP}/{name}\n"));
    }
}

/// The names of our group's events in `kprobe_events` text whose pid
/// `alive` says is gone.
pub fn stale(text: &str, alive: impl Fn(u32) -> bool) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let def = l.split_whitespace().next()?;
            let (_, full) = def.split_once(':')?;
            let name = full.strip_prefix(GROUP)?.strip_prefix('/')?;
            let pid: u32 = name.get(1..)?.split('_').next()?.parse().ok()?;
            (!alive(pid)).then(|| name.to_owned())
        })
        .collect()
}

/// `kprobe_profile` text: (nhit, nmissed) by event name. Some kernels
/// print `group/name`; only the name is kept.
pub fn parse_profile(text: &str) -> HashMap<String, (u64, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let name = it.next()?;
            let name = name.rsplit('/').next()?;
            let hit = it.next()?.parse().ok()?;
            let missed = it.next()?.parse().ok()?;
            Some((name.to_owned(), (hit, missed)))
        })
        .collect()
}

/// Hits and kprobe-layer misses of `probes`, summed (None: the profile is
/// unreadable).
pub fn counts(tracefs: &Path, probes: &[TracefsKprobe]) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(tracefs.join("kprobe_profile")).ok()?;
    let profile = parse_profile(&text);
    Some(probes.iter().fold((0, 0), |(h, m), p| {
        let (ph, pm) = profile.get(&p.name).copied().unwrap_or((0, 0));
        (h + ph, m + pm)
    }))
}

/// The program runs the kernel skipped: kprobe-layer misses plus hits
/// that ran no program. `hits` must be read before `runs`, so that a hit
/// in flight between the two reads is never taken for a skip.
pub fn missed(hits: u64, nmissed: u64, runs: u64) -> u64 {
    nmissed + hits.saturating_sub(runs)
}

fn append(path: &Path, line: &str) -> io::Result<()> {
    // One write per definition: the kernel parses each write() whole.
    OpenOptions::new()
        .append(true)
        .open(path)?
        .write_all(line.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_valid_and_bounded() {
        assert_eq!(
            event_name(false, 42, 3, "dma_map_page_attrs"),
            "p42_3_dma_map_page_attrs"
        );
        assert_eq!(event_name(true, 42, 4, "a.b$c"), "r42_4_a_b_c");
        let long = "x".repeat(200);
        let n = event_name(true, 4_194_304, 4_000_000_000, &long);
        assert_eq!(n.len(), MAX_NAME);
        assert!(n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
    }

    #[test]
    fn profile_lines_of_every_era_parse() {
        // 5.10 and 6.x print the bare name; a group prefix is tolerated.
        let text = "  p42_0_dma_map_page_attrs                          24               0\n\
                    \x20 gpudirect_trace/r42_1_dma_unmap_page_attrs      20               4\n\
                    \x20 other_tool_probe   7\n\
                    garbage\n";
        let p = parse_profile(text);
        assert_eq!(p["p42_0_dma_map_page_attrs"], (24, 0));
        assert_eq!(p["r42_1_dma_unmap_page_attrs"], (20, 4));
        assert_eq!(p.len(), 2, "{p:?}");
    }

    #[test]
    fn only_our_dead_tracers_events_are_stale() {
        let text = "p:gpudirect_trace/p100_0_dma_map_page_attrs dma_map_page_attrs\n\
                    r4096:gpudirect_trace/r100_1_dma_map_page_attrs dma_map_page_attrs\n\
                    p:gpudirect_trace/p200_0_iommu_map iommu_map\n\
                    p:kprobes/p100_0_mine do_sys_open\n\
                    r:gpudirect_trace/bogus x\n";
        let gone = stale(text, |pid| pid == 200);
        assert_eq!(
            gone,
            ["p100_0_dma_map_page_attrs", "r100_1_dma_map_page_attrs"]
        );
    }

    #[test]
    fn missed_counts_skips_and_never_goes_negative() {
        // 16 hits, the kprobe layer skipped 2 more, 15 programs ran.
        assert_eq!(missed(16, 2, 15), 3);
        // A run counted after its hit was read: not a skip.
        assert_eq!(missed(16, 0, 17), 0);
    }
}
