//! Attaching the timing hooks (catalog::TIMING): fentry/fexit where the
//! kernel has BTF and the function tracer, kprobe/kretprobe otherwise, and a
//! clear reason where neither exists (e.g. a kernel built without
//! CONFIG_FUNCTION_TRACER and CONFIG_KPROBES, like the CI host's).

use std::{
    collections::HashMap,
    os::fd::{AsFd as _, OwnedFd},
};

use aya::{
    programs::{FEntry, FExit, KProbe, ProgramError},
    Btf as AyaBtf, Ebpf,
};

use super::{
    explain::{self, Env, Stage, Target},
    hook_support::HookSupport,
    module_fentry::{self, ModuleHook, RelocatedObject},
    plan::{self, Facts},
    ProbeStatus, Status,
};
use crate::{catalog::TimingSpec, families::iommu::ATTACH_LEARN};

/// What `attach_all` did.
pub struct Attached {
    pub statuses: Vec<ProbeStatus>,
    /// Module hooks are loaded outside aya (`module_fentry`); these handles
    /// keep them attached and must live as long as the tracer.
    pub module_hooks: Vec<ModuleHook>,
    /// `hook_ops` bits whose DMA-API hooks are attached.
    pub dma_hooked: u32,
    /// The kprobes made through tracefs, and whether every kprobe is one
    /// (only then do their hits account for every program run).
    pub kprobes: Kprobes,
}

/// The tracer's kprobes made through tracefs (`kprobe_events`).
#[derive(Default)]
pub struct Kprobes {
    pub tracefs: Option<std::path::PathBuf>,
    pub probes: Vec<super::kprobe_events::TracefsKprobe>,
    /// Kprobes attached through the kprobe PMU instead (tracefs refused):
    /// hits minus runs would then count their runs as phantom skips.
    pub through_pmu: usize,
    /// Why the last kprobe went through the PMU, for its probe row.
    pub why_pmu: Option<String>,
}

/// Attaches (or, with `attach` false, only verifies) every timing hook:
/// `plan::hook` decides what to try, `Kernel` tries it.
pub fn attach_all(
    ebpf: &mut Ebpf,
    object: &[u8],
    facts: &Facts,
    support: &HookSupport,
    attach: bool,
    standin: Option<&'static TimingSpec>,
) -> Attached {
    let mut kernel = Kernel {
        ebpf,
        support,
        kprobes: Kprobes {
            tracefs: support.kprobe_events.as_ref().ok().cloned(),
            why_pmu: support.kprobe_events.as_ref().err().cloned(),
            ..Default::default()
        },
        env: &facts.env,
        modules: ModuleLoader {
            object,
            relocated: None,
            btf_fds: HashMap::new(),
            hooks: Vec::new(),
        },
    };
    let mut dma_hooked = 0;
    let statuses = plan::hook_specs(standin)
        .map(|spec| {
            let step = plan::hook(facts, spec, attach);
            let st = plan::hook_outcome(facts, spec, step, &mut kernel);
            if st.status == Status::Attached {
                dma_hooked |= spec.dma_ops;
            }
            st
        })
        .collect();
    Attached {
        statuses,
        module_hooks: kernel.modules.hooks,
        dma_hooked,
        kprobes: kernel.kprobes,
    }
}

/// The running kernel, answering what a hook plan tries.
struct Kernel<'a, 'o> {
    ebpf: &'a mut Ebpf,
    support: &'a HookSupport,
    kprobes: Kprobes,
    env: &'a Env,
    modules: ModuleLoader<'o>,
}

impl plan::Attempts for Kernel<'_, '_> {
    fn verify(&mut self, spec: &TimingSpec, func: &str, slot: &str) -> Result<String, String> {
        // The kprobe variant loads without a target function.
        let env = self.env;
        let b = first_build(
            spec,
            |(_, _, kin, kout)| load_kprobes(self.ebpf, kin, kout, func, env),
            slot,
        )?;
        Ok(build_note(self.ebpf, spec, b, func, None, env))
    }

    fn fentry(&mut self, spec: &TimingSpec, func: &str, slot: &str) -> Result<String, String> {
        let env = self.env;
        let btf = self
            .support
            .btf
            .as_ref()
            .ok_or_else(|| self.support.fentry_reason.clone())?;
        let b = first_build(
            spec,
            |(fin, fout, _, _)| attach_fentry(self.ebpf, btf, func, fin, fout, env),
            slot,
        )?;
        Ok(build_note(self.ebpf, spec, b, func, Some(btf), env))
    }

    fn module_fentry(
        &mut self,
        module: &str,
        func: &str,
        btf_id: u32,
        slot: &str,
    ) -> Result<(), String> {
        let (fin, fout, _, _) = names(slot, "");
        self.modules
            .attach_pair(self.ebpf, module, (func, btf_id), &fin, &fout, self.env)
    }

    fn kprobes(&mut self, spec: &TimingSpec, func: &str, slot: &str) -> Result<String, String> {
        let env = self.env;
        let kprobes = &mut self.kprobes;
        let before = kprobes.through_pmu;
        let b = first_build(
            spec,
            |(_, _, kin, kout)| attach_kprobes(self.ebpf, kprobes, func, kin, kout, env),
            slot,
        )?;
        let mut note = build_note(self.ebpf, spec, b, func, None, env);
        if self.kprobes.through_pmu > before {
            let why = self.kprobes.why_pmu.as_deref().unwrap_or("");
            note.push_str(&format!(
                " (kprobe PMU: missed runs not counted before Linux 6.7; tracefs: {why})"
            ));
        }
        Ok(note)
    }
}

/// State shared by the module hooks: the relocated object and each module's
/// BTF object, made once.
struct ModuleLoader<'a> {
    object: &'a [u8],
    relocated: Option<Result<RelocatedObject, String>>,
    btf_fds: HashMap<String, Result<OwnedFd, String>>,
    hooks: Vec<ModuleHook>,
}

impl ModuleLoader<'_> {
    fn attach_pair(
        &mut self,
        ebpf: &Ebpf,
        module: &str,
        target: (&str, u32),
        fin: &str,
        fout: &str,
        env: &Env,
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
        let entry = module_fentry::attach(obj, fin, false, target, btf.as_fd(), env)?;
        let exit = module_fentry::attach(obj, fout, true, target, btf.as_fd(), env)?;
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
    env: &Env,
) -> String {
    if build != "_nl" {
        return String::new();
    }
    let bounded = gpudirect_trace_common::SG_PREFIX + gpudirect_trace_common::SG_BOUNDED_REST;
    match super::sg_cont::load(ebpf, spec.slot, func, btf, env) {
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

fn load_kprobes(
    ebpf: &mut Ebpf,
    kin: &str,
    kout: &str,
    func: &str,
    env: &Env,
) -> Result<(), String> {
    for name in [kin, kout].into_iter().filter(|n| !n.is_empty()) {
        program::<KProbe>(ebpf, name)?.load().map_err(|e| {
            explain::program_error(&e, Stage::Load, Target::Kprobe { name: func }, env)
        })?;
    }
    Ok(())
}

/// Attaches the kprobe `kin` and kretprobe `kout` of `func`: through
/// tracefs where it is writable (their misses counted), else through aya
/// and the kprobe PMU. Both or neither: a failed kretprobe takes its
/// kprobe down again.
fn attach_kprobes(
    ebpf: &mut Ebpf,
    kprobes: &mut Kprobes,
    func: &str,
    kin: &str,
    kout: &str,
    env: &Env,
) -> Result<(), String> {
    load_kprobes(ebpf, kin, kout, func, env)?;
    let target = Target::Kprobe { name: func };
    if let Some(tracefs) = kprobes.tracefs.clone() {
        let mut made = Vec::new();
        let mut failed = None;
        for (name, ret) in [(kin, false), (kout, true)] {
            if name.is_empty() {
                continue;
            }
            let prog = program::<KProbe>(ebpf, name)?;
            let fd = prog
                .fd()
                .map_err(|e| explain::program_error(&e, Stage::Attach, target, env))?;
            match super::kprobe_events::attach(&tracefs, fd.as_fd(), func, ret) {
                Ok(p) => made.push(p),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        match failed {
            None => {
                kprobes.probes.extend(made);
                return Ok(());
            }
            // Dropping `made` removes what was made; the PMU may still
            // take the probe (e.g. a tracefs that refuses writes).
            Some(e) => {
                kprobes.why_pmu = Some(format!("{}: {e}", tracefs.join("kprobe_events").display()))
            }
        }
    }
    for name in [kin, kout].into_iter().filter(|n| !n.is_empty()) {
        program::<KProbe>(ebpf, name)?
            .attach(func, 0)
            .map_err(|e| explain::program_error(&e, Stage::Attach, target, env))?;
        kprobes.through_pmu += 1;
    }
    Ok(())
}

fn attach_fentry(
    ebpf: &mut Ebpf,
    btf: &AyaBtf,
    func: &str,
    fin: &str,
    fout: &str,
    env: &Env,
) -> Result<(), String> {
    let target = Target::Fentry { name: func };
    {
        let p = program::<FEntry>(ebpf, fin)?;
        p.load(func, btf)
            .map_err(|e| explain::program_error(&e, Stage::Load, target, env))?;
        p.attach()
            .map_err(|e| explain::program_error(&e, Stage::Attach, target, env))?;
    }
    if fout.is_empty() {
        return Ok(());
    }
    let result = (|| {
        let p = program::<FExit>(ebpf, fout)?;
        p.load(func, btf)
            .map_err(|e| explain::program_error(&e, Stage::Load, target, env))?;
        p.attach()
            .map_err(|e| explain::program_error(&e, Stage::Attach, target, env))
            .map(|_| ())
    })();
    if result.is_err() {
        // Never leave an entry hook without its exit hook.
        if let Ok(p) = program::<FEntry>(ebpf, fin) {
            let _ = p.unload();
        }
    }
    result
}
