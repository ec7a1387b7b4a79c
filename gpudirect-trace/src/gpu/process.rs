//! Who a pid is: its command name, cgroup path and container (docker,
//! containerd/CRI, CRI-O, podman, Kubernetes pods, LXC), read from
//! `/proc/PID/{comm,cgroup}` and kept in a bounded cache so per-event lookups
//! cost a hash probe.
//!
//! Pids are the tracer's: host (initial pid namespace) tgids, read from the
//! host's /proc. A tracer in a container without `hostPID` (the Kubernetes
//! DaemonSet in deploy/ does not set it) sees no /proc entry for them: they
//! read as exited, so per-process attribution there needs `hostPID: true`.
//! A pid that has exited reads as `exited` (cached too, so a burst of events
//! from a dead process costs one failed open). Pid 0 is the idle task: events
//! with it ran in interrupt context on an idle CPU, not in any process.

use std::{
    collections::{HashMap, VecDeque},
    fs, io,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use serde::Serialize;

/// A container a task runs in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Container {
    /// `docker`, `containerd`, `cri-o`, `podman`, `lxc`, `kubepods` (a
    /// Kubernetes container whose cgroup path does not name the runtime), or
    /// `container` (a 64-hex-digit id in a path naming no runtime).
    pub runtime: &'static str,
    /// Full id (64 hex digits), or the LXC container name.
    pub id: String,
    /// Kubernetes pod UID, when the path has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
}

impl Container {
    /// Docker's short form: the first 12 characters.
    pub fn short_id(&self) -> &str {
        self.id.get(..12).unwrap_or(&self.id)
    }
}

/// What is known about one pid.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProcInfo {
    pub pid: u32,
    /// `/proc/PID/comm`; `None` when the process had exited.
    pub comm: Option<String>,
    /// The cgroup path that placed it (the v2 path, else v1's), `/` for the root.
    pub cgroup: Option<String>,
    pub container: Option<Container>,
    /// /proc/PID was gone when looked up.
    pub exited: bool,
}

/// One line of /proc/PID/cgroup: `hierarchy-ID:controller-list:cgroup-path`.
/// The path may itself contain `:` (containerd's `slice:cri-containerd:ID`
/// form), so only the first two colons split.
fn parse_line(line: &str) -> Option<(&str, &str, &str)> {
    let mut it = line.trim().splitn(3, ':');
    Some((it.next()?, it.next()?, it.next()?))
}

fn is_hex_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The pod UID in a path segment: `pod<uid>` (cgroupfs driver) or
/// `kubepods-<qos>-pod<uid_with_underscores>.slice` (systemd driver).
fn pod_uid(seg: &str) -> Option<String> {
    // The kubelet's `<pod slice>:<prefix>:<id>` form carries the slice first.
    let seg = seg.split(':').next().unwrap_or(seg);
    let seg = seg.strip_suffix(".slice").unwrap_or(seg);
    let at = seg.rfind("pod")?;
    let uid = &seg[at + 3..];
    let ok = at == 0 || seg[..at].ends_with('-');
    let uuid_like = uid.len() >= 32
        && uid
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_');
    (ok && uuid_like).then(|| uid.replace('_', "-"))
}

/// The container of one cgroup path, if it names one. Segments are read from
/// the leaf up, so nested containers (docker-in-docker) give the innermost and
/// a process in a sub-cgroup of its container (`<id>/kube-proxy`) still maps.
pub fn container_of(path: &str) -> Option<Container> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let pod = segs.iter().rev().find_map(|s| pod_uid(s));
    for (i, seg) in segs.iter().enumerate().rev() {
        let s = seg.strip_suffix(".scope").unwrap_or(seg);
        // conmon (CRI-O's and podman's monitor) runs beside the container, not in it.
        if s.starts_with("crio-conmon-") || s.starts_with("libpod-conmon-") {
            return None;
        }
        let prefixed = [
            ("docker-", "docker"),
            ("cri-containerd-", "containerd"),
            ("crio-", "cri-o"),
            ("libpod-", "podman"),
        ];
        for (prefix, runtime) in prefixed {
            if let Some(id) = s.strip_prefix(prefix).filter(|id| is_hex_id(id)) {
                return Some(Container {
                    runtime,
                    id: id.to_owned(),
                    pod,
                });
            }
        }
        // The kubelet's systemd form: `<pod slice>:<prefix>:<id>`.
        if let [_, prefix, id] = s.splitn(3, ':').collect::<Vec<_>>()[..] {
            if is_hex_id(id) {
                let runtime = match prefix {
                    "cri-containerd" => "containerd",
                    "crio" => "cri-o",
                    "docker" => "docker",
                    _ => "kubepods",
                };
                let id = id.to_owned();
                return Some(Container { runtime, id, pod });
            }
        }
        if is_hex_id(s) {
            let parent = i.checked_sub(1).map(|p| segs[p]).unwrap_or("");
            let runtime = if segs[..i].iter().any(|p| p.starts_with("kubepods")) {
                "kubepods"
            } else if parent == "docker" {
                "docker"
            } else if parent == "libpod_parent" {
                "podman"
            } else {
                // A runtime-style id without a runtime's name around it (old
                // docker with cgroup-parent "/", CI job runners).
                "container"
            };
            let id = s.to_owned();
            return Some(Container { runtime, id, pod });
        }
        if let Some(name) = s.strip_prefix("lxc.payload.") {
            let id = name.to_owned();
            return Some(Container {
                runtime: "lxc",
                id,
                pod: None,
            });
        }
        if i >= 1 && segs[i - 1] == "lxc" {
            let id = s.to_owned();
            return Some(Container {
                runtime: "lxc",
                id,
                pod: None,
            });
        }
    }
    None
}

/// The cgroup path and container from /proc/PID/cgroup text, cgroup v1, v2 or
/// hybrid. A path that names a container wins, looked for in the v2 line, then
/// v1's `name=systemd`, then the other v1 lines; otherwise the path is the v2
/// one, else the first non-root v1 path, else `/`.
pub fn parse_cgroup(text: &str) -> (Option<String>, Option<Container>) {
    let mut lines: Vec<(u8, &str)> = text
        .lines()
        .filter_map(parse_line)
        .map(|(id, ctl, path)| {
            let rank = match (id, ctl) {
                ("0", "") => 0,
                (_, "name=systemd") => 1,
                _ => 2,
            };
            (rank, path)
        })
        .collect();
    if lines.is_empty() {
        return (None, None);
    }
    lines.sort_by_key(|&(r, _)| r);
    for &(_, p) in &lines {
        if let Some(c) = container_of(p) {
            return (Some(p.to_owned()), Some(c));
        }
    }
    let path = lines
        .iter()
        .find(|&&(r, p)| r == 0 && p != "/")
        .or_else(|| lines.iter().find(|&&(_, p)| p != "/"))
        .map_or("/", |&(_, p)| p);
    (Some(path.to_owned()), None)
}

/// Read one pid from `proc_root` (`/proc` on a live host).
pub fn read_proc(proc_root: &Path, pid: u32) -> ProcInfo {
    if pid == 0 {
        return ProcInfo {
            pid,
            comm: Some("[idle/irq]".to_owned()),
            cgroup: None,
            container: None,
            exited: false,
        };
    }
    let dir = proc_root.join(pid.to_string());
    let read = |f: &str| fs::read_to_string(dir.join(f));
    let comm = read("comm").map(|s| s.trim_end().to_owned());
    let cgroup = read("cgroup");
    let gone = |r: &io::Result<String>| matches!(r, Err(e) if matches!(e.kind(), io::ErrorKind::NotFound) || e.raw_os_error() == Some(libc::ESRCH));
    let exited = gone(&comm) && gone(&cgroup);
    let (cgroup, container) = match &cgroup {
        Ok(t) => parse_cgroup(t),
        Err(_) => (None, None),
    };
    ProcInfo {
        pid,
        comm: comm.ok(),
        cgroup,
        container,
        exited,
    }
}

/// Hits, misses and evictions of a [`ProcCache`], to show how well it holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evicted: u64,
}

/// A bounded pid -> [`ProcInfo`] cache. Entries older than `ttl` are read
/// again (pids are reused; a process may exec and change its comm); past
/// `capacity` the oldest entry goes.
pub struct ProcCache {
    proc_root: PathBuf,
    capacity: usize,
    ttl: Duration,
    map: HashMap<u32, (ProcInfo, Instant)>,
    order: VecDeque<u32>,
    pub stats: CacheStats,
}

pub const DEFAULT_CAPACITY: usize = 4096;
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

impl ProcCache {
    pub fn new(proc_root: impl Into<PathBuf>, capacity: usize, ttl: Duration) -> Self {
        Self {
            proc_root: proc_root.into(),
            capacity: capacity.max(1),
            ttl,
            map: HashMap::new(),
            order: VecDeque::new(),
            stats: CacheStats::default(),
        }
    }

    /// The host's /proc, default bounds.
    pub fn live() -> Self {
        Self::new("/proc", DEFAULT_CAPACITY, DEFAULT_TTL)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// A process's name at its exit (sched:sched_process_exit) and the
    /// path of its cgroup (`cgroup`, from the record's cgroup id): kept as
    /// its entry, so that a lookup after /proc lost it still names it and
    /// its container. What /proc said of it while it ran is kept.
    pub fn note_exit(&mut self, pid: u32, comm: String, cgroup: Option<String>) {
        let known = self.map.get(&pid).map(|(i, _)| i).filter(|i| !i.exited);
        let (cgroup, container) = match known {
            Some(i) if i.cgroup.is_some() => (i.cgroup.clone(), i.container.clone()),
            _ => {
                let container = cgroup.as_deref().and_then(container_of);
                (cgroup, container)
            }
        };
        let info = ProcInfo {
            pid,
            comm: Some(comm),
            cgroup,
            container,
            exited: true,
        };
        self.insert(pid, info);
    }

    fn insert(&mut self, pid: u32, info: ProcInfo) {
        if self.map.insert(pid, (info, Instant::now())).is_some() {
            self.order.retain(|&p| p != pid);
        }
        self.order.push_back(pid);
        while self.map.len() > self.capacity {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            self.map.remove(&old);
            self.stats.evicted += 1;
        }
    }

    pub fn get(&mut self, pid: u32) -> &ProcInfo {
        let fresh = self
            .map
            .get(&pid)
            .is_some_and(|(_, at)| at.elapsed() < self.ttl);
        if fresh {
            self.stats.hits += 1;
        } else {
            self.stats.misses += 1;
            let info = read_proc(&self.proc_root, pid);
            self.insert(pid, info);
        }
        &self.map[&pid].0
    }
}

#[cfg(test)]
#[path = "process_tests.rs"]
mod tests;
