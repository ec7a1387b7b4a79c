//! The attach decisions over the facts of each kernel we know, checked
//! against what those kernels really did: the probe matrix of the Debian
//! 5.10, 6.1 and 6.12 VMs (docs/probe-compatibility.md, rows copied
//! below), `probes` on the CI host (6.18, no function tracer, no kprobes)
//! and on the GPU test host (6.18, lockdown + BPF LSM, no kprobes:
//! tests/fixtures/gpu-host-h200x2-trace/session2/run-sh/probes.json).
//!
//! What the kernel answers to a load or attach cannot be had without root
//! and that kernel, so `Answers` answers as that kernel did (every test
//! using it says `as_answered`): raw tracepoints and kprobes attach,
//! fentry loads unless the kernel refused it (the GPU host: EPERM).

use std::collections::BTreeMap;

use super::*;
use crate::{ebpf::dma_source::dma_plan, families::tracepoints};

#[path = "plan_kernels.rs"]
mod kernels;
use kernels::*;

/// Answers as the kernel did (see the module doc): `fentry_errno` is the
/// errno of every tracing-program load, None where they load.
struct Answers<'a> {
    env: &'a Env,
    fentry_errno: Option<i32>,
}

impl Answers<'_> {
    fn refused(&self, func: &str) -> Result<(), String> {
        match self.fentry_errno {
            None => Ok(()),
            Some(e) => Err(explain::explain(
                &Failure::from_io(&std::io::Error::from_raw_os_error(e), ""),
                Stage::Load,
                Target::Fentry { name: func },
                self.env,
            )),
        }
    }
}

impl Attempts for Answers<'_> {
    fn verify(&mut self, _: &TimingSpec, _: &str, _: &str) -> Result<String, String> {
        Ok(String::new())
    }
    fn fentry(&mut self, _: &TimingSpec, func: &str, _: &str) -> Result<String, String> {
        self.refused(func).map(|()| String::new())
    }
    fn module_fentry(&mut self, _: &str, func: &str, _: u32, slot: &str) -> Result<(), String> {
        // module_fentry::attach names the program that failed first.
        self.refused(func).map_err(|e| format!("t_{slot}_in: {e}"))
    }
    fn kprobes(&mut self, _: &TimingSpec, _: &str, _: &str) -> Result<String, String> {
        Ok(String::new())
    }
}

const ATTACH: Options = Options {
    attach: true,
    dma_source: DmaSource::Auto,
};

/// Every probe's status as the loader would report it on `k`.
fn outcome(k: &Kernel, opts: Options, fentry_errno: Option<i32>) -> Vec<ProbeStatus> {
    let facts = k.facts();
    let mut out: Vec<ProbeStatus> = tracepoints()
        .iter()
        .map(|spec| {
            tracepoint_outcome(
                &facts,
                spec,
                tracepoint(&facts, spec, opts, None),
                || Ok(()),
            )
        })
        .collect();
    let mut answers = Answers {
        env: &facts.env,
        fentry_errno,
    };
    for spec in hook_specs(None) {
        let p = hook(&facts, spec, opts.attach);
        out.push(hook_outcome(&facts, spec, p, &mut answers));
    }
    out
}

/// A status as `cargo xtask probe-matrix` renders it
/// (xtask/src/vm/probe_matrix.rs, `statuses`).
fn matrix_cell(p: &ProbeStatus) -> String {
    let s = p.status.as_str();
    if p.status == Status::Attached && p.kind != "raw_tracepoint" {
        format!("{s} ({})", p.kind)
    } else if p.status != Status::Attached
        && !p.reason.is_empty()
        && !p.reason.contains("has no tracepoint")
    {
        format!("{s} ({})", p.reason)
    } else {
        s.to_owned()
    }
}

#[test]
fn debian_vm_facts_give_the_probe_matrix_as_answered() {
    for (col, k) in [debian_5_10(), debian_6_1(), debian_6_12()]
        .into_iter()
        .enumerate()
    {
        let got: BTreeMap<&str, String> = outcome(&k, ATTACH, None)
            .iter()
            .map(|p| (p.name, matrix_cell(p)))
            .collect();
        let mut rows = 0;
        for row in MATRIX.lines() {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let name = cells[1].trim_matches('`');
            let want = cells[2 + col];
            assert_eq!(
                got.get(name).map(String::as_str),
                Some(want),
                "{name} on {}",
                k.release
            );
            rows += 1;
        }
        assert_eq!(rows, 51);
    }
}

#[test]
fn the_ci_host_attaches_tracepoints_and_says_why_no_hook_attaches_as_answered() {
    let got = outcome(&ci_host(), ATTACH, Some(libc::EPERM));
    assert_eq!(got.len(), tracepoints().len() + hook_specs(None).count());
    let refused = "fentry: the kernel refused to load it (Operation not permitted (os error 1)): \
                   as root this is a security policy";
    for p in &got {
        match p.name {
            "iommu:map" => assert_eq!(
                (p.status, p.reason.as_str()),
                (Status::Attached, "3 args per BTF")
            ),
            "dma:dma_map_page" => assert_eq!(
                (p.status, p.reason.as_str()),
                (
                    Status::Unavailable,
                    "this kernel (6.18.44-fc-v657) has no tracepoint dma:dma_map_page"
                )
            ),
            "time:dma_map" => {
                assert_eq!((p.status, p.program), (Status::Unavailable, "dma_map_phys"));
                assert!(p.reason.starts_with(refused), "{}", p.reason);
                assert!(p.reason.ends_with("kprobe: no kprobes (CONFIG_KPROBES)"));
            }
            "time:nv_dma_map_sgt" => assert_eq!(p.reason, "module nvidia is not loaded"),
            _ => {}
        }
        assert_ne!(p.status, Status::Failed, "{p:?}");
        if p.name.starts_with("time:") || p.name.starts_with("learn:") {
            assert_ne!(p.status, Status::Attached, "{p:?}");
        }
    }
    // Without a function tracer, fentry is not even tried.
    for p in outcome(&no_function_tracer(), ATTACH, None) {
        if p.name == "time:iommu_map" {
            assert_eq!(
                p.reason,
                "fentry: no function tracer (CONFIG_FUNCTION_TRACER); kprobe: no kprobes \
                 (CONFIG_KPROBES)"
            );
        }
    }
}

/// `probes` on the GPU host (the fixture's statuses and functions): the
/// tracepoints, nvidia:nvidia_dev_xid included, attach; every hook whose
/// function exists is tried, refused by the policy, and has no kprobe to
/// fall back on.
#[test]
fn the_gpu_host_attaches_tracepoints_only_kernel_refusing_fentry_as_answered() {
    let fixture: serde_json::Value = serde_json::from_str(include_str!(
        "../../../tests/fixtures/gpu-host-h200x2-trace/session2/run-sh/probes.json"
    ))
    .expect("fixture");
    let k = gpu_host();
    let got: BTreeMap<&str, ProbeStatus> = outcome(&k, ATTACH, Some(libc::EPERM))
        .into_iter()
        .map(|p| (p.name, p))
        .collect();
    let mut checked = 0;
    for want in fixture["probes"].as_array().expect("probes") {
        let name = want["name"].as_str().expect("name");
        let Some(p) = got.get(name) else {
            panic!("{name} is no longer in the catalog")
        };
        assert_eq!(p.status.as_str(), want["status"], "{name}");
        assert_eq!(p.program, want["program"], "{name}");
        // The capture predates "1 arg" (it said "1 args per BTF"); the
        // fixture stays as the host printed it.
        let reason = want["reason"]
            .as_str()
            .expect("reason")
            .replace("1 args per BTF", "1 arg per BTF");
        if p.status == Status::Unavailable && p.program.is_empty() || p.kind == "raw_tracepoint" {
            assert_eq!(p.reason, reason, "{name}");
        } else {
            // Today's explainer adds the policy it can see to the text.
            let refused = "the kernel refused to load it (Operation not permitted (os error 1)): \
                           as root this is a security policy (kernel lockdown or an LSM such as \
                           the BPF LSM) forbidding tracing programs";
            assert!(p.reason.starts_with("fentry: "), "{name}: {}", p.reason);
            assert!(p.reason.contains(refused), "{name}: {}", p.reason);
            assert!(
                p.reason.contains("mount -t securityfs"),
                "{name}: {}",
                p.reason
            );
            assert!(
                p.reason.ends_with(
                    "(the function tracer is not usable from tracefs \
                     (/sys/kernel/tracing/available_filter_functions: Operation not permitted \
                     (os error 1))); kprobe: no kprobes (CONFIG_KPROBES)"
                ),
                "{name}: {}",
                p.reason
            );
            assert_eq!(
                p.reason.starts_with("fentry: t_"),
                name.contains("nv"),
                "{name}"
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 46, "every probe the fixture has");
    // With the hooks refused, every DMA-API operation comes from its
    // tracepoint; the IOVA API, which has none, from nothing.
    let probes: Vec<ProbeStatus> = got.into_values().collect();
    let (mask, sources) = dma_plan(&probes, DmaSource::Auto, 0, true);
    for s in &sources {
        let want = if s.op == "iova" { "none" } else { "tracepoint" };
        assert_eq!(s.source, want, "{sources:?}");
    }
    assert_eq!(mask, 0, "no hook is asked to report an operation");
}

#[test]
fn kernels_without_dma_tracepoints_get_every_dma_api_record_from_the_hooks() {
    let k = debian_6_1();
    let probes = outcome(&k, ATTACH, None);
    let hooked = hook_specs(None)
        .filter(|s| {
            probes
                .iter()
                .any(|p| p.name == s.name && p.status == Status::Attached)
        })
        .fold(0, |m, s| m | s.dma_ops);
    let (mask, sources) = dma_plan(&probes, DmaSource::Auto, hooked, true);
    // 6.1 has no IOVA API to hook.
    for s in &sources {
        let want = if s.op == "iova" { "none" } else { "hook" };
        assert_eq!(s.source, want, "{sources:?}");
    }
    assert_eq!(mask & hooked, hooked);
    // --dma-source tracepoints there: nothing reports them, and it says so.
    let (mask, sources) = dma_plan(&probes, DmaSource::Tracepoints, hooked, true);
    assert_eq!(mask, 0);
    assert!(sources.iter().all(|s| s.source == "none"), "{sources:?}");
}

#[test]
fn dma_source_hooks_leaves_the_dma_tracepoints_loaded_on_6_12() {
    let k = debian_6_12();
    let opts = Options {
        attach: true,
        dma_source: DmaSource::Hooks,
    };
    for p in outcome(&k, opts, None) {
        if p.name.starts_with("dma:") && k.tracepoints.contains(&p.name) {
            assert_eq!(p.status, Status::Loaded, "{p:?}");
            assert!(p.reason.contains("--dma-source hooks"), "{p:?}");
        }
        if p.name.starts_with("iommu:map") {
            assert_eq!(p.status, Status::Attached);
        }
    }
}

#[test]
fn verification_loads_what_exists_and_attaches_nothing() {
    let k = debian_5_10();
    let facts = k.facts();
    let opts = Options {
        attach: false,
        dma_source: DmaSource::Auto,
    };
    assert_eq!(programs_to_load(&facts, false), crate::families::programs());
    let on = programs_to_load(&facts, true);
    assert!(
        on.contains(&"iommu_map") && !on.contains(&"dma_map"),
        "{on:?}"
    );
    for p in outcome(&k, opts, None) {
        assert!(
            matches!(p.status, Status::Loaded | Status::Unavailable),
            "{p:?}"
        );
        if p.name == "time:dma_map" {
            assert_eq!(
                (p.kind, p.reason.as_str()),
                ("kprobe/kretprobe", "verified; not attached")
            );
        }
    }
}

#[test]
fn a_short_prototype_a_failed_load_and_a_missing_module_function() {
    let k = debian_6_12();
    let mut facts = k.facts();
    let map = tracepoints()
        .iter()
        .find(|s| s.name == "iommu:map")
        .expect("iommu:map");
    facts.tracepoints.insert(
        "iommu:map",
        Tracepoint {
            btf_args: Some(2),
            in_tracefs: Some(true),
        },
    );
    assert_eq!(
        tracepoint(&facts, map, ATTACH, None),
        TpStep::Decided(
            Status::Failed,
            "prototype mismatch: the kernel's iommu:map has 2 arguments, the program reads 3"
                .into()
        )
    );
    assert_eq!(
        tracepoint(&facts, map, ATTACH, Some("verifier rejected it")),
        TpStep::Decided(
            Status::Failed,
            "program iommu_map did not load: verifier rejected it".into()
        )
    );
    // Listed by tracefs without a BTF prototype: attached by name.
    facts.tracepoints.insert(
        "iommu:map",
        Tracepoint {
            btf_args: None,
            in_tracefs: Some(true),
        },
    );
    assert_eq!(
        tracepoint(&facts, map, ATTACH, None),
        TpStep::Attach { btf_args: None }
    );
    assert_eq!(
        tracepoint_attached(&facts, map, None, Ok(())),
        (
            Status::Attached,
            "no BTF prototype; attached by name".into()
        )
    );
    let enoent = Failure::from_io(&std::io::Error::from_raw_os_error(libc::ENOENT), "");
    assert_eq!(
        tracepoint_attached(&facts, map, None, Err(enoent)).0,
        Status::Unavailable
    );
    // A module hook whose function is in vmlinux's BTF, not the module's.
    let mut facts = gpu_host().facts();
    facts.functions.insert(
        "nv_dma_map_sgt",
        Function {
            btf: Some((7, None)),
            kallsyms: true,
        },
    );
    let spec = crate::families::nvidia::NVIDIA_TIMING
        .iter()
        .find(|s| s.name == "time:nv_dma_map_sgt")
        .expect("spec");
    match hook(&facts, spec, true) {
        HookPlan::Attach {
            fentry: Fentry::Skip(why),
            kprobe: false,
            ..
        } => assert_eq!(
            why,
            "nv_dma_map_sgt is not in the BTF of module nvidia (/sys/kernel/btf/nvidia)"
        ),
        other => panic!("{other:?}"),
    }
}
