//! Attach decisions as pure functions over the facts discovered about the
//! kernel: which tracepoints exist (BTF prototype, tracefs), which
//! functions exist (BTF, kallsyms) and in which module, whether fentry can
//! be tried, whether kprobes exist, which modules are loaded.
//!
//! `Facts::discover` reads them once; `tracepoint` and `hook` decide what
//! to try for each catalog entry; the loader (`tracepoints.rs`,
//! `timing.rs`) tries it; `tracepoint_attached` and `hook_outcome` turn
//! what the kernel answered into the probe's status and reason. Only the
//! trying touches the kernel, so every decision is unit-tested over the
//! facts of each kernel we know (`plan_tests.rs`), without root.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    explain::{self, Env, Failure, Stage, Target},
    hook_support::HookSupport,
    DmaSource, ProbeStatus, Status,
};
use crate::{
    catalog::{ProbeSpec, Provider, TimingSpec},
    families,
    kernel::KernelInfo,
};

/// What the kernel has for one tracepoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tracepoint {
    /// TP_PROTO arguments per the `btf_trace_<event>` prototype in BTF.
    pub btf_args: Option<usize>,
    /// Whether tracefs lists it; None where tracefs is unavailable.
    pub in_tracefs: Option<bool>,
}

/// What the kernel has for one function.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Function {
    /// Its BTF type id, and the module whose BTF holds it (None: vmlinux).
    pub btf: Option<(u32, Option<String>)>,
    /// Listed as a text symbol in /proc/kallsyms.
    pub kallsyms: bool,
}

/// Everything the attach decisions depend on.
#[derive(Clone, Debug)]
pub struct Facts {
    /// The release, and the security policy that explains refusals.
    pub env: Env,
    pub modules: BTreeSet<String>,
    /// By catalog name (`group:event`); absent: neither BTF nor tracefs.
    pub tracepoints: BTreeMap<&'static str, Tracepoint>,
    /// By name, for every function a timing spec names; absent: none.
    pub functions: BTreeMap<&'static str, Function>,
    /// Whether fentry/fexit can be tried at all, or why not.
    pub fentry: Result<(), String>,
    /// Why the function tracer looks unusable, added to fentry failures.
    pub ftrace_hint: Option<String>,
    pub kprobes: bool,
    /// The IOMMU units (/sys/class/iommu), sorted: a vendor's invalidation
    /// hook is attached only where a unit of its driver exists.
    pub iommu_units: Vec<String>,
    /// Offsets in BTF of the (struct, member) pairs the hooks read at fixed
    /// offsets (`TimingSpec::layout`); absent: BTF does not say.
    pub layouts: BTreeMap<(&'static str, &'static str), u32>,
}

/// The timing hooks the loader attaches, in display order (`standin`: the
/// `selftest module-hook` stand-in).
pub fn hook_specs(
    standin: Option<&'static TimingSpec>,
) -> impl Iterator<Item = &'static TimingSpec> {
    families::hooks().chain(standin)
}

impl Facts {
    /// Reads what the attach decisions need from what discovery found.
    pub fn discover(
        kernel: &KernelInfo,
        hooks: &HookSupport,
        standin: Option<&'static TimingSpec>,
    ) -> Self {
        let tracepoints = families::tracepoints()
            .iter()
            .map(|spec| {
                let tp = Tracepoint {
                    btf_args: kernel
                        .btf
                        .as_ref()
                        .and_then(|b| b.tracepoint_args(spec.event())),
                    in_tracefs: kernel.tracefs_has(spec.group(), spec.event()),
                };
                (spec.name, tp)
            })
            .collect();
        let mut functions = BTreeMap::new();
        let mut layouts = BTreeMap::new();
        for spec in hook_specs(standin) {
            for &(st, member, _) in spec.layout {
                if let Some(off) = kernel
                    .btf
                    .as_ref()
                    .and_then(|b| b.member_offset(st, member))
                {
                    layouts.insert((st, member), off);
                }
            }
            for &f in spec.candidates.iter().chain(spec.unless) {
                let func = Function {
                    btf: kernel.btf.as_ref().and_then(|b| {
                        b.function_id(f)
                            .map(|(id, module)| (id, module.map(str::to_owned)))
                    }),
                    kallsyms: hooks.kallsyms.contains(f),
                };
                if func != Function::default() {
                    functions.insert(f, func);
                }
            }
        }
        Self {
            env: Env {
                release: kernel.release.clone(),
                policy: explain::Policy::discover(),
            },
            modules: kernel.modules.iter().cloned().collect(),
            tracepoints,
            functions,
            fentry: match &hooks.btf {
                Some(_) => Ok(()),
                None => Err(hooks.fentry_reason.clone()),
            },
            ftrace_hint: hooks.ftrace_hint.clone(),
            kprobes: hooks.kprobes,
            iommu_units: hooks.iommu_units.clone(),
            layouts,
        }
    }

    fn module_loaded(&self, module: &str) -> bool {
        self.modules.contains(module)
    }

    /// Whether the kernel has `func` (BTF or kallsyms).
    pub fn has_function(&self, func: &str) -> bool {
        self.functions
            .get(func)
            .is_some_and(|f| f.btf.is_some() || f.kallsyms)
    }

    /// Whether `func`'s vendor (if `spec` names one) has a unit here.
    fn vendor_present(&self, spec: &TimingSpec, func: &str) -> bool {
        match spec.units.iter().find(|(f, _)| *f == func) {
            Some((_, prefix)) => self.iommu_units.iter().any(|u| u.starts_with(prefix)),
            None => true,
        }
    }

    fn tracepoint(&self, spec: &ProbeSpec) -> Tracepoint {
        self.tracepoints.get(spec.name).copied().unwrap_or_default()
    }
}

/// Options the decisions depend on.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Attach (false: load and verify only).
    pub attach: bool,
    pub dma_source: DmaSource,
}

/// Whether the kernel has the tracepoint (BTF prototype or tracefs entry;
/// unknown counts as present: attaching then says).
pub fn tracepoint_exists(facts: &Facts, spec: &ProbeSpec) -> bool {
    if let Provider::Module(module) = spec.provider {
        if !facts.module_loaded(module) {
            return false;
        }
    }
    let tp = facts.tracepoint(spec);
    tp.btf_args.is_some() || tp.in_tracefs != Some(false)
}

/// The raw tracepoint programs to load, in catalog order. A program whose
/// tracepoints this kernel lacks is not loaded: the dma:* programs use
/// bpf_loop() (6.8+ has it), which older verifiers reject.
pub fn programs_to_load(facts: &Facts, attach: bool) -> Vec<&'static str> {
    crate::families::programs()
        .into_iter()
        .filter(|&name| {
            !attach
                || families::tracepoints()
                    .iter()
                    .any(|p| p.program == name && tracepoint_exists(facts, p))
        })
        .collect()
}

/// What to do with one catalog tracepoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TpStep {
    /// Decided without attaching.
    Decided(Status, String),
    /// Attach it; `btf_args` as BTF gives them (None: no prototype).
    Attach { btf_args: Option<usize> },
}

/// The decision for `spec`, given its program's load error (if any).
pub fn tracepoint(
    facts: &Facts,
    spec: &ProbeSpec,
    opts: Options,
    load_error: Option<&str>,
) -> TpStep {
    let decided = |s, r: String| TpStep::Decided(s, r);
    if let Some(e) = load_error {
        return decided(
            Status::Failed,
            format!("program {} did not load: {e}", spec.program),
        );
    }
    if !opts.attach {
        return decided(Status::Loaded, "verified; not attached".to_owned());
    }
    if opts.dma_source == DmaSource::Hooks && spec.group() == "dma" {
        return decided(
            Status::Loaded,
            "not attached: --dma-source hooks (the DMA-API hooks report it)".to_owned(),
        );
    }
    if let Provider::Module(module) = spec.provider {
        if !facts.module_loaded(module) {
            return decided(
                Status::Unavailable,
                format!("module {module} is not loaded"),
            );
        }
    }
    let tp = facts.tracepoint(spec);
    if tp.btf_args.is_none() && tp.in_tracefs == Some(false) {
        return decided(
            Status::Unavailable,
            format!(
                "this kernel ({}) has no tracepoint {}",
                facts.env.release, spec.name
            ),
        );
    }
    if let Some(n) = tp.btf_args {
        if n < spec.args_read {
            return decided(
                Status::Failed,
                format!(
                    "prototype mismatch: the kernel's {} has {n} arguments, the program reads {}",
                    spec.name, spec.args_read
                ),
            );
        }
    }
    TpStep::Attach {
        btf_args: tp.btf_args,
    }
}

/// The status of an attach the plan asked for, from the kernel's answer.
pub fn tracepoint_attached(
    facts: &Facts,
    spec: &ProbeSpec,
    btf_args: Option<usize>,
    result: Result<(), Failure>,
) -> (Status, String) {
    match result {
        Ok(()) => (
            Status::Attached,
            match btf_args {
                Some(n) => format!("{} per BTF", crate::output::counted(n as u64, "arg")),
                None => "no BTF prototype; attached by name".to_owned(),
            },
        ),
        Err(f) => {
            let why = explain::explain(
                &f,
                Stage::Attach,
                Target::Tracepoint { name: spec.name },
                &facts.env,
            );
            let status = if f.errno == Some(libc::ENOENT) {
                Status::Unavailable
            } else {
                Status::Failed
            };
            (status, why)
        }
    }
}

/// A catalog tracepoint's probe row: the plan's decision, or, where it
/// says attach, the kernel's answer to `attach` (as `hook_outcome` is for
/// the hooks).
pub fn tracepoint_outcome(
    facts: &Facts,
    spec: &ProbeSpec,
    step: TpStep,
    attach: impl FnOnce() -> Result<(), Failure>,
) -> ProbeStatus {
    let (status, reason) = match step {
        TpStep::Decided(status, reason) => (status, reason),
        TpStep::Attach { btf_args } => tracepoint_attached(facts, spec, btf_args, attach()),
    };
    ProbeStatus {
        name: spec.name,
        kind: spec.kind.as_str(),
        program: spec.program,
        status,
        reason,
        hot: spec.hot,
    }
}

/// How fentry/fexit would reach a hook's function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fentry {
    /// Not tried, and why.
    Skip(String),
    /// Through vmlinux BTF (aya).
    Vmlinux,
    /// Through the BTF of `module`, where the function has `btf_id`.
    Module { module: &'static str, btf_id: u32 },
}

/// What to do with one timing hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookPlan {
    /// Decided without trying.
    Unavailable(String),
    /// Load and verify the kprobe build on `func` (nothing attached).
    Verify {
        func: &'static str,
        slot: &'static str,
    },
    /// Try fentry as `fentry` says, then kprobes where `kprobe`.
    Attach {
        func: &'static str,
        slot: &'static str,
        fentry: Fentry,
        kprobe: bool,
    },
}

/// The decision for timing hook `spec`.
pub fn hook(facts: &Facts, spec: &TimingSpec, attach: bool) -> HookPlan {
    if let Some(module) = spec.module {
        if !facts.module_loaded(module) {
            return HookPlan::Unavailable(format!("module {module} is not loaded"));
        }
    }
    if let Some(cover) = spec.unless.iter().find(|f| facts.has_function(f)) {
        return HookPlan::Unavailable(format!(
            "not needed: {cover} exists here and its hook covers this operation"
        ));
    }
    // Verification (attach false) loads every vendor's programs.
    let vendor_ok = |f: &str| !attach || facts.vendor_present(spec, f);
    let Some(func) = spec
        .candidates
        .iter()
        .copied()
        .find(|f| facts.has_function(f) && vendor_ok(f))
    else {
        if let Some(f) = spec.candidates.iter().find(|f| facts.has_function(f)) {
            let units = if facts.iommu_units.is_empty() {
                "none".to_owned()
            } else {
                facts.iommu_units.join(", ")
            };
            return HookPlan::Unavailable(format!(
                "{f} exists, but this machine has no IOMMU unit of its driver \
                 (/sys/class/iommu: {units})"
            ));
        }
        return HookPlan::Unavailable(format!(
            "none of {} exists on this kernel",
            spec.candidates.join(", ")
        ));
    };
    if let Some((st, member, want, got)) = spec.layout.iter().find_map(|&(st, m, want)| {
        let got = *facts.layouts.get(&(st, m))?;
        (got != want).then_some((st, m, want, got))
    }) {
        return HookPlan::Unavailable(format!(
            "struct {st}'s {member} is at offset {got} in this kernel's BTF; the programs \
             read it at {want} (a layout they do not know)"
        ));
    }
    let slot = spec.slot_for(func);
    if !attach {
        return HookPlan::Verify { func, slot };
    }
    let btf = facts.functions.get(func).and_then(|f| f.btf.as_ref());
    let fentry = match (&facts.fentry, btf, spec.module) {
        (Err(why), _, _) => Fentry::Skip(why.clone()),
        (Ok(()), Some((_, None)), None) => Fentry::Vmlinux,
        (Ok(()), Some((id, Some(owner))), Some(module)) if owner == module => Fentry::Module {
            module,
            btf_id: *id,
        },
        (Ok(()), _, Some(module)) => Fentry::Skip(format!(
            "{func} is not in the BTF of module {module} (/sys/kernel/btf/{module})"
        )),
        (Ok(()), _, None) => Fentry::Skip(format!("{func} has no BTF")),
    };
    HookPlan::Attach {
        func,
        slot,
        fentry,
        kprobe: facts.kprobes,
    }
}

/// The kernel's answers to what a hook plan tries (`timing.rs` asks the
/// kernel; the unit tests answer as a given kernel does). Each returns the
/// build that worked (`""` or `"_nl"`) and, for the walkers, a note on how
/// far scatterlist walks reach.
pub trait Attempts {
    /// Loads the kprobe build on `func` without attaching.
    fn verify(&mut self, spec: &TimingSpec, func: &str, slot: &str) -> Result<String, String>;
    /// fentry/fexit on a vmlinux function.
    fn fentry(&mut self, spec: &TimingSpec, func: &str, slot: &str) -> Result<String, String>;
    /// fentry/fexit on a module function, through the module's BTF.
    fn module_fentry(
        &mut self,
        module: &str,
        func: &str,
        btf_id: u32,
        slot: &str,
    ) -> Result<(), String>;
    /// kprobe/kretprobe on `func`.
    fn kprobes(&mut self, spec: &TimingSpec, func: &str, slot: &str) -> Result<String, String>;
}

/// Carries out `plan` with `attempts`; the hook's status and reason.
pub fn hook_outcome(
    facts: &Facts,
    spec: &TimingSpec,
    plan: HookPlan,
    attempts: &mut impl Attempts,
) -> ProbeStatus {
    let status = |status, kind: &'static str, program: &'static str, reason: String| ProbeStatus {
        name: spec.name,
        kind,
        program,
        status,
        reason,
        hot: true,
    };
    let (func, slot, fentry, kprobe) = match plan {
        HookPlan::Unavailable(why) => return status(Status::Unavailable, "fentry|kprobe", "", why),
        HookPlan::Verify { func, slot } => {
            return match attempts.verify(spec, func, slot) {
                Ok(note) => status(
                    Status::Loaded,
                    "kprobe/kretprobe",
                    func,
                    format!("verified; not attached{note}"),
                ),
                Err(e) => status(Status::Failed, "kprobe/kretprobe", func, e),
            }
        }
        HookPlan::Attach {
            func,
            slot,
            fentry,
            kprobe,
        } => (func, slot, fentry, kprobe),
    };
    let mut why = Vec::new();
    let hint = |e: String| match &facts.ftrace_hint {
        Some(h) => format!("fentry: {e} ({h})"),
        None => format!("fentry: {e}"),
    };
    // What the attached fentry adds to "on FUNC", or why there is none.
    let fentry = match fentry {
        Fentry::Skip(reason) => Err(format!("fentry: {reason}")),
        Fentry::Vmlinux => attempts.fentry(spec, func, slot).map_err(hint),
        Fentry::Module { module, btf_id } => attempts
            .module_fentry(module, func, btf_id, slot)
            .map(|()| format!(" (through the BTF of module {module})"))
            .map_err(hint),
    };
    match fentry {
        Ok(note) => {
            return status(
                Status::Attached,
                "fentry/fexit",
                func,
                format!("on {func}{note}"),
            )
        }
        Err(e) => why.push(e),
    }
    if !kprobe {
        why.push("kprobe: no kprobes (CONFIG_KPROBES)".into());
        return status(Status::Unavailable, "fentry|kprobe", func, why.join("; "));
    }
    match attempts.kprobes(spec, func, slot) {
        Ok(note) => status(
            Status::Attached,
            "kprobe/kretprobe",
            func,
            format!("on {func}{note} ({})", why.join("; ")),
        ),
        Err(e) => {
            why.push(format!("kprobe: {e}"));
            status(Status::Failed, "fentry|kprobe", func, why.join("; "))
        }
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
