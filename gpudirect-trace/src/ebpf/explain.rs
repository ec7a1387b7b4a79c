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
#[path = "explain_tests.rs"]
mod tests;
