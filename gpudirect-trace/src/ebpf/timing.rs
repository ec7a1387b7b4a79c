//! Attaching the timing hooks (catalog::TIMING): fentry/fexit where the
//! kernel has BTF and the function tracer, kprobe/kretprobe otherwise, and a
//! clear reason where neither exists (e.g. a kernel built without
//! CONFIG_FUNCTION_TRACER and CONFIG_KPROBES, like the CI host's).

use std::{collections::HashSet, path::Path};

use aya::{
    programs::{FEntry, FExit, KProbe, ProgramError},
    Btf as AyaBtf, Ebpf,
};

use super::{ProbeStatus, Status};
use crate::{
    catalog::{TimingSpec, ATTACH_LEARN, FAULT_HANDLER, TIMING},
    kernel::KernelInfo,
};

/// What the kernel offers for function hooks.
pub struct HookSupport {
    /// BTF for fentry/fexit, present only with a function tracer.
    btf: Option<AyaBtf>,
    fentry_reason: String,
    kprobes: bool,
    kallsyms: HashSet<String>,
}

impl HookSupport {
    pub fn discover(kernel: &KernelInfo) -> Self {
        // fentry needs the function tracer, and the function tracer must be
        // usable: some kernels have it but forbid it (lockdown or an LSM), and
        // opening available_filter_functions then fails with EPERM.
        let ftrace: Result<(), String> = match kernel.tracefs.as_ref() {
            None => Err("no tracefs to check the function tracer".into()),
            Some(t) => {
                let path = t.join("available_filter_functions");
                match std::fs::File::open(&path) {
                    Ok(_) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Err("no function tracer (CONFIG_FUNCTION_TRACER)".into())
                    }
                    Err(e) => Err(format!(
                        "the function tracer is not usable ({}: {e}; kernel lockdown or an LSM \
                         forbids ftrace)",
                        path.display()
                    )),
                }
            }
        };
        let (btf, fentry_reason) = match (&kernel.btf, ftrace) {
            (None, _) => (None, "no kernel BTF".to_owned()),
            (_, Err(why)) => (None, why),
            (Some(_), Ok(())) => match AyaBtf::from_sys_fs() {
                Ok(b) => (Some(b), String::new()),
                Err(e) => (None, format!("BTF unreadable for fentry: {e}")),
            },
        };
        let kallsyms = std::fs::read_to_string("/proc/kallsyms")
            .map(|t| {
                t.lines()
                    .filter_map(|l| {
                        let mut it = l.split_whitespace();
                        let (_, ty, name) = (it.next()?, it.next()?, it.next()?);
                        matches!(ty, "t" | "T").then(|| name.to_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            btf,
            fentry_reason,
            kprobes: Path::new("/sys/bus/event_source/devices/kprobe").exists(),
            kallsyms,
        }
    }

    fn exists(&self, kernel: &KernelInfo, func: &str) -> bool {
        kernel.btf.as_ref().is_some_and(|b| b.has_function(func)) || self.kallsyms.contains(func)
    }
}

fn errno_text(e: &ProgramError) -> String {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } if verifier_log.to_string().trim().is_empty() => {
            format!(
                "the kernel refused to load it ({io_error}); for fentry this usually means no \
                 ftrace direct-call trampolines (CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS)"
            )
        }
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            format!("verifier rejected it ({io_error}): {verifier_log}")
        }
        other => other.to_string(),
    }
}

/// Attaches (or, with `attach` false, only verifies) every timing hook.
pub fn attach_all(ebpf: &mut Ebpf, kernel: &KernelInfo, attach: bool) -> Vec<ProbeStatus> {
    let support = HookSupport::discover(kernel);
    TIMING
        .iter()
        .chain([&FAULT_HANDLER, &ATTACH_LEARN])
        .map(|spec| attach_one(ebpf, kernel, &support, spec, attach))
        .collect()
}

fn names(spec: &TimingSpec) -> (String, String, String, String) {
    if spec.slot == ATTACH_LEARN.slot {
        (
            "attach_fentry".into(),
            String::new(),
            "attach_kprobe".into(),
            String::new(),
        )
    } else {
        (
            format!("t_{}_in", spec.slot),
            format!("t_{}_out", spec.slot),
            format!("k_{}_in", spec.slot),
            format!("k_{}_out", spec.slot),
        )
    }
}

fn attach_one(
    ebpf: &mut Ebpf,
    kernel: &KernelInfo,
    support: &HookSupport,
    spec: &TimingSpec,
    attach: bool,
) -> ProbeStatus {
    let status = |status, kind: &'static str, program: &'static str, reason: String| ProbeStatus {
        name: spec.name,
        kind,
        program,
        status,
        reason,
        hot: true,
    };
    let Some(func) = spec
        .candidates
        .iter()
        .copied()
        .find(|f| support.exists(kernel, f))
    else {
        return status(
            Status::Unavailable,
            "fentry|kprobe",
            "",
            format!(
                "none of {} exists on this kernel",
                spec.candidates.join(", ")
            ),
        );
    };
    let (fin, fout, kin, kout) = names(spec);
    if !attach {
        // Verify the kprobe variant: it loads without a target function.
        return match load_kprobes(ebpf, &kin, &kout) {
            Ok(()) => status(
                Status::Loaded,
                "kprobe/kretprobe",
                func,
                "verified; not attached".into(),
            ),
            Err(e) => status(Status::Failed, "kprobe/kretprobe", func, e),
        };
    }
    let mut why = Vec::new();
    match &support.btf {
        Some(btf) if kernel.btf.as_ref().is_some_and(|b| b.has_function(func)) => {
            match attach_fentry(ebpf, btf, func, &fin, &fout) {
                Ok(()) => {
                    return status(Status::Attached, "fentry/fexit", func, format!("on {func}"))
                }
                Err(e) => why.push(format!("fentry: {e}")),
            }
        }
        Some(_) => why.push(format!("fentry: {func} has no BTF")),
        None => why.push(format!("fentry: {}", support.fentry_reason)),
    }
    if !support.kprobes {
        why.push("kprobe: no kprobes (CONFIG_KPROBES)".into());
        return status(Status::Unavailable, "fentry|kprobe", func, why.join("; "));
    }
    match attach_kprobes(ebpf, func, &kin, &kout) {
        Ok(()) => status(
            Status::Attached,
            "kprobe/kretprobe",
            func,
            format!("on {func} ({})", why.join("; ")),
        ),
        Err(e) => {
            why.push(format!("kprobe: {e}"));
            status(Status::Failed, "fentry|kprobe", func, why.join("; "))
        }
    }
}

/// The program `name` of the object as a `T` (KProbe, FEntry, FExit).
fn program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T, String>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or_else(|| format!("program {name} missing"))?
        .try_into()
        .map_err(|e: ProgramError| e.to_string())
}

fn load_kprobes(ebpf: &mut Ebpf, kin: &str, kout: &str) -> Result<(), String> {
    for name in [kin, kout].into_iter().filter(|n| !n.is_empty()) {
        program::<KProbe>(ebpf, name)?
            .load()
            .map_err(|e| errno_text(&e))?;
    }
    Ok(())
}

fn attach_kprobes(ebpf: &mut Ebpf, func: &str, kin: &str, kout: &str) -> Result<(), String> {
    load_kprobes(ebpf, kin, kout)?;
    for name in [kin, kout].into_iter().filter(|n| !n.is_empty()) {
        program::<KProbe>(ebpf, name)?
            .attach(func, 0)
            .map_err(|e| errno_text(&e))?;
    }
    Ok(())
}

fn attach_fentry(
    ebpf: &mut Ebpf,
    btf: &AyaBtf,
    func: &str,
    fin: &str,
    fout: &str,
) -> Result<(), String> {
    {
        let p = program::<FEntry>(ebpf, fin)?;
        p.load(func, btf).map_err(|e| errno_text(&e))?;
        p.attach().map_err(|e| errno_text(&e))?;
    }
    if fout.is_empty() {
        return Ok(());
    }
    let result = (|| {
        let p = program::<FExit>(ebpf, fout)?;
        p.load(func, btf).map_err(|e| errno_text(&e))?;
        p.attach().map_err(|e| errno_text(&e)).map(|_| ())
    })();
    if result.is_err() {
        // Never leave an entry hook without its exit hook.
        if let Ok(p) = program::<FEntry>(ebpf, fin) {
            let _ = p.unload();
        }
    }
    result
}
