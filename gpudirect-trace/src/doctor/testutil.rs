//! Test support: synthetic config spaces and captured trees in a tempdir,
//! and the real 2x H200 host's snapshot that the fixture and NVML tests
//! both diagnose.

use std::{fs, path::Path};

use super::{findings::Finding, pci::CAP_PCIE, report::Report, tree::Tree};

/// The 2x H200 host's captured /sys and /proc.
pub const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/gpu-host-h200x2-snapshot"
);
/// The fixture's two GPUs.
pub const GPU0: &str = "0000:00:06.0";
pub const GPU1: &str = "0000:00:07.0";

/// The fixture as a tree, or a failure that says where it should be.
pub fn fixture() -> Tree {
    assert!(
        Path::new(FIXTURE).join("sys/bus/pci/devices").is_dir(),
        "fixture missing: {FIXTURE} (tests/fixtures/gpu-host-h200x2-snapshot is part of the repository)"
    );
    Tree::captured(Path::new(FIXTURE)).expect("fixture tree")
}

/// The finding `id` of device `dev`, or a failure listing them all.
pub fn find<'a>(r: &'a Report, id: &str, dev: &str) -> &'a Finding {
    r.findings
        .iter()
        .find(|f| f.id == id && f.device == dev)
        .unwrap_or_else(|| panic!("no finding {id} for {dev}: {:#?}", r.findings))
}

/// Fails, showing the whole text, unless `text` holds `part`: a finding's
/// summary or evidence line checked for the words that matter.
pub fn assert_has(text: &str, part: &str) {
    assert!(text.contains(part), "{part:?} not in {text:?}");
}

/// A 4 KiB config space with a PCIe capability at 0x60 (endpoint) and the
/// given extended capabilities (id, body) chained from 0x100, 0x40 apart.
pub fn config_with(devctl: u16, lnkcap: u32, lnksta: u16, ext: &[(u16, &[u8])]) -> Vec<u8> {
    let mut c = vec![0u8; 4096];
    c[0x06] = 0x10;
    c[0x34] = 0x60;
    c[0x60] = CAP_PCIE;
    c[0x62] = 0x02;
    c[0x68..0x6a].copy_from_slice(&devctl.to_le_bytes());
    c[0x6c..0x70].copy_from_slice(&lnkcap.to_le_bytes());
    c[0x72..0x74].copy_from_slice(&lnksta.to_le_bytes());
    let mut off = 0x100usize;
    for (i, (id, body)) in ext.iter().enumerate() {
        let next = if i + 1 < ext.len() { off + 0x40 } else { 0 };
        let hdr = u32::from(*id) | (1 << 16) | ((next as u32) << 20);
        c[off..off + 4].copy_from_slice(&hdr.to_le_bytes());
        c[off + 4..off + 4 + body.len()].copy_from_slice(body);
        off += 0x40;
    }
    c
}

/// Gen5 x16 capable and running, MPS 256, MRRS 512.
pub fn gen5_x16() -> Vec<u8> {
    config_with(0x2030, 0x0000_0105, 0x0105, &[])
}

/// A small captured host tree built by a test.
pub struct Synth {
    pub dir: tempfile::TempDir,
}

impl Synth {
    /// A one-node, 8-CPU host without IOMMU or PCI devices.
    pub fn new(cmdline: &str) -> Self {
        let s = Self {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        s.file("/proc/cmdline", cmdline);
        s.file("/proc/modules", "nvidia 14299136 - - Live 0x0 (O)\n");
        s.file("/sys/devices/system/node/node0/cpulist", "0-7");
        fs::create_dir_all(s.dir.path().join("sys/bus/pci/devices")).expect("mkdir");
        s
    }

    pub fn file(&self, abs: &str, content: impl AsRef<[u8]>) {
        let p = self.dir.path().join(abs.trim_start_matches('/'));
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(p, content).expect("write");
    }

    /// A PCI function at `sys_path` (e.g. `pci0000:00/0000:00:01.0/0000:01:00.0`).
    pub fn device(&self, sys_path: &str, class: u32, vendor: u16, config: &[u8]) {
        let bdf = sys_path.rsplit('/').next().expect("bdf");
        let d = format!("/sys/bus/pci/devices/{bdf}");
        self.file(
            &format!("{d}.link"),
            format!("../../../devices/{sys_path}\n"),
        );
        self.file(&format!("{d}/class"), format!("0x{class:06x}\n"));
        self.file(&format!("{d}/vendor"), format!("0x{vendor:04x}\n"));
        self.file(&format!("{d}/device"), "0x2335\n");
        self.file(&format!("{d}/numa_node"), "0\n");
        self.file(&format!("{d}/local_cpulist"), "0-7\n");
        self.file(&format!("{d}/config"), config);
    }

    pub fn link(&self, bdf: &str, cur: (&str, u32), max: (&str, u32)) {
        let d = format!("/sys/bus/pci/devices/{bdf}");
        self.file(&format!("{d}/current_link_speed"), format!("{}\n", cur.0));
        self.file(&format!("{d}/current_link_width"), format!("{}\n", cur.1));
        self.file(&format!("{d}/max_link_speed"), format!("{}\n", max.0));
        self.file(&format!("{d}/max_link_width"), format!("{}\n", max.1));
    }

    pub fn tree(&self) -> Tree {
        Tree::captured(self.dir.path()).expect("tree")
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}
