//! Runs qemu (TCG, q35, optional emulated VT-d) with a watchdog, streaming the
//! serial console and watching for the init's sentinel lines.

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use clap::ValueEnum;

/// The IOMMU the guest sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Iommu {
    /// Emulated Intel VT-d (legacy mode), caching mode, interrupt remapping;
    /// strict invalidation (`iommu.strict=1`; caching mode forces it anyway).
    Intel,
    /// Emulated Intel VT-d without caching mode, `iommu.strict=0`: the only
    /// way to lazy (flush-queue) invalidation under qemu's VT-d. With
    /// caching-mode=on the guest prints "IOMMU batching disallowed due to
    /// virtualization" and forces strict (intel/iommu.c, 6.1 and 6.12).
    /// Emulated devices work without caching mode; VFIO in the guest and
    /// vhost need it (qemu refuses VFIO devices without it).
    IntelLazy,
    /// Emulated Intel VT-d in scalable mode (x-scalable-mode=on).
    IntelScalable,
    /// qemu's virtio-iommu-pci at 0000:00:02.0, described to the guest by an
    /// ACPI VIOT table. Needs the guest's virtio_iommu driver (Debian 6.12:
    /// a module, loaded before the endpoints' drivers; 6.1 has none).
    Virtio,
    /// No IOMMU: DMA is direct.
    None,
}

impl Iommu {
    /// The name used on the command line and in headers (`intel-lazy`).
    pub fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_string())
            .unwrap_or_default()
    }

    /// Guest modules the IOMMU's driver needs, loaded before every device's.
    /// virtio_pci is built into 6.12 (skipped there) and a module on 6.1.
    pub fn modules(self) -> &'static [&'static str] {
        match self {
            Iommu::Virtio => &["virtio_pci", "virtio_iommu"],
            _ => &[],
        }
    }
}

/// The PCI address of the virtio-iommu (it is a PCI device itself).
pub const VIRTIO_IOMMU_BDF: &str = "0000:00:02.0";

/// Extra PCI devices; each has a fixed address so bus ids are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Device {
    /// NVMe controller at 0000:00:04.0 backed by a 64 MiB raw image.
    Nvme,
    /// qemu's `edu` teaching device (DMA engine) at 0000:00:03.0.
    Edu,
    /// Intel e1000e NIC at 0000:00:05.0 (no network peer).
    E1000e,
    /// A virtio-blk disk (qemu id `vblk1`, the NVMe's image) at
    /// 0000:01:00.0 behind a PCIe root port at 0000:00:06.0 (id `rp1`) with
    /// a native hotplug slot (pciehp: ACPI hotplug of bridges off), and
    /// qemu's monitor for the guest (`gdt-monitor:` lines, monitor.rs): AER
    /// injection and removal. virtio-pci with `aer=on` has an AER capability
    /// and lets the OS enable error reporting (qemu's e1000e keeps its
    /// Device Control read-only: its injected errors are never reported,
    /// seen on 7.2); `iommu_platform=on` puts its DMA through the DMA API
    /// and the IOMMU.
    BlkPort,
    /// A virtio-net NIC at 0000:00:07.0 on qemu's user-mode network, with
    /// `restrict=on` (the guest reaches nothing outside) and, where the run
    /// asks ([`Config::net_forward`]), a TCP forward from a host loopback
    /// port to the guest (fleet scenarios scrape `serve` through it). No
    /// VIRTIO_F_ACCESS_PLATFORM: its DMA bypasses the IOMMU, so the NIC adds
    /// no mappings or faults to what a scenario traces.
    Net,
}

/// The root port above `Device::BlkPort`.
pub const BLK_PORT_BDF: &str = "0000:00:06.0";

impl Device {
    pub fn bdf(self) -> &'static str {
        match self {
            Device::Edu => "0000:00:03.0",
            Device::Nvme => "0000:00:04.0",
            Device::E1000e => "0000:00:05.0",
            Device::BlkPort => "0000:01:00.0",
            Device::Net => "0000:00:07.0",
        }
    }

    pub fn env_name(self) -> &'static str {
        match self {
            Device::Edu => "GDT_EDU_BDF",
            Device::Nvme => "GDT_NVME_BDF",
            Device::E1000e => "GDT_E1000E_BDF",
            Device::BlkPort => "GDT_BLKPORT_BDF",
            Device::Net => "GDT_NET_BDF",
        }
    }

    /// Modules the guest must load to drive the device.
    pub fn modules(self) -> &'static [&'static str] {
        match self {
            Device::Nvme => &["nvme"],
            Device::Edu => &[],
            Device::E1000e => &["e1000e"],
            Device::BlkPort => &["virtio_pci", "virtio_blk"],
            // Debian builds both as modules (6.12: virtio_pci built in).
            Device::Net => &["virtio_pci", "virtio_net"],
        }
    }
}

pub struct Config {
    pub vmlinuz: PathBuf,
    pub initrd: PathBuf,
    pub iommu: Iommu,
    pub devices: Vec<Device>,
    pub disk: PathBuf,
    pub memory_mib: u32,
    pub smp: u32,
    pub timeout: Duration,
    /// Give up when the console is silent this long.
    pub stall: Duration,
    pub kernel_log: bool,
    /// Prefix for streamed console lines (empty: as is).
    pub prefix: String,
    /// Extra kernel parameters, after the harness's own (see [`kernel_args`]).
    pub append: Vec<String>,
    /// Extra qemu arguments (e.g. a 9p share), before the PCI devices.
    pub extra_qemu: Vec<String>,
    /// qemu's monitor on this socket, for the guest's `gdt-monitor:` lines
    /// (None: no monitor).
    pub monitor: Option<PathBuf>,
    /// With `Device::Net`: forward host `127.0.0.1:.0` to guest port `.1`.
    pub net_forward: Option<(u16, u16)>,
    /// Called with every console line; an answer it gives is written to
    /// the guest's console input (as the monitor's are). It may block: the
    /// guest waits on its console for the answer meanwhile.
    pub console: Option<ConsoleHook>,
}

/// See [`Config::console`].
pub type ConsoleHook = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

#[derive(Debug)]
pub struct Outcome {
    /// The command's exit status as reported by the guest, if it got that far.
    pub exit: Option<i32>,
    pub success: bool,
    /// Why the run did not end with a sentinel (timeout, stall, panic, qemu exit).
    pub problem: Option<String>,
    pub lines: Vec<String>,
    /// Seconds from qemu start to the guest's "booted" line and to the sentinel.
    pub boot_secs: Option<f64>,
    pub sentinel_secs: Option<f64>,
}

pub fn command_line(cfg: &Config) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    let mut push = |s: &str| a.push(s.to_string());
    for s in [
        "-M",
        "q35,kernel-irqchip=split",
        "-accel",
        "tcg",
        "-nodefaults",
        "-display",
        "none",
        "-serial",
        "stdio",
        "-no-reboot",
    ] {
        push(s);
    }
    push("-monitor");
    match &cfg.monitor {
        Some(path) => push(&super::monitor::Monitor::at(path).qemu_arg()),
        None => push("none"),
    }
    push("-m");
    push(&cfg.memory_mib.to_string());
    push("-smp");
    push(&cfg.smp.to_string());
    // The IOMMU must come before the PCI devices it translates for.
    match cfg.iommu {
        Iommu::Intel => {
            push("-device");
            push("intel-iommu,intremap=on,caching-mode=on");
        }
        Iommu::IntelLazy => {
            push("-device");
            push("intel-iommu,intremap=on,caching-mode=off");
        }
        Iommu::IntelScalable => {
            push("-device");
            push("intel-iommu,intremap=on,caching-mode=on,x-scalable-mode=on");
        }
        Iommu::Virtio => {
            push("-device");
            push("virtio-iommu-pci,addr=02.0");
        }
        Iommu::None => {}
    }
    for x in &cfg.extra_qemu {
        push(x);
    }
    for d in &cfg.devices {
        match d {
            Device::Edu => {
                push("-device");
                push("edu,addr=03.0");
            }
            Device::Nvme => {
                push("-drive");
                push(&format!(
                    "file={},if=none,id=nvm0,format=raw,snapshot=on",
                    cfg.disk.display()
                ));
                push("-device");
                push("nvme,serial=gdt-nvme0,drive=nvm0,addr=04.0");
            }
            Device::E1000e => {
                push("-device");
                push("e1000e,addr=05.0,romfile=");
            }
            Device::BlkPort => {
                // Native PCIe hotplug (pciehp, pci:pci_hp_event) needs the
                // firmware to leave the root ports to the OS.
                push("-global");
                push("ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off");
                push("-device");
                push("pcie-root-port,id=rp1,bus=pcie.0,chassis=1,slot=1,addr=06.0");
                push("-drive");
                push(&format!(
                    "file={},if=none,id=vd0,format=raw,snapshot=on",
                    cfg.disk.display()
                ));
                push("-device");
                push(
                    "virtio-blk-pci,id=vblk1,bus=rp1,drive=vd0,aer=on,\
                     iommu_platform=on,disable-legacy=on",
                );
            }
            Device::Net => {
                // Bound to the host's loopback only: the guest's exporter
                // is reachable from this machine, not from its network.
                let fwd = cfg.net_forward.map_or(String::new(), |(host, guest)| {
                    format!(",hostfwd=tcp:127.0.0.1:{host}-:{guest}")
                });
                push("-netdev");
                push(&format!("user,id=net0,restrict=on{fwd}"));
                push("-device");
                push("virtio-net-pci,netdev=net0,addr=07.0,romfile=");
            }
        }
    }
    push("-kernel");
    push(&cfg.vmlinuz.display().to_string());
    push("-initrd");
    push(&cfg.initrd.display().to_string());
    push("-append");
    push(&kernel_args(cfg).join(" "));
    a
}

/// The guest's kernel command line: the harness's parameters, then
/// `cfg.append`. The kernel parses `iommu.strict=` as an early_param
/// (drivers/iommu/iommu.c iommu_dma_setup: each occurrence overwrites
/// iommu_dma_strict), so a later one wins; the harness's default is dropped
/// anyway when the caller sets the parameter, so that the command line
/// says one thing. The same goes for `intel_iommu=`.
///
/// `no_timer_check`: under TCG on a loaded host the IO-APIC timer test at
/// boot can miss its window, and with interrupt remapping on the kernel then
/// panics ("timer doesn't work through Interrupt-remapped IO-APIC", seen once
/// on 7.2 while another VM suite shared the 2 cores); the timer itself works.
pub fn kernel_args(cfg: &Config) -> Vec<String> {
    let mut args: Vec<String> = [
        "console=ttyS0",
        "panic=-1",
        "oops=panic",
        "rdinit=/init",
        "no_timer_check",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let defaults: &[&str] = match cfg.iommu {
        Iommu::Intel | Iommu::IntelScalable => &["intel_iommu=on", "iommu.strict=1"],
        Iommu::IntelLazy => &["intel_iommu=on", "iommu.strict=0"],
        Iommu::Virtio | Iommu::None => &["intel_iommu=off"],
    };
    let key = |s: &str| s.split('=').next().unwrap_or(s).to_string();
    for d in defaults {
        if !cfg.append.iter().any(|x| key(x) == key(d)) {
            args.push(d.to_string());
        }
    }
    if !cfg.kernel_log {
        args.push("quiet".into());
    }
    args.extend(cfg.append.iter().cloned());
    args
}

enum Msg {
    Line(String),
    Eof,
}

fn reader(stream: impl std::io::Read + Send + 'static, tx: mpsc::Sender<Msg>) {
    std::thread::spawn(move || {
        let mut r = BufReader::new(stream);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf)
                        .trim_end_matches(['\r', '\n'])
                        .replace('\r', "");
                    if tx.send(Msg::Line(line)).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = tx.send(Msg::Eof);
    });
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Boots the VM and waits for the sentinel, a problem, or the timeout.
pub fn run(cfg: &Config) -> Result<Outcome> {
    let args = command_line(cfg);
    let start = Instant::now();
    // Made before qemu listens there, removed when the run ends.
    let mut monitor = cfg.monitor.as_deref().map(super::monitor::Monitor::at);
    let mut child = Command::new("qemu-system-x86_64")
        .args(&args)
        .stdin(if monitor.is_some() || cfg.console.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let (tx, rx) = mpsc::channel();
    reader(child.stdout.take().context("qemu stdout")?, tx.clone());
    reader(child.stderr.take().context("qemu stderr")?, tx);

    let mut out = Outcome {
        exit: None,
        success: false,
        problem: None,
        lines: Vec::new(),
        boot_secs: None,
        sentinel_secs: None,
    };
    let mut eofs = 0;
    let mut last_output = Instant::now();
    let stdout = std::io::stdout();
    loop {
        let now = Instant::now();
        if now >= start + cfg.timeout {
            out.problem = Some(format!("timed out after {}s", cfg.timeout.as_secs()));
            kill(&mut child);
            break;
        }
        if now >= last_output + cfg.stall {
            out.problem = Some(format!("console silent for {}s", cfg.stall.as_secs()));
            kill(&mut child);
            break;
        }
        let wait = (start + cfg.timeout)
            .min(last_output + cfg.stall)
            .saturating_duration_since(now);
        match rx.recv_timeout(wait.min(Duration::from_secs(1))) {
            Ok(Msg::Line(line)) => {
                last_output = Instant::now();
                {
                    let mut o = stdout.lock();
                    let _ = writeln!(o, "{}{line}", cfg.prefix);
                }
                let secs = start.elapsed().as_secs_f64();
                if line.starts_with("gdt-vm: booted") {
                    out.boot_secs = Some(secs);
                } else if let Some(code) = line.strip_prefix("gdt-vm: exit=") {
                    out.exit = code.trim().parse().ok();
                } else if line.trim() == "gdt-vm: success" {
                    out.success = true;
                    out.sentinel_secs = Some(secs);
                } else if line.trim() == "gdt-vm: failure" {
                    out.sentinel_secs = Some(secs);
                } else if line.contains("Kernel panic") && out.problem.is_none() {
                    out.problem = Some(format!("guest kernel panic: {line}"));
                } else if let (Some(m), Some(req)) =
                    (monitor.as_mut(), super::monitor::request(&line))
                {
                    // The guest waits on its console for the answer.
                    let answer = match req.and_then(|r| m.run(&r).map(|said| (r.times, said))) {
                        Ok((n, said)) if said.is_empty() => format!("gdt-monitor-done {n} ok"),
                        Ok((n, said)) => format!("gdt-monitor-done {n} said: {said}"),
                        Err(e) => format!("gdt-monitor-done 0 error: {e:#}"),
                    };
                    if let Some(stdin) = child.stdin.as_mut() {
                        let _ = writeln!(stdin, "{}", answer.replace('\n', " "));
                        let _ = stdin.flush();
                    }
                    last_output = Instant::now();
                } else if let Some(answer) = cfg.console.as_ref().and_then(|h| h(&line)) {
                    if let Some(stdin) = child.stdin.as_mut() {
                        let _ = writeln!(stdin, "{}", answer.replace('\n', " "));
                        let _ = stdin.flush();
                    }
                    last_output = Instant::now();
                }
                out.lines.push(line);
            }
            Ok(Msg::Eof) => {
                eofs += 1;
                if eofs == 2 {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // qemu exits by itself after poweroff; give it a moment, then make sure.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait()? {
            Some(status) => {
                if out.sentinel_secs.is_none() && out.problem.is_none() {
                    out.problem = Some(format!("qemu exited ({status}) before the sentinel"));
                } else if !status.success() && out.problem.is_none() {
                    out.problem = Some(format!("qemu exited with {status}"));
                }
                break;
            }
            None if Instant::now() >= deadline => {
                kill(&mut child);
                break;
            }
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    if out.sentinel_secs.is_none() && out.problem.is_none() {
        out.problem = Some("no sentinel line from the guest".into());
    }
    Ok(out)
}

/// A raw disk image with recognisable content: every 512-byte sector starts with
/// `gdt-sector-NNNNNNNN` (its number), the rest is zero.
pub fn ensure_disk(path: &Path, mib: u64) -> Result<()> {
    let size = mib * 1024 * 1024;
    if std::fs::metadata(path)
        .map(|m| m.len() == size)
        .unwrap_or(false)
    {
        return Ok(());
    }
    let mut data = vec![0u8; size as usize];
    for (i, sector) in data.chunks_mut(512).enumerate() {
        let tag = format!("gdt-sector-{i:08}\n");
        sector[..tag.len()].copy_from_slice(tag.as_bytes());
    }
    std::fs::write(path, data).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iommu_device_precedes_pci_devices() {
        let cfg = Config {
            devices: vec![Device::Nvme, Device::Edu],
            ..cfg(Iommu::Intel, &[])
        };
        let a = command_line(&cfg);
        let pos = |s: &str| a.iter().position(|x| x.starts_with(s)).expect(s);
        assert!(pos("intel-iommu") < pos("nvme,"));
        assert!(pos("intel-iommu") < pos("edu,"));
        let append = &a[a.len() - 1];
        assert!(append.contains("intel_iommu=on") && append.contains("panic=-1"));
        assert!(append.contains("no_timer_check"));
        assert!(a.iter().any(|x| x == "-no-reboot"));
    }

    fn cfg(iommu: Iommu, append: &[&str]) -> Config {
        Config {
            vmlinuz: "/k".into(),
            initrd: "/i".into(),
            iommu,
            devices: vec![Device::Nvme],
            disk: "/d.img".into(),
            memory_mib: 1024,
            smp: 1,
            timeout: Duration::from_secs(1),
            stall: Duration::from_secs(1),
            kernel_log: false,
            prefix: String::new(),
            append: append.iter().map(|s| s.to_string()).collect(),
            extra_qemu: Vec::new(),
            monitor: None,
            net_forward: None,
            console: None,
        }
    }

    #[test]
    fn appended_parameters_override_the_harness_defaults() {
        let args = kernel_args(&cfg(Iommu::Intel, &["iommu.strict=0", "swiotlb=force"]));
        assert!(!args.iter().any(|a| a == "iommu.strict=1"), "{args:?}");
        assert_eq!(&args[args.len() - 2..], ["iommu.strict=0", "swiotlb=force"]);
        assert!(args.iter().any(|a| a == "intel_iommu=on"));
        let plain = kernel_args(&cfg(Iommu::Intel, &[]));
        assert!(plain.iter().any(|a| a == "iommu.strict=1"));
        let pt = kernel_args(&cfg(Iommu::Intel, &["iommu=pt"]));
        assert!(
            pt.iter().any(|a| a == "iommu.strict=1")
                && pt.last().map(String::as_str) == Some("iommu=pt")
        );
    }

    #[test]
    fn lazy_and_virtio_iommus_have_their_own_devices() {
        let a = command_line(&cfg(Iommu::IntelLazy, &[]));
        assert!(a
            .iter()
            .any(|x| x == "intel-iommu,intremap=on,caching-mode=off"));
        assert!(a.last().is_some_and(|x| x.contains("iommu.strict=0")));
        let v = command_line(&cfg(Iommu::Virtio, &[]));
        let pos = |s: &str| v.iter().position(|x| x.starts_with(s)).expect(s);
        assert!(pos("virtio-iommu-pci") < pos("nvme,"));
        assert!(!v.iter().any(|x| x.starts_with("intel-iommu")));
        assert_eq!(Iommu::IntelLazy.name(), "intel-lazy");
    }

    #[test]
    fn net_is_isolated_and_forwards_only_from_loopback() {
        let mut c = cfg(Iommu::Intel, &[]);
        c.devices = vec![Device::Net];
        let plain = command_line(&c);
        assert!(plain.iter().any(|x| x == "user,id=net0,restrict=on"));
        c.net_forward = Some((40000, 9435));
        let a = command_line(&c);
        assert!(a
            .iter()
            .any(|x| x == "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:40000-:9435"));
        assert!(a
            .iter()
            .any(|x| x.starts_with("virtio-net-pci,netdev=net0")));
    }
}
