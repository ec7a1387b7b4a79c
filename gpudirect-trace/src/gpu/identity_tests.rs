//! GPU identity against the real 2x H200 snapshot (shared/fixtures/gpu-host-h200x2):
//! expected values read from its /proc/driver/nvidia/gpus/*/information files and
//! nvidia-smi-q.txt (GPU UUID, Minor Number, Bus Id), not from this code.

use std::path::Path;

use super::*;
use crate::doctor::testutil::Synth;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/gpu-host-h200x2-snapshot"
);
const UUID0: &str = "GPU-acbd8c60-66a2-c5f7-967a-de51ca969cb3";
const UUID1: &str = "GPU-1059d476-8b2b-30f0-4f63-3d3ca6c66616";

fn fixture_gpus() -> Vec<GpuIdentity> {
    assert!(
        Path::new(FIXTURE).join("proc/driver/nvidia/gpus").is_dir(),
        "fixture missing: {FIXTURE} (tests/fixtures/gpu-host-h200x2-snapshot is part of the repository)"
    );
    from_tree(&Tree::captured(Path::new(FIXTURE)).expect("fixture"))
}

#[test]
fn fixture_h200_identities_from_driver_proc_files() {
    let g = fixture_gpus();
    assert_eq!(g.len(), 2, "{g:#?}");
    assert_eq!(
        g[0],
        GpuIdentity {
            index: Some(0),
            index_source: IndexSource::PciOrder,
            uuid: Some(UUID0.into()),
            bus_id: "0000:00:06.0".into(),
            name: "NVIDIA H200".into(),
            minor: Some(0),
        }
    );
    assert_eq!(g[1].uuid.as_deref(), Some(UUID1));
    assert_eq!((g[1].index, g[1].minor), (Some(1), Some(1)));
    assert_eq!(g[1].bus_id, "0000:00:07.0");
}

#[test]
fn display_is_index_name_short_uuid_and_bus_id() {
    let g = fixture_gpus();
    assert_eq!(
        g[0].to_string(),
        "GPU0 NVIDIA H200 (GPU-acbd8c60..., 0000:00:06.0)"
    );
    assert_eq!(
        format!("{:#}", g[1]),
        format!("GPU1 NVIDIA H200 ({UUID1}, 0000:00:07.0)")
    );
    let bare = GpuIdentity {
        uuid: None,
        index: None,
        ..g[0].clone()
    };
    assert_eq!(bare.to_string(), "GPU? NVIDIA H200 (0000:00:06.0)");
}

#[test]
fn resolve_device_by_index_uuid_and_any_bus_id_shape() {
    let g = fixture_gpus();
    for spec in [
        "0",
        "GPU0",
        "gpu0",
        UUID0,
        "GPU-acbd",
        "acbd8c60",
        "00:06.0",
        "0000:00:06.0",
        "00000000:00:06.0",
        "PCI:0000:00:06",
    ] {
        assert_eq!(
            resolve_device(spec, &g, "on this host").expect(spec),
            "0000:00:06.0",
            "{spec}"
        );
    }
    assert_eq!(
        resolve_device("GPU1", &g, "on this host").expect("1"),
        "0000:00:07.0"
    );
    assert_eq!(
        resolve_device("1059d476", &g, "on this host").expect("all-digit-leading UUID prefix"),
        "0000:00:07.0"
    );
    // A bus id that is not a GPU is still a valid --device (NIC, NVMe).
    assert_eq!(
        resolve_device("00:03.0", &g, "on this host").expect("nic"),
        "0000:00:03.0"
    );
}

#[test]
fn resolve_device_errors_list_the_gpus() {
    let g = fixture_gpus();
    for (spec, why) in [
        ("7", "no GPU has that index"),
        ("GPU-ffff", "no GPU's UUID starts with that"),
        ("nvme-thing", "not a GPU index"),
    ] {
        let e = resolve_device(spec, &g, "on this host")
            .expect_err(spec)
            .to_string();
        assert!(e.contains(why), "{e}");
        assert!(e.contains(UUID0) && e.contains("0000:00:07.0"), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
    }
    let mut twins = g.clone();
    twins[1].uuid = Some("GPU-acbd0000-0000-0000-0000-000000000000".into());
    let e = resolve_device("GPU-acbd", &twins, "on this host").expect_err("ambiguous");
    assert!(e.to_string().contains("2 GPUs"), "{e}");
    let e = resolve_device("0", &[], "on this host").expect_err("none");
    assert!(e.to_string().contains("no NVIDIA GPUs on this host"), "{e}");
    // A report's GPUs are the recording's, names and all (a crafted file's).
    let e = resolve_device("0", &[], "in the recording").expect_err("none");
    assert!(
        e.to_string().contains("no NVIDIA GPUs in the recording"),
        "{e}"
    );
    let mut forged = g.clone();
    forged[0].name = "H200\nFORGED line\u{1b}[2J".into();
    let e = resolve_device("GPU7", &forged, "in the recording").expect_err("absent");
    let e = e.to_string();
    assert!(
        e.contains("GPUs in the recording: ") && !e.contains('\n'),
        "{e}"
    );
    assert!(!e.chars().any(|c| c == '\u{1b}'), "{e}");
}

#[test]
fn uninitialised_uuid_and_excluded_gpu_from_driver_file() {
    // The driver prints question marks before a GPU is first initialised.
    let i = parse_information(
        "Model: \t\t NVIDIA H200\nGPU UUID: \t GPU-????????-????-????-????-????????????\n\
         Bus Location: \t 0000:00:08.0\nDevice Minor: \t 2\nGPU Excluded:\t Yes\n",
    );
    assert_eq!(i.uuid, None);
    assert!(i.excluded);
    assert_eq!(i.bus_location.as_deref(), Some("0000:00:08.0"));
}

#[test]
fn sysfs_only_gpu_has_no_index_and_excluded_gpus_do_not_shift_indices() {
    let s = Synth::new("");
    let info = |bdf: &str, minor: u32, excluded: &str| {
        s.file(
            &format!("/proc/driver/nvidia/gpus/{bdf}/information"),
            format!(
                "Model: \t\t NVIDIA A100\nGPU UUID: \t GPU-{minor:08x}-0000-0000-0000-000000000000\n\
                 Bus Location: \t {bdf}\nDevice Minor: \t {minor}\nGPU Excluded:\t {excluded}\n"
            ),
        );
    };
    info("0000:41:00.0", 1, "No");
    info("0000:01:00.0", 0, "Yes");
    info("0000:81:00.0", 2, "No");
    // An NVIDIA GPU the driver does not list (driver not bound to it).
    for (f, v) in [
        ("vendor", "0x10de"),
        ("class", "0x030200"),
        ("device", "0x20b0"),
    ] {
        s.file(&format!("/sys/bus/pci/devices/0000:c1:00.0/{f}"), v);
    }
    let g = from_tree(&Tree::captured(s.dir.path()).expect("tree"));
    let got: Vec<(&str, Option<u32>)> = g.iter().map(|g| (g.bus_id.as_str(), g.index)).collect();
    assert_eq!(
        got,
        [
            ("0000:01:00.0", None),
            ("0000:41:00.0", Some(0)),
            ("0000:81:00.0", Some(1)),
            ("0000:c1:00.0", None),
        ]
    );
    assert_eq!(g[3].name, "NVIDIA GPU [10de:20b0]");
}

#[test]
fn merge_prefers_nvml_index_and_keeps_proc_uuid() {
    let proc = fixture_gpus();
    let nvml = vec![GpuIdentity {
        index: Some(1),
        index_source: IndexSource::Nvml,
        uuid: None,
        bus_id: "0000:00:06.0".into(),
        name: "NVIDIA H200".into(),
        minor: None,
    }];
    let m = merge(proc, &nvml);
    assert_eq!(m[0].index, Some(1));
    assert_eq!(m[0].index_source, IndexSource::Nvml);
    assert_eq!(m[0].uuid.as_deref(), Some(UUID0));
    assert_eq!(m[0].minor, Some(0));
    assert_eq!(m[1].index_source, IndexSource::PciOrder);
}

/// `--device nvme0` on a live host: the tables name the PCI function whose
/// DMA a class device does, so the name becomes that function's bus id (the
/// last one on its sysfs path, behind a switch too); a name with no PCI
/// function above it stays a name; a name the host lacks is unknown.
#[test]
fn host_device_names_become_the_pci_function_they_sit_on() {
    let s = Synth::new("");
    let dev = "../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0";
    s.file("/sys/class/nvme/nvme0.link", format!("{dev}/nvme/nvme0"));
    s.file(
        "/sys/class/block/nvme0n1.link",
        format!("{dev}/nvme/nvme0/nvme0n1"),
    );
    s.file(
        "/sys/class/net/eth0.link",
        "../../devices/pci0000:00/0000:00:03.0/virtio1/net/eth0",
    );
    s.file(
        "/sys/class/block/loop0.link",
        "../../devices/virtual/block/loop0",
    );
    s.file(
        "/sys/bus/platform/devices/ff000000.dma.link",
        "../../../devices/platform/ff000000.dma",
    );
    let t = Tree::captured(s.dir.path()).expect("tree");
    let pci = |b: &str| HostName::PciFunction(b.to_owned());
    assert_eq!(host_device_name(&t, "nvme0"), pci("0000:02:00.0"));
    assert_eq!(host_device_name(&t, "nvme0n1"), pci("0000:02:00.0"));
    assert_eq!(host_device_name(&t, "eth0"), pci("0000:00:03.0"));
    assert_eq!(host_device_name(&t, "loop0"), HostName::Device);
    assert_eq!(host_device_name(&t, "ff000000.dma"), HostName::Device);
    for unknown in ["nvme9", "", "..", "nvme/nvme0"] {
        assert_eq!(
            host_device_name(&t, unknown),
            HostName::Unknown,
            "{unknown}"
        );
    }
}
