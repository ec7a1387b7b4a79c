//! `doctor --capture OUT.tar.gz`: snapshot of everything the doctor reads, in
//! the layout `--root` understands (see [`super::tree`]), to attach to a bug
//! report. Files are stored with mode 0600 and the archive itself is 0600.

use std::{io::Write, path::Path, process::Command};

use anyhow::Context as _;

use super::{devices::list_bdfs, tree::Tree};

const PCI_FILES: &[&str] = &[
    "class",
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "revision",
    "numa_node",
    "local_cpulist",
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
    "resource",
    "config",
    "irq",
    "enable",
    "ari_enabled",
    "power_state",
    "dma_mask_bits",
    "consistent_dma_mask_bits",
    "msi_bus",
    "reset_method",
];
const PCI_LINKS: &[&str] = &["driver", "iommu_group", "firmware_node"];
const PROC_FILES: &[&str] = &[
    "/proc/cmdline",
    "/proc/modules",
    "/proc/interrupts",
    "/proc/sys/kernel/osrelease",
    "/proc/driver/nvidia/version",
    "/proc/driver/nvidia/params",
];

/// Run a helper tool: its stdout when it ran and succeeded, else why not
/// (its own first line of complaint: dmesg as a user where
/// kernel.dmesg_restrict is 1 says "read kernel buffer failed: Operation
/// not permitted").
pub fn run_tool(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("could not run {cmd}: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().next().unwrap_or("").trim();
    Err(format!(
        "{cmd} failed ({}): {}",
        out.status,
        crate::sanitize::cut(first, 200)
    ))
}

/// Archive entries (relative path, contents) for the given tree.
pub fn collect(tree: &Tree) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut errors = String::new();
    let mut add_file = |files: &mut Vec<(String, Vec<u8>)>, abs: &str| match tree.read_bytes(abs) {
        Ok(b) => files.push((abs.trim_start_matches('/').to_string(), b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => errors.push_str(&format!("{abs}: {e}\n")),
    };
    let add_link = |files: &mut Vec<(String, Vec<u8>)>, abs: &str| {
        if let Some(t) = tree.link(abs) {
            files.push((
                format!("{}.link", abs.trim_start_matches('/')),
                format!("{t}\n").into_bytes(),
            ));
        }
    };
    let add_list = |files: &mut Vec<(String, Vec<u8>)>, abs: &str| {
        if let Ok(v) = tree.list(abs) {
            let names: Vec<String> = v
                .iter()
                .map(|n| n.trim_end_matches(".link").to_string())
                .collect();
            files.push((
                format!("{}.list", abs.trim_start_matches('/')),
                format!("{}\n", names.join("\n")).into_bytes(),
            ));
        }
    };

    let bdfs = list_bdfs(tree).context("listing /sys/bus/pci/devices")?;
    let mut paths = String::new();
    let mut irqs: Vec<u32> = Vec::new();
    for bdf in &bdfs {
        let dir = format!("/sys/bus/pci/devices/{bdf}");
        add_link(&mut files, &dir);
        if let Some(p) = tree.pci_device_path(bdf) {
            paths.push_str(&format!("{bdf} {p}\n"));
        }
        for f in PCI_FILES {
            add_file(&mut files, &format!("{dir}/{f}"));
        }
        for l in PCI_LINKS {
            add_link(&mut files, &format!("{dir}/{l}"));
        }
        add_list(&mut files, &format!("{dir}/msi_irqs"));
        if let Ok(v) = tree.list(&format!("{dir}/msi_irqs")) {
            irqs.extend(v.iter().filter_map(|s| s.parse::<u32>().ok()));
        }
    }
    files.push(("pci-device-paths.txt".into(), paths.into_bytes()));
    irqs.sort_unstable();
    irqs.dedup();
    for irq in irqs {
        add_file(&mut files, &format!("/proc/irq/{irq}/smp_affinity_list"));
        add_file(&mut files, &format!("/proc/irq/{irq}/node"));
    }
    for p in PROC_FILES {
        add_file(&mut files, p);
    }
    for g in tree.list("/proc/driver/nvidia/gpus").unwrap_or_default() {
        add_file(
            &mut files,
            &format!("/proc/driver/nvidia/gpus/{g}/information"),
        );
    }
    for u in tree.list("/sys/class/iommu").unwrap_or_default() {
        let u = u.trim_end_matches(".link");
        add_link(&mut files, &format!("/sys/class/iommu/{u}"));
    }
    for g in tree.list("/sys/kernel/iommu_groups").unwrap_or_default() {
        let d = format!("/sys/kernel/iommu_groups/{g}");
        add_file(&mut files, &format!("{d}/type"));
        add_file(&mut files, &format!("{d}/reserved_regions"));
        add_list(&mut files, &format!("{d}/devices"));
    }
    for n in tree.list("/sys/devices/system/node").unwrap_or_default() {
        if n.strip_prefix("node")
            .is_some_and(|i| i.parse::<u32>().is_ok())
        {
            add_file(&mut files, &format!("/sys/devices/system/node/{n}/cpulist"));
            add_file(
                &mut files,
                &format!("/sys/devices/system/node/{n}/distance"),
            );
        }
    }
    // Tool output beside the trees: live from the tools, else copied.
    let extras: [(&str, &str, &[&str]); 4] = [
        ("nvidia-smi-topo-m.txt", "nvidia-smi", &["topo", "-m"]),
        ("nvidia-smi-q.txt", "nvidia-smi", &["-q"]),
        ("dmesg.txt", "dmesg", &[]),
        ("uname-r.txt", "uname", &["-r"]),
    ];
    for (name, cmd, args) in extras {
        let data = if tree.is_live() {
            run_tool(cmd, args).ok().map(String::into_bytes)
        } else {
            tree.read_capture_bytes(name).ok()
        };
        if let Some(d) = data {
            files.push((name.to_string(), d));
        }
    }
    // NVML's answers (or why there are none), so `--root` on the capture gives
    // the same NVML findings as the live run.
    let nvml = super::gpu_facts::gather(tree).to_json();
    files.push((crate::gpu::facts::NVML_FILE.into(), nvml.into_bytes()));
    // Links out of a captured root, FIFOs, files over the limits: skipped
    // and said (copying them would carry what is outside into the archive).
    let (refused, more) = tree.refused();
    for line in refused {
        if !errors.contains(&line) {
            errors.push_str(&line);
            errors.push('\n');
        }
    }
    if more > 0 {
        errors.push_str(&format!("... and {more} more paths not read\n"));
    }
    if !errors.is_empty() {
        files.push(("capture-errors.txt".into(), errors.into_bytes()));
    }
    Ok(files)
}

/// Refuses an output that would replace a file of the capture being read
/// (`--root R --capture R/dmesg.txt --force`): an existing `out` in `root`
/// or below it, by device and inode (links and `..` as the kernel sees them).
pub fn refuse_inside(root: &Path, out: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    if crate::outfile::is_stdout(out) || std::fs::symlink_metadata(out).is_err() {
        return Ok(());
    }
    let Ok(r) = std::fs::metadata(root) else {
        return Ok(());
    };
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Ok(mut dir) = std::fs::canonicalize(parent) else {
        return Ok(());
    };
    loop {
        if std::fs::metadata(&dir).is_ok_and(|m| (m.dev(), m.ino()) == (r.dev(), r.ino())) {
            anyhow::bail!(
                "{} is a file of the capture being read ({}): refusing to write over it (give \
                 an output outside it)",
                out.display(),
                root.display()
            );
        }
        if !dir.pop() {
            return Ok(());
        }
    }
}

/// Write the snapshot of `tree` to `out` (gzip-compressed tar, mode 0600,
/// created by crate::outfile: an existing file is replaced only with
/// `--force` and only once the archive is complete).
pub fn write(tree: &Tree, out: &Path, opts: crate::outfile::Options) -> anyhow::Result<usize> {
    // The output first: a refused one (a terminal, an existing name) is
    // said before the host is read; a failed read drops it, unwritten.
    let mut file = crate::outfile::create(out, opts)?;
    let files = collect(tree)?;
    let gz = flate2::write::GzEncoder::new(&mut file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    for (path, data) in &files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o600);
        h.set_mtime(mtime);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut h, path, data.as_slice())
            .with_context(|| format!("adding {path}"))?;
    }
    let mut gz = tar.into_inner().context("finishing tar")?;
    gz.flush()?;
    gz.finish().context("finishing gzip")?;
    file.commit()?;
    Ok(files.len())
}
