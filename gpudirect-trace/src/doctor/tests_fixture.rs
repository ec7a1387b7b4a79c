//! Tests against the real 2x H200 host snapshot (shared/fixtures/gpu-host-h200x2):
//! a VM guest with no IOMMU, both GPUs directly on the root bus, NVLink between
//! them. Every expected value below was read from the fixture's raw files
//! (xxd of `config`, the `resource` lines, /proc files), not from this code's
//! output.

use super::{
    capture,
    devices::{read_device, Kind},
    diagnose,
    findings::Severity,
    pci::Config,
    report::Report,
    testutil::{assert_has, find, fixture, GPU0, GPU1},
    tree::Tree,
};

fn report() -> Report {
    diagnose(&fixture()).expect("diagnose")
}

#[test]
fn fixture_classifies_two_h200_gpus_and_virtio_nic() {
    let t = fixture();
    for bdf in [GPU0, GPU1] {
        let d = read_device(&t, bdf);
        assert_eq!(
            (d.class, d.vendor, d.device, d.kind),
            (0x030200, 0x10de, 0x2335, Kind::Gpu)
        );
        assert_eq!(d.host_bridge.as_deref(), Some("pci0000:00"));
        assert!(
            d.upstream.is_empty(),
            "GPU sits on the root bus: {:?}",
            d.upstream
        );
        assert_eq!(d.numa_node, Some(-1));
        assert_eq!(d.local_cpus.as_deref(), Some("0-31"));
        assert_eq!(d.driver.as_deref(), Some("nvidia"));
    }
    let nic = read_device(&t, "0000:00:03.0");
    assert_eq!(
        (nic.class, nic.vendor, nic.kind),
        (0x020000, 0x1af4, Kind::Nic)
    );
    assert_eq!(
        read_device(&t, GPU0).msi_irqs,
        Some(vec![42, 44, 45, 47, 49, 51, 53, 55])
    );
}

#[test]
fn fixture_gpu_config_space_decodes_to_gen5_x16_mps256_mrrs4096() {
    let d = read_device(&fixture(), GPU0);
    let bytes = d.config.expect("config");
    assert_eq!(bytes.len(), 4096);
    let c = Config::new(&bytes);
    // Capability list 0x40 (PM) -> 0x48 (MSI) -> 0x60 (PCIe) -> 0xb0 (MSI-X).
    assert_eq!(c.find_cap(0x10), Some(0x60));
    assert_eq!(c.find_cap(0x11), Some(0xb0));
    let p = c.pcie().expect("pcie");
    assert_eq!(p.port_type, 0);
    // DevCtl at 0x68 = 34 51 -> 0x5134; DevCap at 0x64 = 0x112c8021.
    assert_eq!(p.devctl, 0x5134);
    assert_eq!((p.mps, p.mps_supported, p.mrrs), (256, 256, 4096));
    assert!(p.relaxed_ordering && !p.no_snoop);
    // LinkCap 0x00457905, LinkSta 0x1105: 32 GT/s x16 both.
    assert_eq!(
        (
            p.link_cap_speed,
            p.link_cap_width,
            p.link_speed,
            p.link_width
        ),
        (5, 16, 5, 16)
    );
    // Extended list: 0x100 (id 0) -> 0x12c LTR -> 0x134 (id 0) -> 0x1b8 AER
    // -> ... -> 0x2f0 DSN. The hypervisor hides ATS/ACS/ARI/ReBAR.
    assert_eq!(c.find_ext_cap(0x0018), Some(0x12c));
    let aer = c.aer().expect("aer");
    assert_eq!(
        (aer.offset, aer.uncorrectable, aer.correctable),
        (0x1b8, 0, 0)
    );
    assert_eq!(aer.uncorrectable_mask, 0x0018_0000);
    assert_eq!(c.find_ext_cap(0x0003), Some(0x2f0));
    assert!(c.ats_enabled().is_none() && c.acs().is_none() && c.rebar().is_empty());
    assert!(c.find_ext_cap(0x000e).is_none());
}

#[test]
fn fixture_pcie_findings() {
    let r = report();
    for bdf in [GPU0, GPU1] {
        let link = find(&r, "pcie.link", bdf);
        assert_eq!(link.severity, Severity::Ok);
        assert_has(&link.summary, "32.0 GT/s PCIe x16");
        let dc = find(&r, "pcie.devctl", bdf);
        assert!(dc.summary.contains("MaxPayload 256 B"), "{}", dc.summary);
        assert!(dc.summary.contains("MaxReadReq 4096 B"), "{}", dc.summary);
        assert!(dc.summary.contains("Relaxed Ordering on"), "{}", dc.summary);
        assert!(
            dc.advice.contains("latency_timer"),
            "guide correction missing"
        );
        assert_eq!(find(&r, "pcie.aer", bdf).severity, Severity::Ok);
        assert!(find(&r, "pcie.extcaps", bdf)
            .summary
            .contains("no ATS capability, no ARI"));
        assert!(r.findings.iter().all(|f| f.id != "pcie.link.downtrained"));
    }
}

#[test]
fn fixture_bars_256gib_bar1_above_4g() {
    let r = report();
    let b1 = find(&r, "bar.bar1", GPU0);
    assert_eq!(b1.severity, Severity::Ok);
    assert!(b1.summary.contains("256 GiB"), "{}", b1.summary);
    assert!(b1.evidence[0].contains("line 2: 0x0000100000000000 0x0000103fffffffff"));
    let b1 = find(&r, "bar.bar1", GPU1);
    assert!(b1.evidence[0].contains("0x0000108000000000 0x000010bfffffffff"));
    let layout = &find(&r, "bar.layout", GPU0).summary;
    assert!(layout.contains("BAR0 16 MiB at 0x104002000000"), "{layout}");
    assert!(layout.contains("BAR4 32 MiB at 0x104000000000"), "{layout}");
    assert!(r
        .findings
        .iter()
        .all(|f| f.id != "bar.below_4g" && f.id != "bar.bar1_small"));
}

#[test]
fn fixture_host_no_iommu_swiotlb_noforce_driver_580() {
    let r = report();
    assert_eq!(find(&r, "iommu.absent", "host").severity, Severity::Info);
    assert!(r.findings.iter().all(|f| !f.id.starts_with("iommu.group")));
    assert_eq!(find(&r, "swiotlb.param", "host").severity, Severity::Ok);
    assert!(r.findings.iter().all(|f| f.id != "swiotlb.forced"));
    let drv = find(&r, "nvidia.driver", "host");
    assert!(
        drv.summary.contains("580.159.04") && drv.summary.contains("open"),
        "{}",
        drv.summary
    );
    assert!(find(&r, "nvidia.param.DmaRemapPeerMmio", "host")
        .summary
        .contains("=1"));
    assert!(find(&r, "nvidia.param.EnableResizableBar", "host")
        .summary
        .contains("=0"));
    assert!(find(&r, "nvidia.param.EnableStreamMemOPs", "host")
        .advice
        .contains("CUDA_ERROR_NOT_PERMITTED"));
    // /proc/modules has nvidia and nvidia_uvm only.
    assert!(find(&r, "nvidia.gpudirect_rdma", "host")
        .summary
        .contains("not loaded"));
    assert!(r.findings.iter().all(|f| f.severity != Severity::Problem));
    // dmesg.txt: "iommu: Default domain type: Translated", no faults, no Xids.
    let d = find(&r, "klog.iommu_default_domain", "host");
    assert_has(&d.summary, "Translated (no IOMMU present");
    assert!(r
        .findings
        .iter()
        .all(|f| !f.id.starts_with("klog.xid") && f.id != "klog.iommu_fault"));
}

#[test]
fn fixture_numa_and_irq_affinity() {
    let r = report();
    let n = find(&r, "numa.node", GPU0);
    assert!(
        n.summary.contains("unknown (-1") && n.summary.contains("0-31"),
        "{}",
        n.summary
    );
    let irq = find(&r, "irq.affinity", GPU1);
    assert_eq!(irq.severity, Severity::Ok);
    // msi_irqs.list of 07.0: 43 46 48 50 52 54 56 57, each smp_affinity_list 0-31.
    assert_eq!(irq.evidence.len(), 8);
    assert!(irq.evidence[0].starts_with("/proc/irq/43/smp_affinity_list = 0-31"));
}

#[test]
fn fixture_topology_nvlink_and_phb() {
    let r = report();
    let t = &r.topology;
    let names: Vec<(&str, &str)> = t
        .devices
        .iter()
        .map(|d| (d.name.as_str(), d.bdf.as_str()))
        .collect();
    assert_eq!(
        names,
        [("GPU0", GPU0), ("GPU1", GPU1), ("NIC0", "0000:00:03.0")]
    );
    assert_eq!(t.matrix[0], ["X", "NV18", "PHB"]);
    assert_eq!(t.matrix[1], ["NV18", "X", "PHB"]);
    assert_eq!(t.matrix[2], ["PHB", "PHB", "X"]);
    assert_eq!(t.nvlink_source.as_deref(), Some("nvidia-smi-topo-m.txt"));
}

#[test]
fn fixture_json_shape() {
    let v: serde_json::Value =
        serde_json::from_str(&report().to_json().expect("json")).expect("parse");
    let f = &v["findings"][0];
    for k in ["id", "severity", "device", "summary", "evidence", "advice"] {
        assert!(!f[k].is_null(), "finding lacks {k}: {f}");
    }
    assert_eq!(v["topology"]["matrix"][0][1], "NV18");
    let text = report().to_text(false);
    assert!(text.contains("OK (") && text.contains("Topology"));
}

#[test]
fn capture_of_fixture_round_trips_with_mode_0600() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("snap.tar.gz");
    let n = capture::write(&fixture(), &out, Default::default()).expect("capture");
    assert!(n > 100, "only {n} files");
    let mode = std::fs::metadata(&out).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let unpacked = tmp.path().join("root");
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(&out).expect("open"));
    let mut ar = tar::Archive::new(gz);
    for e in ar.entries().expect("entries") {
        let e = e.expect("entry");
        assert_eq!(e.header().mode().expect("mode"), 0o600);
    }
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(&out).expect("open"));
    tar::Archive::new(gz).unpack(&unpacked).expect("unpack");
    let again = diagnose(&Tree::captured(&unpacked).expect("tree")).expect("diagnose");
    let key = |r: &Report| {
        let mut v: Vec<(String, Severity, String, String)> = r
            .findings
            .iter()
            .map(|f| {
                (
                    f.id.clone(),
                    f.severity,
                    f.device.clone(),
                    f.summary.clone(),
                )
            })
            .collect();
        v.sort_by(|a, b| (&a.0, &a.2, &a.3).cmp(&(&b.0, &b.2, &b.3)));
        v
    };
    assert_eq!(key(&again), key(&report()));
    assert_eq!(again.topology.matrix, report().topology.matrix);
    // `--root snap.tar.gz`: the archive itself, unpacked privately for as
    // long as it is read, reports the same and is named as given.
    let dir = super::unpack::capture_archive(&out).expect("unpack");
    let tree = Tree::captured(dir.path()).expect("tree").shown_as(&out);
    let direct = diagnose(&tree).expect("diagnose");
    assert_eq!(key(&direct), key(&report()));
    assert_eq!(direct.root, out.display().to_string());
    let made = dir.path().to_path_buf();
    drop(dir);
    assert!(!made.exists(), "the unpacked copy is removed");
}
