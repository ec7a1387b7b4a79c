//! What the running kernel offers for function hooks, found once before
//! anything is planned: BTF and the function tracer for fentry/fexit,
//! kprobes (and whether tracefs makes them), the text and data symbols of
//! /proc/kallsyms, the IOMMU units. `plan::Facts` takes it in; `timing.rs`
//! attaches with it.

use std::{collections::HashSet, path::Path};

use aya::Btf as AyaBtf;

use crate::kernel::KernelInfo;

/// Environment variable that makes the timing and DMA-API hooks use
/// kprobe/kretprobe even where fentry/fexit would work (for tests).
pub const NO_FENTRY_ENV: &str = "GPUDIRECT_TRACE_NO_FENTRY";

/// What the kernel offers for function hooks.
pub struct HookSupport {
    /// vmlinux BTF for fentry/fexit; None where fentry cannot work.
    pub(super) btf: Option<AyaBtf>,
    pub(super) fentry_reason: String,
    /// Why the function tracer looks unusable, added to fentry failures: a
    /// kernel may forbid tracefs's view of ftrace (EPERM) and still run BPF
    /// trampolines, so this is a hint, not a verdict.
    pub(super) ftrace_hint: Option<String>,
    pub(super) kprobes: bool,
    /// tracefs, when its kprobe_events is writable: kprobes are made there,
    /// so that their misses are counted (`kprobe_events`); the reason
    /// otherwise (kprobes then come from the kprobe PMU, misses uncounted
    /// before Linux 6.7).
    pub(super) kprobe_events: Result<std::path::PathBuf, String>,
    pub(super) kallsyms: HashSet<String>,
    /// Address of the kernel variable `vmemmap_base` (x86_64), for
    /// page_to_phys() in the dma_map_page_attrs hooks.
    pub vmemmap_base: Option<u64>,
    /// The data symbols `task_context` reads, by name (0: hidden).
    pub task_context_syms: std::collections::HashMap<&'static str, u64>,
    /// The IOMMU units (/sys/class/iommu: dmar0, ivhd0, smmu3.0x...), for
    /// the vendor-specific hooks (`TimingSpec::units`).
    pub iommu_units: Vec<String>,
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
            (None, _) => (None, super::explain::no_kernel_btf().to_owned()),
            (_, Err(why)) => (None, why),
            (Some(_), Ok(())) => match AyaBtf::from_sys_fs() {
                Ok(b) => (Some(b), String::new()),
                Err(e) => (None, format!("BTF unreadable for fentry: {e}")),
            },
        };
        let mut kallsyms = HashSet::new();
        let mut vmemmap_base = None;
        let mut task_context_syms = std::collections::HashMap::new();
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
                    // Zero-based per-CPU symbols (x86_64 before 6.15) may
                    // show as absolute ("A").
                    "d" | "D" | "b" | "B" | "A" => {
                        if let Some(&n) = super::task_context::SYMBOLS.iter().find(|&&n| n == name)
                        {
                            let a = u64::from_str_radix(addr, 16).unwrap_or(0);
                            task_context_syms.insert(n, a);
                        }
                    }
                    _ => {}
                }
            }
        }
        let kprobe_events = match kernel.tracefs.as_ref() {
            Some(t) => super::kprobe_events::usable(t).map(|_| t.clone()),
            None => Err(kernel
                .tracefs_error
                .clone()
                .unwrap_or_else(|| "no tracefs".into())),
        };
        if let Ok(t) = &kprobe_events {
            super::kprobe_events::remove_stale(t);
        }
        Self {
            btf,
            fentry_reason,
            ftrace_hint,
            kprobes: Path::new("/sys/bus/event_source/devices/kprobe").exists()
                || kprobe_events.is_ok(),
            kprobe_events,
            kallsyms,
            vmemmap_base,
            task_context_syms,
            iommu_units: iommu_units(Path::new("/sys/class/iommu")),
        }
    }
}

/// The unit names under `dir` (/sys/class/iommu), sorted; none if absent.
pub fn iommu_units(dir: &Path) -> Vec<String> {
    crate::kernel::dir_names(dir)
}
