//! The facts of each kernel the attach decisions are tested over
//! (`plan_tests.rs`), and the probe matrix those kernels gave.

use std::collections::BTreeMap;

use super::super::*;
use crate::families::tracepoints;

/// A kernel's facts: the tracepoints it has (with the arguments the
/// programs read, unless given), its functions in vmlinux BTF, those only
/// in kallsyms, and its modules' functions in their BTF.
pub struct Kernel {
    pub release: &'static str,
    pub tracepoints: &'static [&'static str],
    /// BTF argument counts where they differ from what the programs read.
    args: &'static [(&'static str, usize)],
    vmlinux: &'static [&'static str],
    kallsyms_only: &'static [&'static str],
    module_funcs: &'static [(&'static str, &'static [&'static str])],
    fentry: Result<(), &'static str>,
    ftrace_hint: Option<&'static str>,
    kprobes: bool,
    /// /sys/class/iommu's entries.
    iommu_units: &'static [&'static str],
}

impl Kernel {
    pub fn facts(&self) -> Facts {
        let tracepoints = tracepoints()
            .iter()
            .map(|s| {
                let has = self.tracepoints.contains(&s.name);
                let n = self.args.iter().find(|(t, _)| *t == s.name);
                let tp = Tracepoint {
                    btf_args: has.then_some(n.map_or(s.args_read, |(_, n)| *n)),
                    in_tracefs: Some(has),
                };
                (s.name, tp)
            })
            .collect();
        let mut functions = BTreeMap::new();
        let mut id = 1000;
        for &f in self.vmlinux {
            id += 1;
            functions.insert(
                f,
                Function {
                    btf: Some((id, None)),
                    kallsyms: true,
                },
            );
        }
        for &f in self.kallsyms_only {
            functions.insert(
                f,
                Function {
                    btf: None,
                    kallsyms: true,
                },
            );
        }
        for (module, funcs) in self.module_funcs {
            for &f in *funcs {
                id += 1;
                functions.insert(
                    f,
                    Function {
                        btf: Some((id, Some((*module).to_owned()))),
                        kallsyms: true,
                    },
                );
            }
        }
        Facts {
            env: Env {
                release: self.release.to_owned(),
                policy: explain::Policy::default(),
            },
            modules: self
                .module_funcs
                .iter()
                .map(|(m, _)| (*m).to_owned())
                .collect(),
            tracepoints,
            functions,
            fentry: self.fentry.map_err(str::to_owned),
            ftrace_hint: self.ftrace_hint.map(str::to_owned),
            kprobes: self.kprobes,
            iommu_units: self.iommu_units.iter().map(|u| (*u).to_owned()).collect(),
            layouts: BTreeMap::new(),
        }
    }
}

/// docs/probe-compatibility.md as generated on 2026-12-01 (columns 5.10,
/// 6.1, 6.12): the rows whose probes exist in the catalog today.
pub const MATRIX: &str = "\
| `dma:dma_alloc` | unavailable | unavailable | attached |
| `dma:dma_alloc_pages` | unavailable | unavailable | attached |
| `dma:dma_free` | unavailable | unavailable | attached |
| `dma:dma_free_pages` | unavailable | unavailable | attached |
| `dma:dma_map_page` | unavailable | unavailable | attached |
| `dma:dma_map_phys` | unavailable | unavailable | unavailable |
| `dma:dma_map_resource` | unavailable | unavailable | attached |
| `dma:dma_map_sg` | unavailable | unavailable | attached |
| `dma:dma_map_sg_err` | unavailable | unavailable | attached |
| `dma:dma_sync_sg_for_cpu` | unavailable | unavailable | attached |
| `dma:dma_sync_sg_for_device` | unavailable | unavailable | attached |
| `dma:dma_sync_single_for_cpu` | unavailable | unavailable | attached |
| `dma:dma_sync_single_for_device` | unavailable | unavailable | attached |
| `dma:dma_unmap_page` | unavailable | unavailable | attached |
| `dma:dma_unmap_phys` | unavailable | unavailable | unavailable |
| `dma:dma_unmap_resource` | unavailable | unavailable | attached |
| `dma:dma_unmap_sg` | unavailable | unavailable | attached |
| `iommu:add_device_to_group` | attached | attached | attached |
| `iommu:attach_device_to_domain` | attached | attached | attached |
| `iommu:detach_device_from_domain` | attached | attached | unavailable |
| `iommu:io_page_fault` | attached | attached | attached |
| `iommu:map` | attached | attached | attached |
| `iommu:remove_device_from_group` | attached | attached | attached |
| `iommu:unmap` | attached | attached | attached |
| `learn:domain_attach` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `nvidia:nvidia_dev_xid` | unavailable (module nvidia is not loaded) | unavailable (module nvidia is not loaded) | unavailable (module nvidia is not loaded) |
| `ras:aer_event` | attached | attached | attached |
| `swiotlb:swiotlb_bounced` | attached | attached | attached |
| `time:dma_alloc` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:dma_free` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:dma_map` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:dma_map_resource` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:dma_map_sg` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:dma_map_sgtable` | unavailable (none of dma_map_sgtable exists on this kernel) | unavailable (not needed: __dma_map_sg_attrs exists here and its hook covers this operation) | unavailable (not needed: __dma_map_sg_attrs exists here and its hook covers this operation) |
| `time:dma_sync_sg_for_cpu` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:dma_sync_sg_for_device` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:dma_sync_single_for_cpu` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:dma_sync_single_for_device` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:dma_unmap` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:dma_unmap_resource` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:dma_unmap_sg` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:fault_handler` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:iommu_map` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:iommu_map_atomic` | attached (fentry/fexit) | attached (fentry/fexit) | unavailable (none of iommu_map_atomic exists on this kernel) |
| `time:iommu_map_sg` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:iommu_unmap` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:iommu_unmap_fast` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:iotlb_sync` | attached (fentry/fexit) | attached (fentry/fexit) | attached (fentry/fexit) |
| `time:nv_dma_map_sgt` | unavailable (module nvidia is not loaded) | unavailable (module nvidia is not loaded) | unavailable (module nvidia is not loaded) |
| `time:nvidia_p2p_put_pages` | unavailable (module nvidia is not loaded) | unavailable (module nvidia is not loaded) | unavailable (module nvidia is not loaded) |
| `time:swiotlb_map` | attached (fentry/fexit) | attached (kprobe/kretprobe) | attached (fentry/fexit) |
";

/// The functions every Debian VM kernel has in vmlinux BTF (5.10 to 6.12).
const DEBIAN_COMMON: &[&str] = &[
    "dma_map_page_attrs",
    "dma_unmap_page_attrs",
    "dma_unmap_sg_attrs",
    "dma_map_resource",
    "dma_unmap_resource",
    "dma_alloc_attrs",
    "dma_free_attrs",
    "iommu_map",
    "iommu_unmap_fast",
    "iommu_unmap",
    "iommu_flush_iotlb_psi",
    "dmar_fault",
    "__iommu_attach_device",
];

/// What 5.10 and 6.1 have and 6.12 has not: the syncs without their `__`
/// variants, the atomic IOMMU maps.
const DEBIAN_BEFORE_6_8: &[&str] = &[
    "dma_map_sg_attrs",
    "dma_sync_single_for_cpu",
    "dma_sync_single_for_device",
    "dma_sync_sg_for_cpu",
    "dma_sync_sg_for_device",
    "iommu_map_atomic",
    "iommu_map_sg_atomic",
];

const IOMMU_TPS: &[&str] = &[
    "iommu:map",
    "iommu:unmap",
    "iommu:io_page_fault",
    "iommu:add_device_to_group",
    "iommu:remove_device_from_group",
    "iommu:attach_device_to_domain",
    "ras:aer_event",
    "swiotlb:swiotlb_bounced",
];

fn concat(parts: &[&'static [&'static str]]) -> &'static [&'static str] {
    Box::leak(parts.concat().into_boxed_slice())
}

/// A Debian VM kernel of the probe matrix: nvme loaded, kprobes and fentry
/// usable, one VT-d unit.
fn debian_vm(
    release: &'static str,
    tracepoints: &'static [&'static str],
    vmlinux: &'static [&'static str],
) -> Kernel {
    Kernel {
        release,
        tracepoints,
        args: &[],
        vmlinux,
        kallsyms_only: &[],
        module_funcs: &[("nvme", &[])],
        fentry: Ok(()),
        ftrace_hint: None,
        kprobes: true,
        iommu_units: &["dmar0"],
    }
}

/// 5.10: no dma:* tracepoints, the DMA-API functions without `__`
/// variants, no dma_map_sgtable (an inline there).
pub fn debian_5_10() -> Kernel {
    debian_vm(
        "5.10.0-32-amd64",
        concat(&[IOMMU_TPS, &["iommu:detach_device_from_domain"]]),
        concat(&[
            DEBIAN_COMMON,
            DEBIAN_BEFORE_6_8,
            &["swiotlb_tbl_map_single"],
        ]),
    )
}

/// 6.1: `__dma_map_sg_attrs` covers dma_map_sgtable; the matrix shows
/// swiotlb_map by kprobe, i.e. fentry was not possible there: modelled as
/// swiotlb_tbl_map_single missing from BTF (the matrix does not record
/// which fentry step failed).
pub fn debian_6_1() -> Kernel {
    Kernel {
        kallsyms_only: &["swiotlb_tbl_map_single"],
        ..debian_vm(
            "6.1.0-50-amd64",
            concat(&[IOMMU_TPS, &["iommu:detach_device_from_domain"]]),
            concat(&[
                DEBIAN_COMMON,
                DEBIAN_BEFORE_6_8,
                &["__dma_map_sg_attrs", "dma_map_sgtable"],
            ]),
        )
    }
}

const DMA_TPS_6_8: &[&str] = &[
    "dma:dma_map_sg",
    "dma:dma_unmap_sg",
    "dma:dma_map_sg_err",
    "dma:dma_alloc",
    "dma:dma_alloc_pages",
    "dma:dma_free",
    "dma:dma_free_pages",
    "dma:dma_sync_single_for_cpu",
    "dma:dma_sync_single_for_device",
    "dma:dma_sync_sg_for_cpu",
    "dma:dma_sync_sg_for_device",
];

/// 6.12: the dma:* tracepoints (6.8+ names), no iommu_map_atomic, no
/// detach_device_from_domain.
pub fn debian_6_12() -> Kernel {
    debian_vm(
        "6.12.117+deb13-amd64",
        concat(&[
            IOMMU_TPS,
            DMA_TPS_6_8,
            &[
                "dma:dma_map_page",
                "dma:dma_unmap_page",
                "dma:dma_map_resource",
                "dma:dma_unmap_resource",
            ],
        ]),
        concat(&[
            DEBIAN_COMMON,
            &[
                "__dma_map_sg_attrs",
                "dma_map_sgtable",
                "__dma_sync_single_for_cpu",
                "__dma_sync_single_for_device",
                "__dma_sync_sg_for_cpu",
                "__dma_sync_sg_for_device",
                "iommu_map_sg",
                "swiotlb_tbl_map_single",
            ],
        ]),
    )
}

/// The 6.18 DMA-API and IOMMU functions (dma_map_phys replaces the
/// page/resource calls) and tracepoints, as both 6.18 hosts have them.
const V6_18_FUNCS: &[&str] = &[
    "dma_map_phys",
    "dma_unmap_phys",
    "__dma_map_sg_attrs",
    "dma_map_sgtable",
    "dma_unmap_sg_attrs",
    "dma_alloc_attrs",
    "dma_free_attrs",
    "__dma_sync_single_for_cpu",
    "__dma_sync_single_for_device",
    "__dma_sync_sg_for_cpu",
    "__dma_sync_sg_for_device",
    "iommu_map",
    "iommu_map_sg",
    "iommu_unmap_fast",
    "iommu_unmap",
    "swiotlb_tbl_map_single",
    "__iommu_attach_device",
];

fn v6_18_tracepoints() -> &'static [&'static str] {
    concat(&[
        &IOMMU_TPS[..6],
        DMA_TPS_6_8,
        &[
            "dma:dma_map_phys",
            "dma:dma_unmap_phys",
            "swiotlb:swiotlb_bounced",
        ],
    ])
}

/// The GPU test host (6.18.44-fc-v657-gpu): BTF for vmlinux and the nvidia
/// module, tracefs refusing available_filter_functions, no kprobes, no
/// ras:aer_event, and every fentry load refused with EPERM.
pub fn gpu_host() -> Kernel {
    Kernel {
        release: "6.18.44-fc-v657-gpu",
        tracepoints: concat(&[v6_18_tracepoints(), &["nvidia:nvidia_dev_xid"]]),
        // As the host's `probes` printed them.
        args: &[
            ("dma:dma_map_sg_err", 6),
            ("dma:dma_alloc", 7),
            ("dma:dma_alloc_pages", 7),
            ("dma:dma_free", 6),
            ("dma:dma_free_pages", 6),
        ],
        vmlinux: V6_18_FUNCS,
        kallsyms_only: &[],
        module_funcs: &[(
            "nvidia",
            &[
                "nv_dma_map_sgt",
                "nv_dma_map_alloc",
                "nv_dma_unmap_alloc",
                "nv_dma_map_peer",
                "nv_dma_unmap_peer",
                "nv_dma_map_mmio",
                "nvidia_p2p_get_pages",
                "nvidia_p2p_put_pages",
                "nvidia_p2p_dma_map_pages",
                "nvidia_p2p_dma_unmap_pages",
            ],
        )],
        fentry: Ok(()),
        ftrace_hint: Some(
            "the function tracer is not usable from tracefs \
             (/sys/kernel/tracing/available_filter_functions: Operation not permitted (os error 1))",
        ),
        kprobes: false,
        iommu_units: &[],
    }
}

/// The CI host (6.18.44-fc-v657, `probes` run there 2026-12-01): the GPU
/// host's kernel without the nvidia module: lockdown (integrity) + BPF LSM,
/// tracefs refusing available_filter_functions, no kprobes, no
/// ras:aer_event, every fentry load refused with EPERM.
pub fn ci_host() -> Kernel {
    Kernel {
        release: "6.18.44-fc-v657",
        tracepoints: v6_18_tracepoints(),
        module_funcs: &[],
        ..gpu_host()
    }
}

/// A kernel without the function tracer: fentry is not tried at all.
pub fn no_function_tracer() -> Kernel {
    Kernel {
        fentry: Err("no function tracer (CONFIG_FUNCTION_TRACER)"),
        ftrace_hint: None,
        ..ci_host()
    }
}
