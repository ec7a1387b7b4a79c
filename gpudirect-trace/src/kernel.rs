//! What the running kernel offers: release, capabilities, BTF, tracefs,
//! kallsyms. Everything here is read-only discovery except `ensure_tracefs`
//! (mounting tracefs is what every tracing tool does when it is missing) and
//! `raise_memlock` (kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK).

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _};

use crate::btf::Btf;

pub const TRACEFS: &str = "/sys/kernel/tracing";
pub const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

pub fn release() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// The names in directory `dir`, sorted; none where it cannot be read (a
/// sysfs class this kernel does not have).
pub fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// CLOCK_MONOTONIC now, in nanoseconds: the clock of `bpf_ktime_get_ns()`
/// event stamps and of /dev/kmsg timestamps.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time this thread has used, in nanoseconds: the crate's ignored
/// benchmarks measure with it, so that other load on the machine does not
/// count.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// (major, minor) of a kernel release string such as `6.1.0-27-amd64`.
pub fn parse_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capability set of this process (from /proc/self/status).
fn effective_caps() -> anyhow::Result<u64> {
    let status = fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .context("no CapEff in /proc/self/status")?;
    u64::from_str_radix(line.trim(), 16).context("parsing CapEff")
}

/// Loading tracing programs needs CAP_BPF and CAP_PERFMON (5.8+), or
/// CAP_SYS_ADMIN (all kernels). Says exactly what is missing.
pub fn check_privileges() -> anyhow::Result<()> {
    let caps = effective_caps()?;
    let has = |c: u32| caps & (1u64 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    let mut missing = Vec::new();
    if !has(CAP_BPF) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) {
        missing.push("CAP_PERFMON");
    }
    bail!(
        "missing capability {} (or CAP_SYS_ADMIN): run as root, or grant them with \
         `sudo setcap cap_bpf,cap_perfmon+ep $(which gpudirect-trace)`",
        missing.join(" and ")
    )
}

/// Kernels before 5.11 account BPF memory against RLIMIT_MEMLOCK.
pub fn raise_memlock() {
    let rlim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain syscall with a valid pointer.
    let ret = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) };
    if ret != 0 {
        log::debug!(
            "setrlimit(RLIMIT_MEMLOCK) failed: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Mount points of tracefs in /proc/self/mountinfo text (field 5 is the
/// mount point, octal-escaped; the file system type follows " - ").
pub fn tracefs_mounts(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (mount, fs) = l.split_once(" - ")?;
            if fs.split_whitespace().next()? != "tracefs" {
                return None;
            }
            let point = mount.split_whitespace().nth(4)?;
            Some(PathBuf::from(
                point
                    .replace("\\040", " ")
                    .replace("\\011", "\t")
                    .replace("\\012", "\n")
                    .replace("\\134", "\\"),
            ))
        })
        .collect()
}

/// The note when tracefs is mounted but this process cannot read it
/// (tracefs is mode 0700 root by default: an unprivileged user with
/// CAP_BPF+CAP_PERFMON attaches, but cannot list the tracepoints).
fn unreadable_note(dir: &Path, e: &std::io::Error) -> String {
    format!(
        "tracefs is mounted at {} but not readable by this user ({e}); tracepoints still \
         attach, only discovery of what this kernel offers is poorer (run as root for it)",
        dir.display()
    )
}

/// Where tracefs is, mounting it at /sys/kernel/tracing if it is not mounted
/// anywhere. Returns None (with the reason) when that fails: the raw
/// tracepoints still attach without tracefs, only discovery is poorer.
pub fn ensure_tracefs() -> Result<PathBuf, String> {
    let mounted = tracefs_mounts(&fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
    let mut candidates: Vec<PathBuf> = vec![TRACEFS.into(), DEBUGFS_TRACING.into()];
    candidates.extend(mounted.iter().cloned());
    let mut denied = None;
    for dir in &candidates {
        match fs::metadata(dir.join("events")) {
            Ok(m) if m.is_dir() => return Ok(dir.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                denied.get_or_insert((dir.clone(), e));
            }
            _ => {}
        }
    }
    // Mounted but unreadable: mounting again would not help (and fails
    // for the same lack of privilege); say what is really wrong.
    if let Some((dir, e)) = denied {
        return Err(unreadable_note(&dir, &e));
    }
    if let Some(dir) = mounted.first() {
        return Err(format!(
            "tracefs is mounted at {} but has no events directory",
            dir.display()
        ));
    }
    let target = std::ffi::CString::new(TRACEFS).map_err(|e| e.to_string())?;
    let fstype = std::ffi::CString::new("tracefs").map_err(|e| e.to_string())?;
    let source = std::ffi::CString::new("nodev").map_err(|e| e.to_string())?;
    // SAFETY: valid NUL-terminated strings; null data is allowed.
    let ret = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if ret == 0 && Path::new(TRACEFS).join("events").is_dir() {
        log::info!("mounted tracefs at {TRACEFS}");
        Ok(PathBuf::from(TRACEFS))
    } else {
        Err(format!(
            "tracefs is not mounted and mounting it at {TRACEFS} failed ({}); \
             mount it with `mount -t tracefs nodev {TRACEFS}`",
            std::io::Error::last_os_error()
        ))
    }
}

/// Loaded kernel modules (from /proc/modules).
pub fn loaded_modules() -> Vec<String> {
    fs::read_to_string("/proc/modules")
        .map(|s| {
            s.lines()
                .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Address of a kernel symbol from /proc/kallsyms (root sees real addresses;
/// others see zeros, reported as None).
pub fn kallsyms_lookup(symbol: &str) -> Option<u64> {
    let text = fs::read_to_string("/proc/kallsyms").ok()?;
    text.lines().find_map(|line| {
        let mut it = line.split_whitespace();
        let addr = it.next()?;
        let _ty = it.next()?;
        let name = it.next()?;
        if name == symbol && it.next().is_none() {
            u64::from_str_radix(addr, 16).ok().filter(|&a| a != 0)
        } else {
            None
        }
    })
}

/// The kernel's view of what exists, gathered once at start-up.
#[derive(Debug, Default)]
pub struct KernelInfo {
    pub release: String,
    /// vmlinux BTF plus the BTF of the modules probes need, if present.
    pub btf: Option<Btf>,
    pub btf_error: Option<String>,
    pub tracefs: Option<PathBuf>,
    pub tracefs_error: Option<String>,
    pub modules: Vec<String>,
}

impl KernelInfo {
    pub fn discover() -> Self {
        Self::discover_with_module_btf("nvidia")
    }

    /// Like `discover`, reading the BTF of `module` (at most one: module
    /// BTF is split BTF on top of vmlinux) instead of the NVIDIA driver's.
    pub fn discover_with_module_btf(module_btf: &str) -> Self {
        let mut info = KernelInfo {
            release: release(),
            modules: loaded_modules(),
            ..Default::default()
        };
        match Btf::vmlinux() {
            Ok(mut btf) => {
                let path = Path::new("/sys/kernel/btf").join(module_btf);
                if path.exists() {
                    if let Err(e) = btf.add_module(&path) {
                        info.btf_error = Some(format!("{e:#}"));
                    }
                }
                info.btf = Some(btf);
            }
            Err(e) => {
                info.btf_error = Some(format!(
                    "{e:#}: the kernel has no BTF (CONFIG_DEBUG_INFO_BTF); \
                     built-in structure offsets are used"
                ))
            }
        }
        match ensure_tracefs() {
            Ok(p) => info.tracefs = Some(p),
            Err(e) => info.tracefs_error = Some(e),
        }
        info
    }

    /// Whether tracefs lists `group:event`; None when tracefs is unavailable.
    pub fn tracefs_has(&self, group: &str, event: &str) -> Option<bool> {
        let dir = self.tracefs.as_ref()?;
        Some(dir.join("events").join(group).join(event).is_dir())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_versions() {
        assert_eq!(parse_version("6.1.0-27-amd64"), Some((6, 1)));
        assert_eq!(parse_version("5.10.226-1"), Some((5, 10)));
        assert_eq!(parse_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(parse_version("garbage"), None);
    }

    #[test]
    fn tracefs_mount_points_from_mountinfo() {
        let mi = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
42 23 0:13 / /sys/kernel/tracing rw,relatime - tracefs nodev rw
43 23 0:14 / /sys/kernel/debug rw,relatime - debugfs debugfs rw
44 22 0:13 / /mnt/my\\040trace rw - tracefs nodev rw
";
        assert_eq!(
            tracefs_mounts(mi),
            vec![
                PathBuf::from("/sys/kernel/tracing"),
                PathBuf::from("/mnt/my trace")
            ]
        );
        assert!(tracefs_mounts("").is_empty());
    }

    #[test]
    fn unreadable_tracefs_is_not_called_unmounted() {
        let e = std::io::Error::from_raw_os_error(libc::EACCES);
        let n = unreadable_note(Path::new(TRACEFS), &e);
        assert!(n.contains("is mounted at /sys/kernel/tracing"), "{n}");
        assert!(
            n.contains("not readable") && !n.contains("not mounted"),
            "{n}"
        );
    }
}
