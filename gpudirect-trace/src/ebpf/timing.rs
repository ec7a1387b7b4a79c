//! Attaching the timing hooks (catalog::TIMING): fentry/fexit where the
//! kernel has BTF and the function tracer, kprobe/kretprobe otherwise, and a
//! clear reason where neither exists (e.g. a kernel built without
//! CONFIG_FUNCTION_TRACER and CONFIG_KPROBES, like the CI host's).

use std::{
    collections::{HashMap, HashSet},
    os::fd::{AsFd as _, OwnedFd},
    path::Path,
};

use aya::{
    programs::{FEntry, FExit, KProbe, ProgramError},
    Btf as AyaBtf, Ebpf,
};

use super::{
    module_fentry::{self, ModuleHook, RelocatedObject},
    ProbeStatus, Status,
};
use crate::{
    catalog::{TimingSpec, ATTACH_LEARN, DMA_API_TIMING, FAULT_HANDLER, NVIDIA_TIMING, TIMING},
    kernel::KernelInfo,
};

/// Environment variable that makes the timing and DMA-API hooks use
/// kprobe/kretprobe even where fentry/fexit would work (for tests).
pub const NO_FENTRY_ENV: &str = "GPUDIRECT_TRACE_NO_FENTRY";

/// What the kernel offers for function hooks.
pub struct HookSupport {
    /// vmlinux BTF for fentry/fexit; None where fentry cannot work.
    btf: Option<AyaBtf>,
    fentry_reason: String,
    /// Why the function tracer looks unusable, added to fentry failures: a
    /// kernel may forbid tracefs's view of ftrace (EPERM) and still run BPF
    /// trampolines, so this is a hint, not a verdict.
    ftrace_hint: Option<String>,
    kprobes: bool,
    kallsyms: HashSet<String>,
    /// Address of the kernel variable `vmemmap_base` (x86_64), for
    /// page_to_phys() in the dma_map_page_attrs hooks.
    pub vmemmap_base: Option<u64>,
}

impl HookSupport {
    pub fn discover(kernel: &KernelInfo) -> Self {
        // fentry needs the function tracer (its patchable entry nops). When
        // tracefs shows no function tracer at all, fentry cannot work; when
        // it shows one but refuses to open it (EPERM: lockdown, an LSM or
        // tracefs permissions), loading is still worth trying.
        let mut ftrace_hint = None;
        let ftrace: Result<(), String> = match kernel.tracefs.as_ref() {
            None => Ok(()),
            Some(t) => {
                let path = t.join("available_filter_functions");
                match std::fs::File::open(&path) {
                    Ok(_) => Ok(()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Err("no function tracer (CONFIG_FUNCTION_TRACER)".into())
                    }
                    Err(e) => {
                        ftrace_hint = Some(format!(
                            "the function tracer is not usable from tracefs ({}: {e})",
                            path.display()
                        ));
                        Ok(())
                    }
                }
            }
        };
        // Test aid: exercise the kprobe/kretprobe programs on a kernel that
        // has fentry too (the VM scenarios compare the two).
        let no_fentry = std::env::var_os(NO_FENTRY_ENV).is_some_and(|v| v == "1");
        let (btf, fentry_reason) = match (&kernel.btf, ftrace) {
            _ if no_fentry => (None, format!("not tried: {NO_FENTRY_ENV}=1")),
            (None, _) => (None, "no kernel BTF".to_owned()),
            (_, Err(why)) => (None, why),
            (Some(_), Ok(())) => match AyaBtf::from_sys_fs() {
                Ok(b) => (Some(b), String::new()),
                Err(e) => (None, format!("BTF unreadable for fentry: {e}")),
            },
        };
        let mut kallsyms = HashSet::new();
        let mut vmemmap_base = None;
        if let Ok(text) = std::fs::read_to_string("/proc/kallsyms") {
            for l in text.lines() {
                let mut it = l.split_whitespace();
                let (Some(addr), Some(ty), Some(name)) = (it.next(), it.next(), it.next()) else {
                    continue;
                };
                match ty {
                    "t" | "T" => {
                        kallsyms.insert(name.to_owned());
                    }
                    // Addresses read as 0 under kptr_restrict: unknown.
                    "d" | "D" | "b" | "B" if name == "vmemmap_base" => {
                        vmemmap_base = u64::from_str_radix(addr, 16).ok().filter(|&a| a != 0);
                    }
                    _ => {}
                }
            }
        }
        Self {
            btf,
            fentry_reason,
            ftrace_hint,
            kprobes: Path::new("/sys/bus/event_source/devices/kprobe").exists(),
            kallsyms,
            vmemmap_base,
        }
    }

    fn exists(&self, kernel: &KernelInfo, func: &str) -> bool {
        kernel.btf.as_ref().is_some_and(|b| b.has_function(func)) || self.kallsyms.contains(func)
    }
}

pub(super) fn errno_text(e: &ProgramError) -> String {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } if verifier_log.to_string().trim().is_empty() => refusal(io_error),
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            format!("verifier rejected it ({io_error}): {verifier_log}")
        }
        other => other.to_string(),
    }
}

/// Why the kernel refused a tracing program before its verifier ran.
pub fn refusal(e: &std::io::Error) -> String {
    if e.raw_os_error() == Some(libc::EPERM) {
        format!(
            "the kernel refused to load it ({e}): as root this is a security policy (kernel \
             lockdown or an LSM such as the BPF LSM) forbidding tracing programs"
        )
    } else {
        format!(
            "the kernel refused to load it ({e}); for fentry this usually means no ftrace \
             direct-call trampolines (CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS)"
        )
    }
}

/// What `attach_all` did.
pub struct Attached {
    pub statuses: Vec<ProbeStatus>,
    /// Module hooks are loaded outside aya (`module_fentry`); these handles
    /// keep them attached and must live as long as the tracer.
    pub module_hooks: Vec<ModuleHook>,
    /// `hook_ops` bits whose DMA-API hooks are attached.
    pub dma_hooked: u32,
}

/// Attaches (or, with `attach` false, only verifies) every timing hook.
pub fn attach_all(
    ebpf: &mut Ebpf,
    object: &[u8],
    kernel: &KernelInfo,
    support: &HookSupport,
    attach: bool,
    standin: Option<&'static TimingSpec>,
) -> Attached {
    let mut modules = ModuleLoader {
        object,
        relocated: None,
        btf_fds: HashMap::new(),
        hooks: Vec::new(),
        policy: super::explain::Policy::discover(),
    };
    let mut dma_hooked = 0;
    let statuses = DMA_API_TIMING
        .iter()
        .chain(TIMING)
        .chain([&FAULT_HANDLER, &ATTACH_LEARN])
        .chain(NVIDIA_TIMING)
        .chain(standin)
        .map(|spec| {
            let st = attach_one(ebpf, kernel, support, &mut modules, spec, attach);
            if st.status == Status::Attached {
                dma_hooked |= spec.dma_ops;
            }
            st
        })
        .collect();
    Attached {
        statuses,
        module_hooks: modules.hooks,
        dma_hooked,
    }
}

/// State shared by the module hooks: the relocated object and each module's
/// BTF object, made once.
struct ModuleLoader<'a> {
    object: &'a [u8],
    relocated: Option<Result<RelocatedObject, String>>,
    btf_fds: HashMap<String, Result<OwnedFd, String>>,
    hooks: Vec<ModuleHook>,
    policy: super::explain::Policy,
}

impl ModuleLoader<'_> {
    fn attach_pair(
        &mut self,
        ebpf: &Ebpf,
        module: &str,
        target: (&str, u32),
        fin: &str,
        fout: &str,
    ) -> Result<(), String> {
        let obj = self
            .relocated
            .get_or_insert_with(|| RelocatedObject::new(self.object, ebpf))
            .as_ref()
            .map_err(Clone::clone)?;
        let btf = self
            .btf_fds
            .entry(module.to_owned())
            .or_insert_with(|| {
                module_fentry::module_btf_fd(module)
                    .map_err(|e| format!("the BTF object of module {module}: {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)?;
        let entry = module_fentry::attach(obj, fin, false, target, btf.as_fd(), &self.policy)?;
        let exit = module_fentry::attach(obj, fout, true, target, btf.as_fd(), &self.policy)?;
        self.hooks.extend([entry, exit]);
        Ok(())
    }
}

/// Program names (fentry, fexit, kprobe, kretprobe) of `slot`; `suffix`
/// picks a build (`_nl`: the scatterlist walk without bpf_loop()).
fn names(slot: &str, suffix: &str) -> (String, String, String, String) {
    if slot == ATTACH_LEARN.slot {
        (
            "attach_fentry".into(),
            String::new(),
            "attach_kprobe".into(),
            String::new(),
        )
    } else {
        (
            format!("t_{slot}_in{suffix}"),
            format!("t_{slot}_out{suffix}"),
            format!("k_{slot}_in{suffix}"),
            format!("k_{slot}_out{suffix}"),
        )
    }
}

/// The builds of a spec's programs to try, in order: with bpf_loop() first
/// (5.17+), then without, for the scatterlist walkers.
fn builds(spec: &TimingSpec) -> &'static [&'static str] {
    if spec.sg_walk {
        &["", "_nl"]
    } else {
        &[""]
    }
}

/// Runs `f` on each build until one works; the reason says which one.
fn first_build(
    spec: &TimingSpec,
    mut f: impl FnMut(&(String, String, String, String)) -> Result<(), String>,
    slot: &str,
) -> Result<&'static str, String> {
    let mut errors = Vec::new();
    for &b in builds(spec) {
        match f(&names(slot, b)) {
            Ok(()) => return Ok(b),
            Err(e) => errors.push(e),
        }
    }
    Err(errors.join("; without bpf_loop(): "))
}

/// After a walking spec's build attached: for the build without
/// bpf_loop(), load the walk's continuation; says how far walks reach.
fn build_note(
    ebpf: &mut Ebpf,
    spec: &TimingSpec,
    build: &str,
    func: &str,
    btf: Option<&AyaBtf>,
) -> String {
    if build != "_nl" {
        return String::new();
    }
    let bounded = gpudirect_trace_common::SG_PREFIX + gpudirect_trace_common::SG_BOUNDED_REST;
    match super::sg_cont::load(ebpf, spec.slot, func, btf) {
        Ok(()) => format!(
            " (no bpf_loop(): scatterlists walked in tail-called chunks, up to {} entries)",
            super::sg_cont::reach()
        ),
        Err(e) => format!(
            " (no bpf_loop(): scatterlists walked up to {bounded} entries; the walk's \
             continuation did not load: {e})"
        ),
    }
}

fn attach_one(
    ebpf: &mut Ebpf,
    kernel: &KernelInfo,
    support: &HookSupport,
    modules: &mut ModuleLoader<'_>,
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
    if let Some(module) = spec.module {
        if !kernel.modules.iter().any(|m| m == module) {
            return status(
                Status::Unavailable,
                "fentry|kprobe",
                "",
                format!("module {module} is not loaded"),
            );
        }
    }
    if let Some(cover) = spec.unless.iter().find(|f| support.exists(kernel, f)) {
        return status(
            Status::Unavailable,
            "fentry|kprobe",
            "",
            format!("not needed: {cover} exists here and its hook covers this operation"),
        );
    }
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
    let slot = spec.slot_for(func);
    if !attach {
        // Verify the kprobe variant: it loads without a target function.
        return match first_build(
            spec,
            |(_, _, kin, kout)| load_kprobes(ebpf, kin, kout),
            slot,
        ) {
            Ok(b) => {
                let note = build_note(ebpf, spec, b, func, None);
                status(
                    Status::Loaded,
                    "kprobe/kretprobe",
                    func,
                    format!("verified; not attached{note}"),
                )
            }
            Err(e) => status(Status::Failed, "kprobe/kretprobe", func, e),
        };
    }
    let mut why = Vec::new();
    let hint = |e: String| match &support.ftrace_hint {
        Some(h) => format!("fentry: {e} ({h})"),
        None => format!("fentry: {e}"),
    };
    let btf_id = kernel.btf.as_ref().and_then(|b| b.function_id(func));
    match (&support.btf, btf_id, spec.module) {
        (None, _, _) => why.push(format!("fentry: {}", support.fentry_reason)),
        (Some(btf), Some((_, None)), None) => {
            match first_build(
                spec,
                |(fin, fout, _, _)| attach_fentry(ebpf, btf, func, fin, fout),
                slot,
            ) {
                Ok(b) => {
                    let note = build_note(ebpf, spec, b, func, Some(btf));
                    return status(
                        Status::Attached,
                        "fentry/fexit",
                        func,
                        format!("on {func}{note}"),
                    );
                }
                Err(e) => why.push(hint(e)),
            }
        }
        (Some(_), Some((id, Some(owner))), Some(module)) if owner == module => {
            let (fin, fout, _, _) = names(slot, "");
            match modules.attach_pair(ebpf, module, (func, id), &fin, &fout) {
                Ok(()) => {
                    return status(
                        Status::Attached,
                        "fentry/fexit",
                        func,
                        format!("on {func} (through the BTF of module {module})"),
                    )
                }
                Err(e) => why.push(hint(e)),
            }
        }
        (Some(_), _, Some(module)) => why.push(format!(
            "fentry: {func} is not in the BTF of module {module} (/sys/kernel/btf/{module})"
        )),
        (Some(_), _, None) => why.push(format!("fentry: {func} has no BTF")),
    }
    if !support.kprobes {
        why.push("kprobe: no kprobes (CONFIG_KPROBES)".into());
        return status(Status::Unavailable, "fentry|kprobe", func, why.join("; "));
    }
    match first_build(
        spec,
        |(_, _, kin, kout)| attach_kprobes(ebpf, func, kin, kout),
        slot,
    ) {
        Ok(b) => {
            let note = build_note(ebpf, spec, b, func, None);
            status(
                Status::Attached,
                "kprobe/kretprobe",
                func,
                format!("on {func}{note} ({})", why.join("; ")),
            )
        }
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
