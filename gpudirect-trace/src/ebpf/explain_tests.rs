//! The explainer's tests: each errno and policy a load or attach can meet,
//! and the one line it gives for them, without loading anything.

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

/// The line for `errno` at `stage` of `target` on a kernel with no policy.
fn said(errno: i32, stage: Stage, target: Target<'_>) -> String {
    explain(&io(errno), stage, target, &env(Policy::default()))
}

/// The GPU test host (6.18.44-fc-v657-gpu): every fentry load EPERM,
/// no securityfs mounted.
#[test]
fn eperm_without_securityfs_says_policy_and_how_to_see_it() {
    let s = said(
        libc::EPERM,
        Stage::Load,
        Target::Fentry {
            name: "nv_dma_map_sgt",
        },
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
    let s = said(
        libc::ENOENT,
        Stage::Attach,
        Target::Tracepoint {
            name: "dma:dma_map_phys",
        },
    );
    assert_eq!(
        s,
        "this kernel (6.1.0-50-amd64) has no tracepoint dma:dma_map_phys"
    );
    let s = said(
        libc::ENOENT,
        Stage::Attach,
        Target::Kprobe {
            name: "dma_map_page_attrs",
        },
    );
    assert!(
        s.contains("no probe-able function dma_map_page_attrs"),
        "{s}"
    );
    let s = said(
        libc::ESRCH,
        Stage::Load,
        Target::Fentry {
            name: "nv_dma_map_sgt",
        },
    );
    assert!(s.contains("no BTF for nv_dma_map_sgt"), "{s}");
    assert!(no_kernel_btf().contains("CONFIG_DEBUG_INFO_BTF"));
}

#[test]
fn einval_is_a_prototype_or_trampoline_problem() {
    let s = said(
        libc::EINVAL,
        Stage::Attach,
        Target::Tracepoint { name: "iommu:map" },
    );
    assert!(s.starts_with("prototype mismatch"), "{s}");
    let s = said(
        libc::EINVAL,
        Stage::Load,
        Target::Fentry { name: "iommu_map" },
    );
    assert!(s.contains("CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS"), "{s}");
    let s = said(ENOTSUPP, Stage::Load, Target::Fentry { name: "iommu_map" });
    assert!(s.contains("no BPF trampolines"), "{s}");
    let s = said(libc::EINVAL, Stage::Load, Target::Object);
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
    let s = said(libc::ENFILE, Stage::Attach, Target::Kprobe { name: "f" });
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
