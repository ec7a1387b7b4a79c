//! Raw tracepoint programs: loading them and attaching them where
//! `plan::tracepoint` says; and the structure offsets the programs take
//! from BTF.

use aya::{
    programs::{ProgramError, RawTracePoint},
    Ebpf,
};
use gpudirect_trace_common::KernelOffsets;

use super::explain::{self, Env, Failure, Stage, Target};
use crate::{btf::Btf, catalog::ProbeSpec};

/// Structure offsets from BTF, falling back to the defaults (documented in
/// `KernelOffsets::DEFAULT`) member by member.
pub fn offsets_from_btf(btf: Option<&Btf>) -> KernelOffsets {
    let mut off = KernelOffsets::DEFAULT;
    let Some(btf) = btf else { return off };
    if let (Some(kobj), Some(name)) = (
        btf.member_offset("device", "kobj"),
        btf.member_offset("kobject", "name"),
    ) {
        off.device_name = kobj + name;
    }
    if let Some(o) = btf.member_offset("pci_dev", "dev") {
        off.pci_dev_device = o;
    }
    if let Some(size) = btf.struct_size("scatterlist") {
        off.sg_stride = size;
        let m = |name| btf.member_offset("scatterlist", name);
        off.sg_page_link = m("page_link").unwrap_or(off.sg_page_link);
        off.sg_length = m("length").unwrap_or(off.sg_length);
        off.sg_dma_address = m("dma_address").unwrap_or(off.sg_dma_address);
        off.sg_dma_length = m("dma_length").unwrap_or(u32::MAX);
    }
    let sgt = |name| btf.member_offset("sg_table", name);
    off.sgt_sgl = sgt("sgl").unwrap_or(off.sgt_sgl);
    off.sgt_nents = sgt("nents").unwrap_or(off.sgt_nents);
    off.sgt_orig_nents = sgt("orig_nents").unwrap_or(off.sgt_orig_nents);
    if let Some(size) = btf.struct_size("page") {
        off.page_size = size;
    }
    if let Some(o) = btf
        .member_offset("nv_dma_device", "dev")
        .or_else(|| btf.typedef_member_offset("nv_dma_device_t", "dev"))
    {
        off.nv_dma_device_dev = o;
    }
    // The invalidation hooks' units and the cache tags' devices (inval.rs).
    let m = |s: &str, f: &str| btf.member_offset(s, f).unwrap_or(u32::MAX);
    off.intel_iommu_seq_id = m("intel_iommu", "seq_id");
    off.intel_iommu_segment = m("intel_iommu", "segment");
    off.amd_iommu_index = m("amd_iommu", "index");
    off.cache_tag_type = m("cache_tag", "type");
    off.cache_tag_iommu = m("cache_tag", "iommu");
    off.cache_tag_dev = m("cache_tag", "dev");
    // pci:pcie_link_event's bus (7.x): its port and its speeds. The speeds
    // are `unsigned char` in every kernel that has the tracepoint.
    off.pci_bus_self = m("pci_bus", "self");
    off.pci_bus_cur_speed = m("pci_bus", "cur_bus_speed");
    off.pci_bus_max_speed = m("pci_bus", "max_bus_speed");
    // 6.12 added the command queue: (smmu, cmdq, cmds, n, sync).
    if btf.function_args("arm_smmu_cmdq_issue_cmdlist") == Some(5) {
        off.smmu_cmds_arg = 2;
    }
    off
}

pub(super) fn load_program(ebpf: &mut Ebpf, name: &str, env: &Env) -> Result<(), String> {
    let prog: &mut RawTracePoint = ebpf
        .program_mut(name)
        .ok_or_else(|| format!("program {name} missing from the object"))?
        .try_into()
        .map_err(|e: ProgramError| e.to_string())?;
    prog.load()
        .map_err(|e| explain::program_error(&e, Stage::Load, Target::Tracepoint { name }, env))
}

/// Attaches `spec`'s program to its tracepoint (`plan::tracepoint` decided
/// to); what the kernel answered.
pub(super) fn attach(ebpf: &mut Ebpf, spec: &ProbeSpec) -> Result<(), Failure> {
    let prog: &mut RawTracePoint = match ebpf.program_mut(spec.program).map(TryInto::try_into) {
        Some(Ok(p)) => p,
        _ => return Err(Failure::other(format!("program {} missing", spec.program))),
    };
    prog.attach(spec.event())
        .map(|_| ())
        .map_err(|e| Failure::from_program_error(&e))
}
