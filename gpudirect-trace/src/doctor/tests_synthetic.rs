//! Small synthetic host trees for the conditions the H200 fixture cannot show.
//! Each test's name says which real condition it stands for.

use std::os::unix::fs::symlink;

use super::{
    diagnose,
    findings::{Finding, Severity},
    pci::{EXT_ACS, EXT_AER},
    report::Report,
    testutil::{assert_has, config_with, gen5_x16, Synth},
    DoctorOptions,
};

const GPU_CLASS: u32 = 0x030200;
const IB_CLASS: u32 = 0x020700;
const BRIDGE_CLASS: u32 = 0x060400;

fn findings<'a>(r: &'a Report, id: &str) -> Vec<&'a Finding> {
    r.findings.iter().filter(|f| f.id == id).collect()
}

fn one<'a>(r: &'a Report, id: &str) -> &'a Finding {
    let v = findings(r, id);
    assert_eq!(v.len(), 1, "expected one {id}: {:#?}", r.findings);
    v[0]
}

/// A switch port config with an ACS capability whose control register is `ctl`.
fn bridge_with_acs(ctl: u16) -> Vec<u8> {
    let mut body = 0x007fu16.to_le_bytes().to_vec();
    body.extend_from_slice(&ctl.to_le_bytes());
    let mut c = config_with(0x2030, 0x0000_0105, 0x0105, &[(EXT_ACS, &body)]);
    c[0x62] = 0x62; // PCIe cap version 2, port type 6 (switch downstream port)
    c
}

/// Root port 00:01.0 -> switch upstream 01:00.0 -> downstream 02:08.0 / 02:10.0
/// -> GPUs 03:00.0 / 04:00.0, downstream ports' ACS control set to `acs_ctl`.
fn switch_with_two_gpus(acs_ctl: u16) -> Synth {
    let s = Synth::new("quiet");
    let rp = "pci0000:00/0000:00:01.0";
    let usp = format!("{rp}/0000:01:00.0");
    s.device(rp, BRIDGE_CLASS, 0x8086, &bridge_with_acs(0));
    s.device(&usp, BRIDGE_CLASS, 0x1000, &bridge_with_acs(0));
    for (dsp, gpu) in [
        ("0000:02:08.0", "0000:03:00.0"),
        ("0000:02:10.0", "0000:04:00.0"),
    ] {
        s.device(
            &format!("{usp}/{dsp}"),
            BRIDGE_CLASS,
            0x1000,
            &bridge_with_acs(acs_ctl),
        );
        s.device(
            &format!("{usp}/{dsp}/{gpu}"),
            GPU_CLASS,
            0x10de,
            &gen5_x16(),
        );
    }
    s
}

#[test]
fn synthetic_acs_redirect_on_switch_port_between_gpus() {
    // SrcValid + ReqRedir + CmpltRedir + UpstreamFwd: the usual "ACS on" setting.
    let s = switch_with_two_gpus(0x001d);
    let r = diagnose(&s.tree()).expect("diagnose");
    assert_eq!(r.topology.matrix[0][1], "PIX");
    let acs = findings(&r, "acs.p2p_redirect");
    let mut ports: Vec<&str> = acs.iter().map(|f| f.device.as_str()).collect();
    ports.sort_unstable();
    // The shared upstream port has ACS off; both downstream ports redirect.
    assert_eq!(ports, ["0000:02:08.0", "0000:02:10.0"]);
    assert!(acs.iter().all(|f| f.severity == Severity::Problem));
    assert!(
        acs[0].evidence[0].contains("ReqRedir+ CmpltRedir+"),
        "{:?}",
        acs[0].evidence
    );
}

#[test]
fn synthetic_acs_off_on_switch_ports_gives_no_redirect_finding() {
    // Only Source Validation: peers still route through the switch.
    let s = switch_with_two_gpus(0x0001);
    let r = diagnose(&s.tree()).expect("diagnose");
    assert!(
        findings(&r, "acs.p2p_redirect").is_empty(),
        "{:#?}",
        r.findings
    );
    assert!(r.findings.iter().all(|f| f.severity != Severity::Problem));
}

#[test]
fn synthetic_paths_pxb_phb_node_sys() {
    let s = Synth::new("quiet");
    // GPU a behind one switch (rp/usp/dsp); GPU b one switch further down
    // (rp/usp/dsp2/usp2/dsp3): the path crosses several bridges, PXB.
    let rp = "pci0000:00/0000:00:01.0";
    s.device(
        &format!("{rp}/0000:01:00.0/0000:02:00.0/0000:03:00.0"),
        GPU_CLASS,
        0x10de,
        &gen5_x16(),
    );
    s.device(
        &format!("{rp}/0000:01:00.0/0000:02:01.0/0000:04:00.0/0000:05:00.0/0000:06:00.0"),
        GPU_CLASS,
        0x10de,
        &gen5_x16(),
    );
    // Another root port of the same host bridge: PHB.
    s.device(
        "pci0000:00/0000:00:02.0/0000:07:00.0",
        IB_CLASS,
        0x15b3,
        &gen5_x16(),
    );
    // Another host bridge, other NUMA node: SYS.
    s.device(
        "pci0000:80/0000:80:01.0/0000:81:00.0",
        GPU_CLASS,
        0x10de,
        &gen5_x16(),
    );
    s.file("/sys/bus/pci/devices/0000:81:00.0/numa_node", "1\n");
    let r = diagnose(&s.tree()).expect("diagnose");
    let names: Vec<&str> = r.topology.devices.iter().map(|d| d.bdf.as_str()).collect();
    assert_eq!(
        names,
        [
            "0000:03:00.0",
            "0000:06:00.0",
            "0000:81:00.0",
            "0000:07:00.0"
        ]
    );
    assert_eq!(r.topology.matrix[0], ["X", "PXB", "SYS", "PHB"]);
    assert_eq!(r.topology.matrix[1][3], "PHB");
    assert_eq!(r.topology.matrix[2][3], "SYS");
    // GPU on node 1, InfiniBand NIC on node 0: GPUDirect RDMA crosses sockets.
    let x = one(&r, "topology.cross_numa");
    assert_eq!(
        (x.severity, x.device.as_str()),
        (Severity::Warn, "0000:81:00.0")
    );
    assert_has(&x.summary, "NIC0 (0000:07:00.0, NUMA 0)");
    // Same host bridge count would give NODE with equal NUMA nodes.
    s.file("/sys/bus/pci/devices/0000:81:00.0/numa_node", "0\n");
    let r = diagnose(&s.tree()).expect("diagnose");
    assert_eq!(r.topology.matrix[0][2], "NODE");
}

#[test]
fn synthetic_iommu_on_dma_fq_with_gpu_and_nic_in_one_group() {
    let s = Synth::new("intel_iommu=on iommu.strict=0 quiet");
    s.file(
        "/sys/class/iommu/dmar0.link",
        "../../devices/virtual/iommu/dmar0\n",
    );
    s.device(
        "pci0000:00/0000:00:01.0/0000:01:00.0",
        GPU_CLASS,
        0x10de,
        &gen5_x16(),
    );
    s.device(
        "pci0000:00/0000:00:01.0/0000:01:00.1",
        IB_CLASS,
        0x15b3,
        &gen5_x16(),
    );
    s.file("/sys/kernel/iommu_groups/7/type", "DMA-FQ\n");
    // The live layout: a directory of symlinks.
    let devs = s.path().join("sys/kernel/iommu_groups/7/devices");
    std::fs::create_dir_all(&devs).expect("mkdir");
    for bdf in ["0000:01:00.0", "0000:01:00.1"] {
        symlink(
            format!("../../../../devices/pci0000:00/0000:00:01.0/{bdf}"),
            devs.join(bdf),
        )
        .expect("symlink");
    }
    s.file("/proc/driver/nvidia/params", "DmaRemapPeerMmio: 0\n");
    let r = diagnose(&s.tree()).expect("diagnose");
    assert!(one(&r, "iommu.present")
        .summary
        .contains("dmar0 (Intel VT-d)"));
    let t = one(&r, "iommu.group.type");
    assert_eq!(t.severity, Severity::Warn);
    assert!(
        t.summary.contains("group 7") && t.summary.contains("DMA-FQ"),
        "{}",
        t.summary
    );
    assert_eq!(t.evidence, ["/sys/kernel/iommu_groups/7/type = DMA-FQ"]);
    let shared = one(&r, "iommu.group.shared");
    assert_eq!(shared.severity, Severity::Warn);
    assert!(shared.summary.contains("0000:01:00.0") && shared.summary.contains("0000:01:00.1"));
    // IOMMU translating and the driver not mapping peer BARs: P2P faults.
    assert_eq!(
        one(&r, "nvidia.param.DmaRemapPeerMmio").severity,
        Severity::Problem
    );
    assert!(findings(&r, "iommu.absent").is_empty());
}

#[test]
fn synthetic_iommu_passthrough_identity_group_is_ok() {
    let s = Synth::new("amd_iommu=on iommu=pt");
    s.file(
        "/sys/class/iommu/ivhd0.link",
        "../../devices/virtual/iommu/ivhd0\n",
    );
    s.device(
        "pci0000:00/0000:00:03.1/0000:41:00.0",
        GPU_CLASS,
        0x10de,
        &gen5_x16(),
    );
    s.file("/sys/kernel/iommu_groups/3/type", "identity\n");
    s.file("/sys/kernel/iommu_groups/3/devices.list", "0000:41:00.0\n");
    let r = diagnose(&s.tree()).expect("diagnose");
    assert!(one(&r, "iommu.present").summary.contains("AMD-Vi"));
    assert_eq!(one(&r, "iommu.group.type").severity, Severity::Ok);
    assert!(findings(&r, "iommu.cmdline")
        .iter()
        .any(|f| f.summary.contains("iommu=pt")));
}

#[test]
fn synthetic_downtrained_gpu_link_gen5_x16_running_gen3_x8() {
    let s = Synth::new("quiet");
    // LinkCap Gen5 x16 (0x105), LinkSta Gen3 x8 (0x083).
    let cfg = config_with(0x2030, 0x0000_0105, 0x0083, &[]);
    s.device(
        "pci0000:00/0000:00:01.0/0000:01:00.0",
        GPU_CLASS,
        0x10de,
        &cfg,
    );
    s.link("0000:01:00.0", ("8.0 GT/s PCIe", 8), ("32.0 GT/s PCIe", 16));
    let r = diagnose(&s.tree()).expect("diagnose");
    let d = one(&r, "pcie.link.downtrained");
    assert_eq!(d.severity, Severity::Problem);
    assert!(d.summary.contains("8.0 GT/s PCIe x8") && d.summary.contains("32.0 GT/s PCIe x16"));
    assert!(one(&r, "pcie.linksta.downtrained")
        .summary
        .contains("8 GT/s x8"));
    assert!(findings(&r, "pcie.link").is_empty());
}

#[test]
fn synthetic_small_bar1_256mib_below_4g_without_above_4g_decoding() {
    let s = Synth::new("quiet");
    s.device(
        "pci0000:00/0000:00:02.0/0000:02:00.0",
        GPU_CLASS,
        0x10de,
        &gen5_x16(),
    );
    // BAR0 16 MiB (32-bit), BAR1 256 MiB 64-bit prefetchable below 4 GiB, BAR3 32 MiB.
    s.file(
        "/sys/bus/pci/devices/0000:02:00.0/resource",
        "0x00000000de000000 0x00000000deffffff 0x0000000000040200\n\
         0x00000000c0000000 0x00000000cfffffff 0x000000000014220c\n\
         0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
         0x00000000d0000000 0x00000000d1ffffff 0x000000000014220c\n",
    );
    let r = diagnose(&s.tree()).expect("diagnose");
    let b = one(&r, "bar.bar1_small");
    assert_eq!(b.severity, Severity::Warn);
    assert!(b.summary.contains("256 MiB"), "{}", b.summary);
    assert!(b.evidence[0].contains("line 1"), "{:?}", b.evidence);
    assert_eq!(one(&r, "bar.below_4g").severity, Severity::Warn);
}

#[test]
fn synthetic_resizable_bar_left_at_256mib_of_64gib() {
    let s = Synth::new("quiet");
    // ReBAR entry: BAR 1, one resizable BAR, current size code 8 (256 MiB),
    // sizes 1 MiB..64 GiB supported (capability bits 4..20).
    let cap: u32 = ((1 << 17) - 1) << 4;
    let ctl: u32 = 1 | (1 << 5) | (8 << 8);
    let mut body = cap.to_le_bytes().to_vec();
    body.extend_from_slice(&ctl.to_le_bytes());
    let cfg = config_with(
        0x2030,
        0x0000_0105,
        0x0105,
        &[(super::pci::EXT_REBAR, &body)],
    );
    s.device(
        "pci0000:00/0000:00:02.0/0000:02:00.0",
        GPU_CLASS,
        0x10de,
        &cfg,
    );
    let r = diagnose(&s.tree()).expect("diagnose");
    let b = one(&r, "bar.resizable");
    assert_eq!(b.severity, Severity::Warn);
    assert_has(&b.summary, "BAR1 at 256 MiB, largest supported 64 GiB");
}

#[test]
fn synthetic_irq_affinity_pinned_to_cpu0_for_gpu_on_node1() {
    let s = Synth::new("quiet");
    s.device(
        "pci0000:80/0000:80:01.0/0000:81:00.0",
        GPU_CLASS,
        0x10de,
        &gen5_x16(),
    );
    let d = "/sys/bus/pci/devices/0000:81:00.0";
    s.file(&format!("{d}/numa_node"), "1\n");
    s.file(&format!("{d}/local_cpulist"), "8-15\n");
    s.file(&format!("{d}/msi_irqs.list"), "120\n121\n");
    // The field guide's `echo 1 > smp_affinity`: everything on CPU0 (node 0).
    s.file("/proc/irq/120/smp_affinity_list", "0\n");
    s.file("/proc/irq/121/smp_affinity_list", "8-15\n");
    let r = diagnose(&s.tree()).expect("diagnose");
    let f = one(&r, "irq.affinity_off_node");
    assert_eq!(f.severity, Severity::Warn);
    assert!(f.summary.contains("1 of 2"), "{}", f.summary);
    assert_eq!(f.evidence, ["/proc/irq/120/smp_affinity_list = 0"]);
    assert!(one(&r, "numa.node").summary.contains("NUMA node 1"));
}

/// A capture without some vectors' /proc/irq entries (the H200 host's,
/// for its NIC): one unknown finding for the device, naming it, not one
/// per vector.
#[test]
fn synthetic_unreadable_irq_affinity_is_one_finding_per_device() {
    let s = Synth::new("quiet");
    s.device("pci0000:00/0000:00:03.0", GPU_CLASS, 0x10de, &gen5_x16());
    let d = "/sys/bus/pci/devices/0000:00:03.0";
    s.file(&format!("{d}/local_cpulist"), "0-7\n");
    s.file(&format!("{d}/msi_irqs.list"), "34\n35\n36\n");
    s.file("/proc/irq/36/smp_affinity_list", "0-7\n");
    let r = diagnose(&s.tree()).expect("diagnose");
    let f = one(&r, "irq.affinity.unreadable");
    assert_eq!(f.severity, Severity::Unknown);
    assert!(f.summary.contains("0000:00:03.0"), "{}", f.summary);
    assert!(
        f.summary.contains("2 of 3 MSI/MSI-X vectors"),
        "{}",
        f.summary
    );
    assert_eq!(f.evidence.len(), 2);
    // A capture's reader cannot "run as root on the host": it is told
    // what the capture lacks.
    assert!(
        f.advice.starts_with("the capture does not hold it"),
        "{}",
        f.advice
    );
    // No dmesg.txt in this capture: said as such, not "dmesg failed".
    let k = one(&r, "klog.unreadable");
    assert_eq!(k.summary, "unknown: the capture holds no kernel log");
    assert_eq!(k.evidence, ["dmesg.txt: not in the capture"]);
    assert!(k.advice.contains("doctor --capture"), "{}", k.advice);
    assert!(one(&r, "irq.affinity")
        .summary
        .contains("1 MSI/MSI-X vectors"));
}

#[test]
fn synthetic_swiotlb_force_on_kernel_cmdline() {
    let s = Synth::new("root=/dev/sda1 swiotlb=force -- swiotlb=noforce");
    let r = diagnose(&s.tree()).expect("diagnose");
    assert_eq!(one(&r, "swiotlb.forced").severity, Severity::Problem);
    // Arguments after `--` belong to init.
    assert!(findings(&r, "swiotlb.param").is_empty());
}

#[test]
fn synthetic_aer_uncorrectable_error_logged_on_nic() {
    let s = Synth::new("quiet");
    // UESta bit 14 (Completion Timeout), unmasked; CESta bit 0 (Receiver Error).
    let mut body = (1u32 << 14).to_le_bytes().to_vec();
    body.extend_from_slice(&[0; 8]);
    body.extend_from_slice(&1u32.to_le_bytes());
    let cfg = config_with(0x2030, 0x0000_0105, 0x0105, &[(EXT_AER, &body)]);
    s.device(
        "pci0000:00/0000:00:03.0/0000:03:00.0",
        IB_CLASS,
        0x15b3,
        &cfg,
    );
    let r = diagnose(&s.tree()).expect("diagnose");
    let a = one(&r, "pcie.aer");
    assert_eq!(a.severity, Severity::Problem);
    assert!(
        a.evidence[0].contains("UESta 0x00004000") && a.evidence[0].contains("CESta 0x00000001")
    );
}

#[test]
fn synthetic_unreadable_and_truncated_files_are_unknown_not_panics() {
    let s = Synth::new("quiet");
    s.device(
        "pci0000:00/0000:00:01.0/0000:01:00.0",
        GPU_CLASS,
        0x10de,
        &[],
    );
    // config is a directory: reading it fails (EISDIR), like a permission error.
    s.device(
        "pci0000:00/0000:00:02.0/0000:02:00.0",
        GPU_CLASS,
        0x10de,
        &gen5_x16(),
    );
    let cfg = s.path().join("sys/bus/pci/devices/0000:02:00.0/config");
    std::fs::remove_file(&cfg).expect("rm");
    std::fs::create_dir(&cfg).expect("mkdir");
    // 64-byte config (what an unprivileged read returns): no caps at all.
    s.device(
        "pci0000:00/0000:00:03.0/0000:03:00.0",
        GPU_CLASS,
        0x10de,
        &gen5_x16()[..64],
    );
    s.file(
        "/sys/bus/pci/devices/0000:03:00.0/resource",
        "garbage\n0x1 0x2\n",
    );
    std::fs::remove_file(s.path().join("proc/cmdline")).expect("rm");
    let r = diagnose(&s.tree()).expect("diagnose");
    let u = one(&r, "pcie.config.unreadable");
    assert_eq!(
        (u.severity, u.device.as_str()),
        (Severity::Unknown, "0000:02:00.0")
    );
    assert_eq!(
        one(&r, "kernel.cmdline.unreadable").severity,
        Severity::Unknown
    );
}

#[test]
fn missing_root_dir_is_an_error_not_a_report() {
    let args = DoctorOptions {
        root: Some("/nonexistent/doctor-capture".into()),
        json: false,
        verbose: false,
        capture: None,
        baseline: None,
        out: Default::default(),
    };
    let err = super::run(&args).expect_err("must fail").to_string();
    assert!(
        err.starts_with("--root /nonexistent/doctor-capture:"),
        "{err}"
    );
}
