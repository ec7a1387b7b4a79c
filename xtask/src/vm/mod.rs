//! `cargo xtask vm`: boot a Debian kernel under qemu with the project's binaries in
//! an initramfs and run one command in the guest.

pub mod checks;
pub mod checks_dmaapi;
pub mod checks_iommu;
pub mod checks_iova;
pub mod checks_pcie;
pub mod checks_task;
pub mod cpio;
pub mod debian;
pub mod demo;
pub mod fleet;
pub mod flight_checks;
pub mod headers;
pub mod headers_cc;
pub mod initramfs;
pub mod kernel;
pub mod kmod;
pub mod misuse_checks;
pub mod moddep;
pub mod monitor;
pub mod pool;
pub mod probe_matrix;
pub mod promstack;
pub mod qemu;
pub mod scenario;

use std::{
    path::PathBuf,
    process::{Command, ExitCode},
    time::Duration,
};

use anyhow::{bail, Context, Result};
use clap::Args;
use qemu::{Device, Iommu};

use crate::host;

/// A run's environment is missing (a package Debian no longer carries, such
/// as the headers of an older backports kernel): vm-test counts the scenario
/// as skipped, never as passed or failed.
#[derive(Debug)]
pub struct Missing(pub String);

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Missing {}

/// Whether `e` (or what it wraps) says the environment is missing.
pub fn missing(e: &anyhow::Error) -> Option<&Missing> {
    e.downcast_ref::<Missing>()
        .or_else(|| e.chain().find_map(|c| c.downcast_ref::<Missing>()))
}

/// Options shared by every subcommand that boots a VM.
#[derive(Args, Debug, Clone)]
pub struct BootOpts {
    /// Guest IOMMU.
    #[arg(long, value_enum, default_value = "intel")]
    pub iommu: Iommu,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 1024)]
    pub memory: u32,
    /// Guest CPUs (TCG: more CPUs boot slower on a small host).
    #[arg(long, default_value_t = 1)]
    pub smp: u32,
    /// Show the guest kernel's boot log (default: `quiet`).
    #[arg(long)]
    pub kernel_log: bool,
    /// Do not run `cargo build`; use the binaries already in the target directory.
    #[arg(long)]
    pub no_build: bool,
    /// Leave gpudirect-trace out of the guest (only busybox and gdt-dma-inject).
    #[arg(long)]
    pub no_tracer: bool,
    /// Extra kernel parameters (repeatable; each is split at spaces), after
    /// the harness's own: `--append "iommu.strict=0 swiotlb=force"`. One that
    /// sets a parameter the harness sets (iommu.strict, intel_iommu) replaces it.
    #[arg(long = "append", value_name = "ARGS")]
    pub append: Vec<String>,
    /// Share the host's / read-only with the guest over 9p (mount tag
    /// `hostroot`; common.lib's mount_host_root mounts it at /host), for host tools
    /// such as bpftrace run through a chroot.
    #[arg(long)]
    pub host_root: bool,
}

impl BootOpts {
    /// The appended kernel parameters, one per item.
    pub fn kernel_params(&self) -> Vec<String> {
        self.append
            .iter()
            .flat_map(|a| a.split_whitespace().map(str::to_string))
            .collect()
    }
}

#[derive(Args, Debug)]
pub struct VmArgs {
    /// Kernel series: 5.10 (bullseye), 6.1 (bookworm), 6.12 (trixie), 6.18
    /// (trixie-backports), newest (the newest series in sid) or a series in
    /// sid such as 7.2.
    #[arg(long, default_value = "6.1")]
    pub kernel: String,
    /// PCI devices to add (repeatable). Default: nvme and edu.
    #[arg(long = "device", value_enum)]
    pub devices: Vec<Device>,
    /// Extra kernel modules to load in the guest (dependencies are added).
    #[arg(long = "module")]
    pub modules: Vec<String>,
    /// Test modules from tests/vm/NAME/ to build for the guest kernel and put
    /// in its initramfs as /lib/modules/extra/NAME.ko (not loaded).
    #[arg(long = "kmod")]
    pub kmods: Vec<String>,
    /// Kill the VM after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    #[command(flatten)]
    pub boot: BootOpts,
    /// Command to run in the guest shell (after `--`).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Everything one VM run needs.
pub struct RunSpec {
    pub kernel: String,
    pub devices: Vec<Device>,
    pub modules: Vec<String>,
    /// Test modules (tests/vm/NAME/) built for the kernel, see kmod.rs.
    pub kmods: Vec<String>,
    pub timeout: Duration,
    pub command: Vec<String>,
    pub prefix: String,
    pub label: String,
}

/// Built binaries to put into the guest.
pub fn build_binaries(opts: &BootOpts) -> Result<Vec<PathBuf>> {
    let mut pkgs = vec!["gdt-dma-inject"];
    if !opts.no_tracer {
        pkgs.push("gpudirect-trace");
    }
    if !opts.no_build {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut c = Command::new(cargo);
        c.current_dir(host::repo_root())
            .args(["build", "--release"]);
        for p in &pkgs {
            c.args(["-p", p]);
        }
        eprintln!("xtask: building {} (release)", pkgs.join(", "));
        host::run(&mut c).context(
            "building the guest binaries failed (gpudirect-trace needs the eBPF toolchain; \
             --no-tracer leaves it out)",
        )?;
    }
    let dir = host::target_dir().join("release");
    // gdt-dma-inject's package also builds gdt-aer-inject and gdt-randread
    // (bench --vm's random-read load).
    pkgs.insert(1, "gdt-aer-inject");
    pkgs.insert(2, "gdt-randread");
    pkgs.iter()
        .map(|p| {
            let path = dir.join(p);
            if !path.exists() {
                bail!("{} missing (build it or drop --no-build)", path.display());
            }
            Ok(path)
        })
        .collect()
}

/// What a run of one VM among several (fleet.rs) adds to a [`RunSpec`].
#[derive(Default)]
pub struct Extras {
    /// More `KEY=value` for the guest's environment.
    pub env: Vec<(String, String)>,
    /// See [`qemu::Config::net_forward`].
    pub net_forward: Option<(u16, u16)>,
    /// See [`qemu::Config::console`].
    pub console: Option<qemu::ConsoleHook>,
}

/// Prepares the host side (tools, kernel, disk, initramfs) and boots the VM.
pub fn boot(spec: &RunSpec, opts: &BootOpts, binaries: &[PathBuf]) -> Result<qemu::Outcome> {
    boot_with(spec, opts, binaries, Extras::default())
}

/// [`boot`] with what a fleet's VM adds.
pub fn boot_with(
    spec: &RunSpec,
    opts: &BootOpts,
    binaries: &[PathBuf],
    extras: Extras,
) -> Result<qemu::Outcome> {
    host::ensure_packages(host::VM_PACKAGES)?;
    let k = kernel::fetch(&spec.kernel)?;
    if opts.iommu == Iommu::Virtio {
        let deps = k.moddeps()?;
        if !deps.contains("virtio_iommu") && !deps.is_builtin("virtio_iommu") {
            bail!(
                "--iommu virtio: kernel {} has no virtio-iommu driver (CONFIG_VIRTIO_IOMMU is \
                 off in Debian's 6.1 and 5.10; 6.12 has it)",
                k.release
            );
        }
    }
    let cache = host::vm_cache()?;
    let disk = cache.join("nvme-64M.img");
    qemu::ensure_disk(&disk, 64)?;
    let run_dir = cache.join("run");
    std::fs::create_dir_all(&run_dir)?;
    // The pid: two xtasks at once (two `vm` or `demo` runs) each build and
    // remove their own; labels are unique within one run's pool.
    let initrd = run_dir.join(format!(
        "{}-{}-{}.cpio",
        spec.label,
        k.release,
        std::process::id()
    ));
    // About 50 MiB per run, rebuilt by every run: kept, a full matrix left
    // 5.5 GiB behind, and a CI machine ran out of disk in the VM phase.
    let _remove_when_done = RemoveOnDrop(initrd.clone());

    // The IOMMU's driver first: endpoints probed before it would stay
    // untranslated (virtio-iommu is a module on Debian 6.12).
    let mut modules: Vec<String> = opts.iommu.modules().iter().map(|m| m.to_string()).collect();
    if opts.host_root {
        modules.extend(["virtio_pci", "9pnet_virtio", "9p"].map(String::from));
    }
    for d in &spec.devices {
        modules.extend(d.modules().iter().map(|m| m.to_string()));
    }
    modules.extend(spec.modules.iter().cloned());
    // VFIO is there for scenarios that want it, where the kernel has it.
    let optional = ["vfio_pci", "vfio_iommu_type1"]
        .iter()
        .map(|m| m.to_string())
        .collect();
    let mut env = vec![
        // The concrete series (7.2), also when the run asked for "newest".
        ("GDT_KERNEL".to_string(), k.series.clone()),
        ("GDT_KERNEL_RELEASE".to_string(), k.release.clone()),
        ("GDT_IOMMU".to_string(), opts.iommu.name()),
        ("GDT_APPEND".to_string(), opts.kernel_params().join(" ")),
    ];
    if opts.host_root {
        env.push(("GDT_HOST_ROOT".to_string(), "/host".to_string()));
    }
    if opts.iommu == Iommu::Virtio {
        env.push((
            "GDT_VIRTIO_IOMMU_BDF".to_string(),
            qemu::VIRTIO_IOMMU_BDF.to_string(),
        ));
    }
    for d in &spec.devices {
        env.push((d.env_name().to_string(), d.bdf().to_string()));
    }
    if spec.devices.contains(&Device::BlkPort) {
        env.push(("GDT_PORT_BDF".to_string(), qemu::BLK_PORT_BDF.to_string()));
    }
    env.extend(extras.env);
    let kmods = spec
        .kmods
        .iter()
        .map(|m| kmod::build(&k, m).with_context(|| format!("test module {m} for {}", k.release)))
        .collect::<Result<Vec<_>>>()?;
    initramfs::build(
        &initramfs::Spec {
            kernel: &k,
            modules,
            optional_modules: optional,
            kmods,
            binaries: binaries.to_vec(),
            scenarios: Some(host::repo_root().join("tests/vm/scenarios")),
            env,
            command: spec.command.clone(),
        },
        &initrd,
    )?;
    eprintln!(
        "xtask: booting {} ({}) iommu={} devices={:?} append={:?}",
        k.release,
        k.series,
        opts.iommu.name(),
        spec.devices,
        opts.kernel_params()
    );
    qemu::run(&qemu::Config {
        vmlinuz: k.vmlinuz(),
        initrd,
        iommu: opts.iommu,
        devices: spec.devices.clone(),
        disk,
        memory_mib: opts.memory,
        smp: opts.smp,
        timeout: spec.timeout,
        stall: Duration::from_secs(180).min(spec.timeout),
        kernel_log: opts.kernel_log,
        prefix: spec.prefix.clone(),
        append: opts.kernel_params(),
        // The guest drives qemu's monitor where a device needs the host's
        // hand (AER injection, removal).
        monitor: spec
            .devices
            .contains(&Device::BlkPort)
            // A socket path must fit sun_path (108 bytes): not under the
            // checkout, whose path may be long.
            .then(|| {
                let n = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                std::env::temp_dir().join(format!("gdt-mon-{}-{n}", std::process::id()))
            }),
        extra_qemu: if opts.host_root {
            [
                "-virtfs",
                "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
            ]
            .map(String::from)
            .to_vec()
        } else {
            Vec::new()
        },
        net_forward: extras.net_forward,
        console: extras.console,
    })
}

/// Removes a file this run wrote when the run ends, however it ends.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub fn default_devices(devices: &[Device]) -> Vec<Device> {
    let mut d = if devices.is_empty() {
        vec![Device::Nvme, Device::Edu]
    } else {
        devices.to_vec()
    };
    d.sort();
    d.dedup();
    d
}

/// `cargo xtask vm`: exits with the guest command's status.
pub fn main(args: VmArgs) -> Result<ExitCode> {
    let binaries = build_binaries(&args.boot)?;
    let spec = RunSpec {
        kernel: args.kernel.clone(),
        devices: default_devices(&args.devices),
        modules: args.modules.clone(),
        kmods: args.kmods.clone(),
        timeout: Duration::from_secs(args.timeout),
        command: args.command.clone(),
        prefix: String::new(),
        label: "vm".into(),
    };
    let out = boot(&spec, &args.boot, &binaries)?;
    if let Some(p) = &out.problem {
        eprintln!("xtask: vm: {p}");
    }
    if let (Some(b), Some(s)) = (out.boot_secs, out.sentinel_secs) {
        eprintln!("xtask: vm: booted in {b:.1}s, finished after {s:.1}s");
    }
    Ok(match out.exit {
        Some(code) if out.problem.is_none() => ExitCode::from(code.clamp(0, 255) as u8),
        Some(code) if code != 0 => ExitCode::from(code.clamp(0, 255) as u8),
        _ => ExitCode::from(125),
    })
}
