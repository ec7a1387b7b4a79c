//! Why the kernel refused a program: one explainer for every load and
//! attach error, whether it came through aya (the object, raw tracepoints,
//! kprobes, fentry on vmlinux) or through `sys` (fentry on module
//! functions, `module_fentry`).
//!
//! A failure is reduced to what the kernel said (the errno, and the
//! verifier's log where it ran); `explain` turns it into one line that
//! names the likely cause on this machine. EPERM as root is a security
//! policy, and the policy in force is read from securityfs
//! (`/sys/kernel/security/lockdown`, `/sys/kernel/security/lsm`) where it is
//! mounted: the GPU test host (6.18) refuses every fentry load that way and
//! has no securityfs to say which.

use std::{error::Error as StdError, io, path::Path};

/// The security policy in force, from securityfs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// The selected lockdown mode (`none`, `integrity`, `confidentiality`);
    /// None where unknown (no securityfs, no lockdown LSM).
    pub lockdown: Option<String>,
    /// The active LSMs in order; None where securityfs is not readable.
    pub lsms: Option<Vec<String>>,
}

/// What the explanations name besides the error: the kernel release and
/// the security policy in force.
#[derive(Clone, Debug, Default)]
pub struct Env {
    pub release: String,
    pub policy: Policy,
}

pub const SECURITYFS: &str = "/sys/kernel/security";

impl Policy {
    /// Reads the policy of the running kernel (unreadable files: unknown).
    pub fn discover() -> Self {
        Self::read(Path::new(SECURITYFS))
    }

    /// The policy as the files under `dir` (a securityfs mount) say.
    pub fn read(dir: &Path) -> Self {
        let file = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        Self::parse(file("lockdown").as_deref(), file("lsm").as_deref())
    }

    /// `lockdown`: `none [integrity] confidentiality` (the selected mode in
    /// brackets); `lsm`: `lockdown,capability,landlock,yama,apparmor,bpf`.
    pub fn parse(lockdown: Option<&str>, lsm: Option<&str>) -> Self {
        let lockdown = lockdown.and_then(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
                .map(str::to_owned)
        });
        let lsms = lsm.map(|l| {
            l.trim()
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        });
        Self { lockdown, lsms }
    }

    fn has_lsm(&self, name: &str) -> bool {
        self.lsms.iter().flatten().any(|l| l == name)
    }

    /// What may be refusing tracing programs, as far as the files tell.
    fn eperm_cause(&self) -> String {
        let mut causes = Vec::new();
        match self.lockdown.as_deref() {
            Some("confidentiality") => causes.push(
                "kernel lockdown is in confidentiality mode (it forbids kprobes, perf, tracefs \
                 and BPF reads of kernel memory)"
                    .to_owned(),
            ),
            Some("integrity") => {
                causes.push("kernel lockdown is in integrity mode".to_owned());
            }
            _ => {}
        }
        if self.has_lsm("bpf") {
            causes.push(
                "the BPF LSM is active: a BPF LSM program may deny bpf() \
                 (security_bpf_prog_load)"
                    .to_owned(),
            );
        }
        for (lsm, what) in [("selinux", "SELinux"), ("apparmor", "AppArmor")] {
            if self.has_lsm(lsm) {
                causes.push(format!("{what} may deny the bpf or perfmon permission"));
            }
        }
        match (&self.lsms, causes.is_empty()) {
            (None, _) => format!(
                "{SECURITYFS} is not readable, so which policy is unknown (mount -t securityfs \
                 securityfs {SECURITYFS} to see lockdown and lsm)"
            ),
            (Some(l), true) => format!(
                "none of the active LSMs ({}) is known to refuse it and lockdown is {}",
                l.join(","),
                self.lockdown.as_deref().unwrap_or("not active")
            ),
            (Some(l), false) => format!("{} (lsm={})", causes.join("; "), l.join(",")),
        }
    }
}

/// Where in the life of a program the kernel refused it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Load,
    Attach,
}

/// What was being loaded or attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    /// The whole object (its maps and global data).
    Object,
    /// A raw tracepoint program on tracepoint `name` (`group:event`).
    Tracepoint { name: &'a str },
    /// An fentry/fexit program on function `name`.
    Fentry { name: &'a str },
    /// A kprobe/kretprobe program on function `name`.
    Kprobe { name: &'a str },
}

/// What the kernel said: its errno, the verifier's log where it ran, and
/// the error's own text (for failures that are not the kernel's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Failure {
    pub errno: Option<i32>,
    pub verifier_log: String,
    pub text: String,
}

impl Failure {
    pub fn from_io(e: &io::Error, verifier_log: &str) -> Self {
        Self {
            errno: e.raw_os_error(),
            verifier_log: verifier_log.to_owned(),
            text: e.to_string(),
        }
    }

    /// From aya's program errors: the verifier's log of a load error, and
    /// the errno of whatever syscall failed underneath.
    pub fn from_program_error(e: &aya::programs::ProgramError) -> Self {
        match e {
            aya::programs::ProgramError::LoadError {
                io_error,
                verifier_log,
            } => Self::from_io(io_error, &verifier_log.to_string()),
            other => Self::from_error(other),
        }
    }

    /// Any error: the errno of the first `io::Error` among its sources.
    pub fn from_error(e: &(dyn StdError + 'static)) -> Self {
        let mut errno = None;
        let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
        while let Some(c) = cur {
            if let Some(io) = c.downcast_ref::<io::Error>() {
                errno = io.raw_os_error();
                break;
            }
            if let Some(s) = c.downcast_ref::<aya::sys::SyscallError>() {
                errno = s.io_error.raw_os_error();
                break;
            }
            cur = c.source();
        }
        Self {
            errno,
            verifier_log: String::new(),
            text: e.to_string(),
        }
    }

    /// A failure of ours before any syscall (a program missing from the
    /// object, of the wrong type).
    pub fn other(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Default::default()
        }
    }
}

/// ENOTSUPP, the kernel-internal errno that BPF trampolines return where
/// the architecture or configuration has none (leaks to userspace as 524).
const ENOTSUPP: i32 = 524;

/// Verifier log lines kept in a message: the last ones say why.
const LOG_LINES: usize = 3;
/// Characters kept of one log line.
const LOG_LINE_CHARS: usize = 240;

/// The part of the verifier's log that says why: its last lines (the
/// verifier stops at the first error and prints it last), without the
/// statistics it appends, each cut to a readable length, and how much was
/// left out. None where the log holds nothing (the verifier did not run).
pub fn verifier_summary(log: &str) -> Option<String> {
    let stats = |l: &str| {
        l.starts_with("processed ")
            || l.starts_with("verification time")
            || l.starts_with("stack depth")
            || l.starts_with("max_states_per_insn")
    };
    let lines: Vec<&str> = log
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !stats(l))
        .collect();
    if lines.is_empty() {
        return None;
    }
    let keep = &lines[lines.len().saturating_sub(LOG_LINES)..];
    let cut = |l: &str| -> String {
        match l.char_indices().nth(LOG_LINE_CHARS) {
            Some((i, _)) => format!("{}...", &l[..i]),
            None => l.to_owned(),
        }
    };
    let mut out: Vec<String> = keep.iter().map(|l| cut(l)).collect();
    let dropped = lines.len() - keep.len();
    if dropped > 0 {
        out.insert(
            0,
            format!("({dropped} earlier log lines; RUST_LOG=debug prints them)"),
        );
    }
    Some(out.join(" | "))
}

/// One line saying why `target` failed at `stage`, with the kernel's own
/// words and the likely cause on this machine.
/// What the kernel's refusal of a program means, from aya's error.
pub fn program_error(
    e: &aya::programs::ProgramError,
    stage: Stage,
    target: Target<'_>,
    env: &Env,
) -> String {
    explain(&Failure::from_program_error(e), stage, target, env)
}

pub fn explain(f: &Failure, stage: Stage, target: Target<'_>, env: &Env) -> String {
    let policy = &env.policy;
    let release = &env.release;
    if stage == Stage::Load {
        if let Some(summary) = verifier_summary(&f.verifier_log) {
            if !f.verifier_log.is_empty() {
                log::debug!("verifier log:\n{}", f.verifier_log);
            }
            let truncated = if f.errno == Some(libc::ENOSPC) {
                " (the log outgrew its buffer)"
            } else {
                ""
            };
            return format!("verifier rejected it ({}){truncated}: {summary}", f.text);
        }
    }
    let e = &f.text;
    match (f.errno, stage, target) {
        (Some(errno @ (libc::EMFILE | libc::ENFILE)), _, _) => {
            format!("{} ({e})", out_of_descriptors_why(errno))
        }
        (Some(libc::EPERM | libc::EACCES), _, Target::Object) => format!(
            "the kernel refused the object ({e}): as root this is a security policy: {}",
            policy.eperm_cause()
        ),
        (Some(libc::EPERM | libc::EACCES), _, _) => format!(
            "the kernel refused to {} it ({e}): as root this is a security policy (kernel \
             lockdown or an LSM such as the BPF LSM) forbidding tracing programs: {}",
            match stage {
                Stage::Load => "load",
                Stage::Attach => "attach",
            },
            policy.eperm_cause()
        ),
        (Some(libc::ENOENT), _, Target::Tracepoint { name }) => {
            format!("this kernel ({release}) has no tracepoint {name}")
        }
        (Some(libc::ENOENT | libc::ESRCH), _, Target::Fentry { name }) => format!(
            "the kernel has no BTF for {name} to attach fentry to ({e}): the function is not \
             in vmlinux or its module's BTF"
        ),
        (Some(libc::ENOENT), _, Target::Kprobe { name }) => {
            format!("this kernel ({release}) has no probe-able function {name} ({e})")
        }
        (Some(libc::EINVAL), Stage::Attach, Target::Tracepoint { name }) => format!(
            "prototype mismatch ({e}): the program reads more arguments than this kernel's \
             {name} has"
        ),
        (Some(libc::EINVAL), Stage::Attach, Target::Kprobe { name }) => format!(
            "the kernel cannot probe {name} ({e}): it is blacklisted, notrace or inlined here"
        ),
        (Some(ENOTSUPP | libc::EOPNOTSUPP), _, Target::Fentry { .. }) => format!(
            "the kernel refused to load it ({e}): no BPF trampolines for fentry on this kernel \
             or architecture"
        ),
        (Some(libc::EINVAL), _, Target::Object) => {
            format!("the kernel refused the object ({e}): BPF ring buffers need Linux 5.8 or newer")
        }
        (Some(libc::E2BIG), _, _) => {
            format!("the kernel refused it ({e}): it is older than an attribute the loader set")
        }
        (Some(_), Stage::Load, Target::Fentry { .. }) => format!(
            "the kernel refused to load it ({e}); for fentry this usually means no ftrace \
             direct-call trampolines (CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS)"
        ),
        (Some(_), Stage::Load, _) => format!("the kernel refused to load it ({e})"),
        (Some(_), Stage::Attach, _) => format!("attach failed: {e}"),
        (None, _, _) => e.clone(),
    }
}

/// What running out of file descriptors means here, and what to do.
/// `ulimit -n 12` made the object load fail with "failed to create map
/// ... with code -1", which blamed the kernel (issue 30).
fn out_of_descriptors_why(errno: i32) -> String {
    if errno == libc::ENFILE {
        return "too many open files in the system (ENFILE): the kernel's file table is full \
                (fs.file-max); close other programs' files or raise fs.file-max"
            .to_owned();
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    let limit = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        format!("{} here", lim.rlim_cur)
    } else {
        "unknown".to_owned()
    };
    format!(
        "too many open files (EMFILE): the tracer holds a descriptor for each map, program and \
         probe (~100 to start, more as probes attach) and this process may open {limit} \
         (ulimit -n); raise it: ulimit -n 4096, or LimitNOFILE= in a systemd unit"
    )
}

/// The explanation of an error anywhere in `err`'s chain that is the
/// process (or the system) out of file descriptors: such an error can
/// surface in any step (a map's sysctl read, a perf event, a file), with
/// the step's own words first.
pub fn out_of_descriptors(err: &anyhow::Error) -> Option<String> {
    err.chain().find_map(|c| {
        let errno = match c.downcast_ref::<io::Error>() {
            Some(io) => io.raw_os_error(),
            None => c
                .downcast_ref::<aya::sys::SyscallError>()
                .and_then(|s| s.io_error.raw_os_error()),
        };
        matches!(errno, Some(libc::EMFILE | libc::ENFILE))
            .then(|| out_of_descriptors_why(errno.unwrap_or(libc::EMFILE)))
    })
}

/// Why fentry cannot be tried at all where the kernel has no BTF.
pub fn no_kernel_btf() -> &'static str {
    "no kernel BTF (/sys/kernel/btf/vmlinux: CONFIG_DEBUG_INFO_BTF)"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(policy: Policy) -> Env {
        Env {
            release: "6.1.0-50-amd64".into(),
            policy,
        }
    }

    fn io(errno: i32) -> Failure {
        Failure::from_io(&io::Error::from_raw_os_error(errno), "")
    }

    /// The GPU test host (6.18.44-fc-v657-gpu): every fentry load EPERM,
    /// no securityfs mounted.
    #[test]
    fn eperm_without_securityfs_says_policy_and_how_to_see_it() {
        let s = explain(
            &io(libc::EPERM),
            Stage::Load,
            Target::Fentry {
                name: "nv_dma_map_sgt",
            },
            &env(Policy::default()),
        );
        assert!(s.contains("security policy"), "{s}");
        assert!(s.contains("BPF LSM"), "{s}");
        assert!(s.contains("mount -t securityfs"), "{s}");
    }

    #[test]
    fn eperm_names_lockdown_and_the_bpf_lsm() {
        let p = Policy::parse(
            Some("none integrity [confidentiality]\n"),
            Some("lockdown,capability,landlock,yama,apparmor,bpf"),
        );
        assert_eq!(p.lockdown.as_deref(), Some("confidentiality"));
        let s = explain(
            &io(libc::EPERM),
            Stage::Load,
            Target::Fentry { name: "iommu_map" },
            &env(p),
        );
        assert!(s.contains("confidentiality mode"), "{s}");
        assert!(s.contains("the BPF LSM is active"), "{s}");
        assert!(s.contains("AppArmor"), "{s}");
        assert!(s.contains("lsm=lockdown,capability"), "{s}");
        let quiet = Policy::parse(
            Some("[none] integrity confidentiality"),
            Some("capability,yama"),
        );
        let s = explain(
            &io(libc::EPERM),
            Stage::Attach,
            Target::Kprobe { name: "f" },
            &env(quiet),
        );
        assert!(
            s.contains("none of the active LSMs (capability,yama)"),
            "{s}"
        );
        assert!(s.contains("refused to attach"), "{s}");
    }

    #[test]
    fn policy_files_read_from_a_securityfs_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("lockdown"),
            "none [integrity] confidentiality\n",
        )
        .expect("write");
        std::fs::write(dir.path().join("lsm"), "lockdown,capability,bpf").expect("write");
        let p = Policy::read(dir.path());
        assert_eq!(p.lockdown.as_deref(), Some("integrity"));
        assert_eq!(
            p.lsms.as_deref(),
            Some(&["lockdown".to_owned(), "capability".into(), "bpf".into()][..])
        );
        assert_eq!(Policy::read(&dir.path().join("absent")), Policy::default());
    }

    #[test]
    fn missing_tracepoints_and_functions_are_named() {
        let s = explain(
            &io(libc::ENOENT),
            Stage::Attach,
            Target::Tracepoint {
                name: "dma:dma_map_phys",
            },
            &env(Policy::default()),
        );
        assert_eq!(
            s,
            "this kernel (6.1.0-50-amd64) has no tracepoint dma:dma_map_phys"
        );
        let s = explain(
            &io(libc::ENOENT),
            Stage::Attach,
            Target::Kprobe {
                name: "dma_map_page_attrs",
            },
            &env(Policy::default()),
        );
        assert!(
            s.contains("no probe-able function dma_map_page_attrs"),
            "{s}"
        );
        let s = explain(
            &io(libc::ESRCH),
            Stage::Load,
            Target::Fentry {
                name: "nv_dma_map_sgt",
            },
            &env(Policy::default()),
        );
        assert!(s.contains("no BTF for nv_dma_map_sgt"), "{s}");
        assert!(no_kernel_btf().contains("CONFIG_DEBUG_INFO_BTF"));
    }

    #[test]
    fn einval_is_a_prototype_or_trampoline_problem() {
        let s = explain(
            &io(libc::EINVAL),
            Stage::Attach,
            Target::Tracepoint { name: "iommu:map" },
            &env(Policy::default()),
        );
        assert!(s.starts_with("prototype mismatch"), "{s}");
        let s = explain(
            &io(libc::EINVAL),
            Stage::Load,
            Target::Fentry { name: "iommu_map" },
            &env(Policy::default()),
        );
        assert!(s.contains("CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS"), "{s}");
        let s = explain(
            &io(ENOTSUPP),
            Stage::Load,
            Target::Fentry { name: "iommu_map" },
            &env(Policy::default()),
        );
        assert!(s.contains("no BPF trampolines"), "{s}");
        let s = explain(
            &io(libc::EINVAL),
            Stage::Load,
            Target::Object,
            &env(Policy::default()),
        );
        assert!(s.contains("ring buffers need Linux 5.8"), "{s}");
    }

    /// A real 6.1 verifier rejection's shape: the error is the last line
    /// before the statistics; the hundreds of instruction lines before it
    /// are left out and counted.
    #[test]
    fn the_verifier_log_is_cut_to_its_last_lines() {
        let mut log: String = (0..500)
            .map(|i| format!("{i}: (79) r1 = *(u64 *)(r10 -8)\n"))
            .collect();
        log.push_str("R1 invalid mem access 'scalar'\n");
        log.push_str("processed 512 insns (limit 1000000) max_states_per_insn 1 total_states 30\n");
        let f = Failure::from_io(&io::Error::from_raw_os_error(libc::EACCES), &log);
        let s = explain(
            &f,
            Stage::Load,
            Target::Kprobe { name: "f" },
            &env(Policy::default()),
        );
        assert!(s.starts_with("verifier rejected it"), "{s}");
        assert!(s.ends_with("R1 invalid mem access 'scalar'"), "{s}");
        assert!(s.contains("(498 earlier log lines"), "{s}");
        assert!(!s.contains("processed 512"), "{s}");
        assert!(s.len() < 600, "{} chars", s.len());
        let long = "x".repeat(5000);
        let cut = verifier_summary(&long).expect("a line");
        assert_eq!(cut.chars().count(), LOG_LINE_CHARS + 3);
        assert_eq!(verifier_summary("\n  \n"), None);
        // The kernel ran out of log buffer.
        let f = Failure::from_io(&io::Error::from_raw_os_error(libc::ENOSPC), "0: r0 = 0\n");
        let s = explain(&f, Stage::Load, Target::Object, &env(Policy::default()));
        assert!(s.contains("outgrew its buffer"), "{s}");
    }

    #[test]
    fn out_of_file_descriptors_says_so_not_the_kernel() {
        // aya's map creation error, as `ulimit -n 12` gives it.
        let e = aya::maps::MapError::CreateError {
            name: "MAPPINGS".into(),
            code: -1,
            io_error: io::Error::from_raw_os_error(libc::EMFILE),
        };
        let f = Failure::from_error(&e);
        assert_eq!(f.errno, Some(libc::EMFILE));
        let s = explain(&f, Stage::Load, Target::Object, &env(Policy::default()));
        assert!(
            s.starts_with("too many open files (EMFILE)") && s.contains("ulimit -n"),
            "{s}"
        );
        assert!(!s.contains("the kernel refused"), "{s}");
        let s = explain(
            &io(libc::ENFILE),
            Stage::Attach,
            Target::Kprobe { name: "f" },
            &env(Policy::default()),
        );
        assert!(s.contains("fs.file-max"), "{s}");
        // Anywhere in a chain, under other words.
        let e = anyhow::Error::new(io::Error::from_raw_os_error(libc::EMFILE))
            .context("map STACKS has an unexpected type");
        assert!(out_of_descriptors(&e).is_some_and(|s| s.contains("ulimit -n")));
        assert!(out_of_descriptors(&anyhow::anyhow!("other")).is_none());
    }

    #[test]
    fn aya_errors_give_their_errno() {
        let e = aya::programs::ProgramError::SyscallError(aya::sys::SyscallError {
            call: "bpf_raw_tracepoint_open",
            io_error: io::Error::from_raw_os_error(libc::ENOENT),
        });
        assert_eq!(Failure::from_program_error(&e).errno, Some(libc::ENOENT));
        let e = aya::programs::ProgramError::LoadError {
            io_error: io::Error::from_raw_os_error(libc::EPERM),
            verifier_log: aya_obj::VerifierLog::new(String::new()),
        };
        let f = Failure::from_program_error(&e);
        assert_eq!(f.errno, Some(libc::EPERM));
        assert!(f.verifier_log.is_empty());
        let f = Failure::other("program x missing");
        assert_eq!(
            explain(&f, Stage::Load, Target::Object, &env(Policy::default())),
            "program x missing"
        );
    }
}
