//! Host-wide checks: IOMMU presence and mode, kernel command line, SWIOTLB,
//! IOMMU groups, NVIDIA driver version/parameters and GPUDirect RDMA modules.

use std::collections::BTreeMap;

use super::{
    devices::{Device, Kind},
    findings::{ev, Findings, Severity},
    tree::Tree,
};

/// Kernel parameters that matter for DMA, in command-line order.
pub fn cmdline_params(cmdline: &str) -> Vec<(String, String)> {
    cmdline
        .split_whitespace()
        // Everything after a bare `--` goes to init, not to the kernel.
        .take_while(|t| *t != "--")
        .filter_map(|t| {
            let (k, v) = t.split_once('=').unwrap_or((t, ""));
            matches!(
                k,
                "intel_iommu"
                    | "amd_iommu"
                    | "iommu"
                    | "iommu.passthrough"
                    | "iommu.strict"
                    | "swiotlb"
                    | "pci"
                    | "pcie_acs_override"
            )
            .then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

pub fn iommu_vendor(name: &str) -> &'static str {
    if name.starts_with("dmar") {
        "Intel VT-d"
    } else if name.starts_with("ivhd") {
        "AMD-Vi"
    } else if name.starts_with("smmu") || name.contains(".smmu") || name.contains("iommu@") {
        "ARM SMMU"
    } else if name.starts_with("virtio") {
        "virtio-iommu"
    } else {
        "unknown vendor"
    }
}

/// Returns whether an IOMMU is present (None: unknown).
pub fn check_iommu(tree: &Tree, devs: &[Device], f: &mut Findings) -> Option<bool> {
    const P: &str = "/proc/cmdline";
    let params = match tree.read(P) {
        Ok(c) => cmdline_params(&c),
        Err(e) => {
            f.unreadable("kernel.cmdline", "host", P, &e);
            Vec::new()
        }
    };
    for (k, v) in &params {
        cmdline_finding(k, v, f);
    }

    const C: &str = "/sys/class/iommu";
    let units = match tree.list(C) {
        Ok(u) => u
            .into_iter()
            .map(|n| n.trim_end_matches(".link").to_string())
            .collect::<Vec<_>>(),
        // The class directory only exists with CONFIG_IOMMU_API; absent = none.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            f.unreadable("iommu.present", "host", C, &e);
            return None;
        }
    };
    if units.is_empty() {
        f.add(
            "iommu.absent",
            Severity::Info,
            "host",
            "no IOMMU: devices DMA straight to physical addresses (bus address = CPU physical)",
            vec![format!("{C}: no entries")],
            "nothing to do for GPUDirect (no translation cost, no isolation). In a VM this is \
             the guest's view; the hypervisor's IOMMU still translates underneath.",
        );
        return Some(false);
    }
    let vendors: Vec<String> = units
        .iter()
        .map(|u| format!("{u} ({})", iommu_vendor(u)))
        .collect();
    f.add(
        "iommu.present",
        Severity::Info,
        "host",
        format!("IOMMU present: {}", vendors.join(", ")),
        vec![format!("{C}: {}", units.join(" "))],
        "",
    );
    check_groups(tree, devs, f);
    Some(true)
}

fn cmdline_finding(k: &str, v: &str, f: &mut Findings) {
    let e = vec![ev("/proc/cmdline", format!("{k}={v}"))];
    let (id, sev, summary, advice): (&str, Severity, String, &str) = match (k, v) {
        ("swiotlb", "force") => (
            "swiotlb.forced",
            Severity::Problem,
            "swiotlb=force: every streaming DMA mapping bounces through the SWIOTLB buffer".into(),
            "remove swiotlb=force (a debugging/confidential-VM option): it copies all DMA \
             through a small bounce buffer, and GPU peer memory (BAR1) cannot be bounced, so \
             GPUDirect RDMA/P2P break or crawl",
        ),
        ("swiotlb", _) => (
            "swiotlb.param",
            Severity::Ok,
            format!("swiotlb={v}: bounce buffering only for devices that need it"),
            "",
        ),
        ("iommu", "pt") | ("iommu.passthrough", "1") => (
            "iommu.cmdline",
            Severity::Ok,
            format!("{k}={v}: IOMMU in passthrough (identity) for host drivers"),
            "",
        ),
        ("intel_iommu", "off") | ("amd_iommu", "off") | ("iommu", "off") => (
            "iommu.cmdline",
            Severity::Info,
            format!("{k}={v}: IOMMU disabled by the kernel command line"),
            "the field guide's `intel_iommu=off` works but also drops VFIO and interrupt \
             remapping; `iommu=pt` keeps the IOMMU for VFIO while host drivers (GPU, NIC) DMA \
             untranslated",
        ),
        ("iommu.strict", "1") => (
            "iommu.cmdline",
            Severity::Warn,
            "iommu.strict=1: IOTLB invalidated synchronously on every unmap".into(),
            "strict mode makes dma_unmap expensive (pinning/unpinning and RDMA registration \
             churn); use iommu=pt for GPU/NIC hosts, or iommu.strict=0 (lazy, DMA-FQ)",
        ),
        _ => (
            "kernel.cmdline",
            Severity::Info,
            format!("kernel parameter {k}={v}"),
            "",
        ),
    };
    f.add(id, sev, "host", summary, e, advice);
}

/// Per-group default domain type and which GPUs/NICs share a group.
fn check_groups(tree: &Tree, devs: &[Device], f: &mut Findings) {
    const G: &str = "/sys/kernel/iommu_groups";
    let groups = match tree.list(G) {
        Ok(g) => g,
        Err(e) => return f.unreadable("iommu.groups", "host", G, &e),
    };
    let interesting: BTreeMap<&str, &Device> = devs
        .iter()
        .filter(|d| d.is_endpoint_of_interest())
        .map(|d| (d.bdf.as_str(), d))
        .collect();
    for g in groups {
        let members = tree
            .list(&format!("{G}/{g}/devices"))
            .unwrap_or_default()
            .into_iter()
            .map(|m| m.trim_end_matches(".link").to_string())
            .collect::<Vec<_>>();
        let ours: Vec<&&Device> = members
            .iter()
            .filter_map(|m| interesting.get(m.as_str()))
            .collect();
        if ours.is_empty() {
            continue;
        }
        let tpath = format!("{G}/{g}/type");
        let names = ours
            .iter()
            .map(|d| d.label())
            .collect::<Vec<_>>()
            .join(", ");
        match tree.read(&tpath) {
            Ok(t) => {
                let (sev, what, advice) = match t.as_str() {
                    "identity" => (Severity::Ok, "identity (passthrough): no translation", ""),
                    "DMA-FQ" => (
                        Severity::Warn,
                        "DMA-FQ: translated, lazy (flush-queue) invalidation",
                        "translated DMA costs IOTLB misses and map/unmap work, and peer-to-peer \
                         needs the peer BAR mapped in the IOMMU (NVreg DmaRemapPeerMmio=1) or \
                         P2P faults. For GPU/NIC hosts boot with iommu=pt (identity), or set \
                         this group to identity: echo identity > /sys/kernel/iommu_groups/N/type \
                         with the devices unbound",
                    ),
                    "DMA" => (
                        Severity::Warn,
                        "DMA: translated, strict invalidation on every unmap",
                        "strict translation is the slowest mode for GPUDirect (every unmap \
                         waits for an IOTLB flush); use iommu=pt or identity for this group",
                    ),
                    "blocked" => (
                        Severity::Problem,
                        "blocked: the devices cannot DMA at all",
                        "the group is blocked (owned by VFIO without a domain, or a failed \
                         attach); check dmesg",
                    ),
                    _ => (Severity::Info, "unrecognised domain type", ""),
                };
                f.add(
                    "iommu.group.type",
                    sev,
                    &ours[0].bdf,
                    format!("IOMMU group {g} ({names}) default domain {t}: {what}"),
                    vec![ev(&tpath, &t)],
                    advice,
                );
            }
            Err(e) => f.unreadable("iommu.group.type", &ours[0].bdf, &tpath, &e),
        }
        let kinds: Vec<Kind> = ours.iter().map(|d| d.kind).collect();
        if ours.len() > 1 {
            let gpu_nic = kinds.contains(&Kind::Gpu) && kinds.contains(&Kind::Nic);
            f.add(
                "iommu.group.shared",
                if gpu_nic {
                    Severity::Warn
                } else {
                    Severity::Info
                },
                &ours[0].bdf,
                format!("IOMMU group {g} holds several GPUs/NICs: {names}"),
                vec![format!("{G}/{g}/devices: {}", members.join(" "))],
                "devices share a group when no ACS isolates them below their common bridge: \
                 their peer traffic is not forced through the IOMMU (good for P2P), but they \
                 can only be passed to a VM or VFIO together",
            );
        }
    }
}

/// NVIDIA driver version, registry parameters and the GPUDirect RDMA paths.
pub fn check_nvidia(tree: &Tree, devs: &[Device], iommu: Option<bool>, f: &mut Findings) {
    let has_nv_gpu = devs
        .iter()
        .any(|d| d.kind == Kind::Gpu && d.vendor == 0x10de);
    if !has_nv_gpu {
        return;
    }
    const V: &str = "/proc/driver/nvidia/version";
    let mut open = false;
    match tree.read(V) {
        Ok(s) => {
            let first = s.lines().next().unwrap_or("");
            let ver = parse_driver_version(first).unwrap_or_else(|| "?".into());
            open = first.contains("Open Kernel Module");
            let flavour = if open { "open" } else { "proprietary" };
            f.add(
                "nvidia.driver",
                Severity::Info,
                "host",
                format!("NVIDIA driver {ver} ({flavour} kernel module)"),
                vec![ev(V, first.trim())],
                "",
            );
        }
        Err(e) => f.unreadable("nvidia.driver", "host", V, &e),
    }
    const PARAMS: &str = "/proc/driver/nvidia/params";
    match tree.read(PARAMS) {
        Ok(s) => nvidia_params(&s, iommu, f),
        Err(e) => f.unreadable("nvidia.params", "host", PARAMS, &e),
    }
    const M: &str = "/proc/modules";
    match tree.read(M) {
        Ok(s) => {
            let loaded = |m: &str| s.lines().any(|l| l.split_whitespace().next() == Some(m));
            let (sev, summary, advice) = if loaded("nvidia_peermem") {
                (
                    Severity::Ok,
                    "nvidia_peermem loaded: GPUDirect RDMA via peer memory",
                    "",
                )
            } else if open {
                (
                    Severity::Info,
                    "nvidia_peermem not loaded; the open kernel module supports GPUDirect RDMA \
                     through dma-buf instead",
                    "RDMA stacks that use dma-buf (ibv_reg_dmabuf_mr, NCCL with \
                     NCCL_DMABUF_ENABLE) need no extra module on kernel >= 5.12; for the legacy \
                     peer-memory path: modprobe nvidia_peermem",
                )
            } else {
                (
                    Severity::Warn,
                    "nvidia_peermem not loaded and the proprietary module has no dma-buf export: \
                     no GPUDirect RDMA",
                    "modprobe nvidia_peermem (with MLNX_OFED or an inbox RDMA stack)",
                )
            };
            f.add(
                "nvidia.gpudirect_rdma",
                sev,
                "host",
                summary,
                vec![format!(
                    "{M}: nvidia_peermem {}",
                    if loaded("nvidia_peermem") {
                        "present"
                    } else {
                        "absent"
                    }
                )],
                advice,
            );
        }
        Err(e) => f.unreadable("nvidia.modules", "host", M, &e),
    }
}

/// `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release ...`.
pub fn parse_driver_version(line: &str) -> Option<String> {
    line.split_whitespace()
        .find(|t| {
            t.contains('.')
                && t.split('.').count() >= 2
                && t.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(String::from)
}

fn nvidia_params(text: &str, iommu: Option<bool>, f: &mut Findings) {
    const P: &str = "/proc/driver/nvidia/params";
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.split_once(':').filter(|(a, _)| a.trim() == k))
            .map(|(_, v)| v.trim().to_string())
    };
    let mut add = |key: &str, sev: Severity, summary: String, advice: &str| {
        if let Some(v) = get(key) {
            f.add(
                &format!("nvidia.param.{key}"),
                sev,
                "host",
                summary.replace("{v}", &v),
                vec![ev(P, format!("{key}: {v}"))],
                advice,
            );
        }
    };
    let on = |k: &str| get(k).as_deref() == Some("1");
    add(
        "EnableStreamMemOPs",
        Severity::Info,
        "EnableStreamMemOPs={v} (CUDA stream memory operations, cuStreamWaitValue/WriteValue)"
            .into(),
        "needed only by GPUDirect Async / stream memops users. The field guide's claim that \
         NVreg_EnableStreamMemOPs=1 (with EnablePCIeGen3=1) fixes CUDA_ERROR_NOT_PERMITTED \
         for GPUDirect RDMA under an IOMMU is wrong: that error comes from the IOMMU \
         translating peer/RDMA accesses; fix with iommu=pt (identity) or dma-buf registration",
    );
    add(
        "EnablePCIeGen3",
        Severity::Info,
        "EnablePCIeGen3={v}: only affects old (Kepler-era) GPUs on some chipsets".into(),
        "it does not raise the link speed of current GPUs; the negotiated speed is in the \
         pcie.link findings",
    );
    add(
        "EnablePCIERelaxedOrderingMode",
        Severity::Info,
        "EnablePCIERelaxedOrderingMode={v} (0: driver leaves the Relaxed Ordering bit as \
         firmware set it)"
            .into(),
        "Relaxed Ordering helps GPUDirect RDMA write bandwidth on platforms that handle it; \
         the field guide's 'disable Relaxed Ordering to fix ~30% of DMA errors' is folklore: \
         disable it only for a platform with a documented RO erratum. The per-device RO bit is \
         in the pcie.devctl findings",
    );
    add(
        "EnableResizableBar",
        Severity::Info,
        "EnableResizableBar={v} (1: driver may resize BAR1 through the Resizable BAR capability)"
            .into(),
        "",
    );
    let peer_sev = if iommu == Some(true) && !on("DmaRemapPeerMmio") {
        Severity::Problem
    } else {
        Severity::Info
    };
    add(
        "DmaRemapPeerMmio",
        peer_sev,
        "DmaRemapPeerMmio={v} (1: peer GPU BARs are mapped through the IOMMU for P2P)".into(),
        "with a translating IOMMU, P2P needs DmaRemapPeerMmio=1 or peer accesses fault \
         (IO_PAGE_FAULT, silently wrong data); without an IOMMU it has no effect",
    );
}
