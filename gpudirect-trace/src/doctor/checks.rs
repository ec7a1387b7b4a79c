//! Per-device checks for GPUs and NICs: PCIe link, Device Control (MPS, MRRS,
//! Relaxed Ordering), ATS/ARI/AER, BARs, NUMA and MSI affinity.

use super::{
    devices::{Device, Kind},
    findings::{ev, Findings, Severity},
    pci::{
        human_size, parse_sysfs_speed, port_type_name, speed_gts, Config, EXT_ARI,
        IORESOURCE_MEM_64, IORESOURCE_PREFETCH,
    },
    tree::{parse_cpulist, Tree},
};

const GIB: u64 = 1 << 30;

pub fn check_device(tree: &Tree, d: &Device, f: &mut Findings) {
    check_link(tree, d, f);
    check_config(d, f);
    check_bars(d, f);
    check_rebar(d, f);
    check_numa_irqs(tree, d, f);
}

fn check_link(tree: &Tree, d: &Device, f: &mut Findings) {
    let dir = d.dir();
    let rd = |n: &str| tree.read(&format!("{dir}/{n}")).ok();
    let (Some(cs), Some(ms), Some(cw), Some(mw)) = (
        rd("current_link_speed"),
        rd("max_link_speed"),
        rd("current_link_width"),
        rd("max_link_width"),
    ) else {
        // Conventional PCI / virtual devices have no link attributes.
        if d.config.as_deref().map(|c| Config::new(c).pcie().is_none()) == Some(true) {
            f.add(
                "pcie.link.none",
                Severity::Info,
                &d.bdf,
                format!(
                    "{}: no PCIe capability (conventional PCI or virtual device)",
                    d.label()
                ),
                vec![format!(
                    "{dir}/config: no capability 0x10 in the list at 0x34"
                )],
                "",
            );
        }
        return;
    };
    let evidence = vec![
        ev(&format!("{dir}/current_link_speed"), &cs),
        ev(&format!("{dir}/max_link_speed"), &ms),
        ev(&format!("{dir}/current_link_width"), &cw),
        ev(&format!("{dir}/max_link_width"), &mw),
    ];
    let (csp, msp) = (parse_sysfs_speed(&cs), parse_sysfs_speed(&ms));
    let (cwn, mwn) = (cw.parse::<u32>().ok(), mw.parse::<u32>().ok());
    let slow = matches!((csp, msp), (Some(c), Some(m)) if c < m);
    let narrow = matches!((cwn, mwn), (Some(c), Some(m)) if c < m);
    if !(slow || narrow) {
        f.add(
            "pcie.link",
            Severity::Ok,
            &d.bdf,
            format!("{}: link at full {cs} x{cw}", d.label()),
            evidence,
            "",
        );
        return;
    }
    let mut evidence = evidence;
    let cause = link_cause(tree, d, (csp, cwn), slow, narrow, &mut evidence);
    let (id, severity, advice) = match cause {
        // The port is the limit: the link runs at what the slot allows.
        LinkCause::Slot(_) => (
            "pcie.link.slot-limited",
            Severity::Warn,
            "the card is in a slot (or behind a port) that cannot run it at its own maximum: \
             move it to a full-width, full-speed slot, or check the slot's BIOS bifurcation \
             (x16 split as x8x8) and speed settings",
        ),
        LinkCause::PowerState(_) => (
            "pcie.link.power-managed",
            Severity::Info,
            "GPUs lower their link speed when idle (ASPM/dynamic speed): not a fault at full \
             width; check again under load (`gpudirect-trace live` shows the link while a \
             workload runs)",
        ),
        LinkCause::Trained(_) => (
            "pcie.link.downtrained",
            Severity::Problem,
            "both ends support more than the link trained to: signal integrity (reseat the \
             card, riser or cable; a retimer), or the slot's speed set lower in the BIOS. A \
             downtrained link caps DMA bandwidth (half width = half bandwidth); its AER \
             corrected errors (gpudirect-trace live) say whether the link is marginal",
        ),
    };
    f.add(
        id,
        severity,
        &d.bdf,
        format!(
            "{}: link runs at {cs} x{cw}, capable of {ms} x{mw}: {}",
            d.label(),
            cause.text()
        ),
        evidence,
        advice,
    );
}

/// Why a link runs below the device's maximum, as far as the host shows.
enum LinkCause {
    /// The port above caps it (its own maximum is lower).
    Slot(String),
    /// A GPU at full width, its speed lowered: its power management.
    PowerState(String),
    /// Both ends could do more.
    Trained(String),
}

impl LinkCause {
    fn text(&self) -> &str {
        match self {
            LinkCause::Slot(t) | LinkCause::PowerState(t) | LinkCause::Trained(t) => t,
        }
    }
}

/// The cause the port's capabilities, the device's class and the port's
/// Link Status 2 (retimers) can prove; `evidence` gets what was read.
fn link_cause(
    tree: &Tree,
    d: &Device,
    (speed, width): (Option<f64>, Option<u32>),
    slow: bool,
    narrow: bool,
    evidence: &mut Vec<String>,
) -> LinkCause {
    let port = d.upstream.last();
    let rd = |p: &str, n: &str| tree.read(&format!("/sys/bus/pci/devices/{p}/{n}")).ok();
    let port_caps = port.map(|p| {
        let ms = rd(p, "max_link_speed");
        let mw = rd(p, "max_link_width");
        if let Some(v) = &ms {
            evidence.push(ev(&format!("/sys/bus/pci/devices/{p}/max_link_speed"), v));
        }
        if let Some(v) = &mw {
            evidence.push(ev(&format!("/sys/bus/pci/devices/{p}/max_link_width"), v));
        }
        (
            ms.as_deref().and_then(parse_sysfs_speed),
            mw.and_then(|w| w.parse::<u32>().ok()),
        )
    });
    if let (Some(p), Some((pms, pmw))) = (port, port_caps) {
        let speed_capped = slow && matches!((speed, pms), (Some(c), Some(m)) if c >= m);
        let width_capped = narrow && matches!((width, pmw), (Some(c), Some(m)) if c >= m);
        if (speed_capped || !slow) && (width_capped || !narrow) {
            return LinkCause::Slot(format!("its port {p} allows no more (slot or bifurcation)"));
        }
    }
    if slow && !narrow && d.class >> 16 == 0x03 {
        return LinkCause::PowerState(
            "speed lowered at full width: a GPU's power management (idle)".into(),
        );
    }
    // A retimer on the link (Link Status 2 of the port, PCIe 4.0+).
    let retimers = port
        .and_then(|p| {
            tree.read_bytes(&format!("/sys/bus/pci/devices/{p}/config"))
                .ok()
        })
        .and_then(|b| {
            let c = Config::new(&b);
            let o = c.pcie()?.offset;
            c.u16(o + 0x32)
        })
        .map(|lnksta2| (lnksta2 >> 6) & 3);
    let retimer = match retimers {
        Some(1) => " (a retimer is on the link: check it)",
        Some(2) | Some(3) => " (two retimers are on the link: check them)",
        _ => "",
    };
    LinkCause::Trained(format!("trained below what both ends support{retimer}"))
}

fn check_config(d: &Device, f: &mut Findings) {
    let path = format!("{}/config", d.dir());
    let bytes = match (&d.config, &d.config_err) {
        (Some(b), _) => b,
        (None, Some(e)) => return f.unreadable("pcie.config", &d.bdf, &path, e),
        (None, None) => return,
    };
    let c = Config::new(bytes);
    let Some(p) = c.pcie() else {
        return;
    };
    let at = |o: usize| format!("{path} @0x{o:x}");
    let ro = if p.relaxed_ordering { "on" } else { "off" };
    f.add(
        "pcie.devctl",
        Severity::Info,
        &d.bdf,
        format!(
            "{} ({}): MaxPayload {} B (device supports {} B), MaxReadReq {} B, Relaxed \
             Ordering {ro}, No Snoop {}",
            d.label(),
            port_type_name(p.port_type),
            p.mps,
            p.mps_supported,
            p.mrrs,
            if p.no_snoop { "on" } else { "off" },
        ),
        vec![format!("{} DevCtl = 0x{:04x}", at(p.offset + 8), p.devctl)],
        "MPS is negotiated by firmware/kernel down to the smallest MPS on the path \
         (pci=pcie_bus_perf lets Linux raise it); it lives in the PCIe Device Control \
         register. The field guide's `setpci -d 10de: latency_timer=0` does not touch it: \
         latency_timer (config offset 0x0d) is a conventional-PCI register PCIe ignores",
    );
    if let (Some(cs), Some(cm)) = (speed_gts(p.link_speed), speed_gts(p.link_cap_speed)) {
        if (cs < cm || p.link_width < p.link_cap_width) && p.link_width != 0 {
            f.add(
                "pcie.linksta.downtrained",
                Severity::Warn,
                &d.bdf,
                format!(
                    "{}: Link Status says {cs} GT/s x{}, Link Capabilities {cm} GT/s x{}",
                    d.label(),
                    p.link_width,
                    p.link_cap_width
                ),
                vec![at(p.offset + 0x12)],
                "see pcie.link.downtrained",
            );
        }
    }
    if !c.has_extended() {
        f.add(
            "pcie.extended.unreadable",
            Severity::Unknown,
            &d.bdf,
            format!(
                "{}: only {} bytes of config space readable: ATS/ARI/AER/ACS/Resizable BAR unknown",
                d.label(),
                c.len()
            ),
            vec![format!("{path}: {} bytes", c.len())],
            "run as root (unprivileged reads stop at 64 bytes)",
        );
        return;
    }
    let ats = match c.ats_enabled() {
        Some(true) => "ATS enabled",
        Some(false) => "ATS present, disabled",
        None => "no ATS capability",
    };
    let ari = if c.find_ext_cap(EXT_ARI).is_some() {
        "ARI capable"
    } else {
        "no ARI capability"
    };
    f.add(
        "pcie.extcaps",
        Severity::Info,
        &d.bdf,
        format!("{}: {ats}, {ari}", d.label()),
        vec![format!("{path}: extended capability list from 0x100")],
        "ATS lets the device cache IOMMU translations (only matters with a translating \
         IOMMU). ARI only matters for devices with more than 8 functions (SR-IOV NICs); the \
         field guide's 'ARI is critical for multi-GPU' does not apply to GPUs",
    );
    if let Some(a) = c.aer() {
        let bad = a.uncorrectable & !a.uncorrectable_mask;
        let (sev, s) = match (bad, a.correctable) {
            (0, 0) => (Severity::Ok, "AER status clean".to_string()),
            (0, ce) => (
                Severity::Info,
                format!("AER correctable errors logged (status 0x{ce:08x})"),
            ),
            (ue, _) => (
                Severity::Problem,
                format!("AER uncorrectable errors logged (status 0x{ue:08x})"),
            ),
        };
        f.add(
            "pcie.aer",
            sev,
            &d.bdf,
            format!("{}: {s}", d.label()),
            vec![format!(
                "{}: UESta 0x{:08x} UEMsk 0x{:08x} CESta 0x{:08x}",
                at(a.offset),
                a.uncorrectable,
                a.uncorrectable_mask,
                a.correctable
            )],
            if sev == Severity::Ok {
                ""
            } else {
                "check dmesg for 'AER:' lines; recurring errors point to the slot/riser/cable \
                 (a platform problem, not the driver)"
            },
        );
    }
}

fn check_bars(d: &Device, f: &mut Findings) {
    let Some(res) = &d.resources else {
        return;
    };
    let rpath = format!("{}/resource", d.dir());
    let mem: Vec<_> = res
        .iter()
        .filter(|r| r.index < 6 && r.is_mem() && r.size() > 0)
        .collect();
    let desc = mem
        .iter()
        .map(|r| {
            format!(
                "BAR{} {} at 0x{:x}{}",
                r.index,
                human_size(r.size()),
                r.start,
                if r.flags & IORESOURCE_PREFETCH != 0 {
                    " pref"
                } else {
                    ""
                }
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let evidence: Vec<String> = mem
        .iter()
        .map(|r| {
            format!(
                "{rpath} line {}: 0x{:016x} 0x{:016x} 0x{:016x}",
                r.index, r.start, r.end, r.flags
            )
        })
        .collect();
    f.add(
        "bar.layout",
        Severity::Info,
        &d.bdf,
        format!("{}: {desc}", d.label()),
        evidence.clone(),
        "",
    );
    let below: Vec<_> = mem
        .iter()
        .filter(|r| r.size() >= 256 << 20 && r.end < 1 << 32)
        .collect();
    if !below.is_empty() {
        f.add(
            "bar.below_4g",
            Severity::Warn,
            &d.bdf,
            format!("{}: large BAR placed below 4 GiB", d.label()),
            evidence.clone(),
            "enable 'Above 4G Decoding' in the BIOS so large 64-bit BARs can be placed high \
             (and grow)",
        );
    }
    // NVIDIA: BAR1 (the framebuffer aperture GPUDirect maps) is the second memory
    // BAR by register order (BAR0 registers, then BAR1).
    if d.kind == Kind::Gpu && d.vendor == 0x10de {
        if let Some(b1) = mem.get(1) {
            let small = b1.size() < GIB;
            f.add(
                if small { "bar.bar1_small" } else { "bar.bar1" },
                if small { Severity::Warn } else { Severity::Ok },
                &d.bdf,
                format!(
                    "{}: BAR1 aperture {}{}",
                    d.label(),
                    human_size(b1.size()),
                    if b1.flags & IORESOURCE_MEM_64 != 0 {
                        " (64-bit)"
                    } else {
                        ""
                    }
                ),
                vec![evidence[1].clone()],
                if small {
                    "a small BAR1 (e.g. 256 MiB) limits how much GPU memory GPUDirect RDMA and \
                     P2P can map at once. Enable Above 4G Decoding and Resizable BAR in the \
                     BIOS (and NVreg_EnableResizableBar=1 where supported)"
                } else {
                    ""
                },
            );
        }
    }
}

/// Resizable BAR capability (0x15): current vs largest supported size.
fn check_rebar(d: &Device, f: &mut Findings) {
    let Some(cfg) = d.config.as_deref() else {
        return;
    };
    for r in Config::new(cfg).rebar() {
        let grown = r.max_supported.is_none_or(|m| r.current >= m);
        f.add(
            "bar.resizable",
            if grown {
                Severity::Info
            } else {
                Severity::Warn
            },
            &d.bdf,
            format!(
                "{}: Resizable BAR{} at {}, largest supported {}",
                d.label(),
                r.bar,
                human_size(r.current),
                r.max_supported
                    .map(human_size)
                    .unwrap_or_else(|| "?".into())
            ),
            vec![format!("{}/config: extended capability 0x15", d.dir())],
            if grown {
                ""
            } else {
                "the BAR was not resized to what the device supports: enable Resizable BAR \
                 (and Above 4G Decoding) in the BIOS; for NVIDIA GPUs also \
                 NVreg_EnableResizableBar=1"
            },
        );
    }
}

fn check_numa_irqs(tree: &Tree, d: &Device, f: &mut Findings) {
    let dir = d.dir();
    let node = d.numa_node;
    let mut evidence = vec![ev(
        &format!("{dir}/numa_node"),
        node.map(|n| n.to_string())
            .unwrap_or_else(|| "unreadable".into()),
    )];
    // CPUs local to the device: its local_cpulist, else its node's cpulist.
    let local = d.local_cpus.clone().or_else(|| {
        node.filter(|n| *n >= 0).and_then(|n| {
            tree.read(&format!("/sys/devices/system/node/node{n}/cpulist"))
                .ok()
        })
    });
    if let Some(l) = &local {
        evidence.push(ev(&format!("{dir}/local_cpulist"), l));
    }
    f.add(
        "numa.node",
        Severity::Info,
        &d.bdf,
        match node {
            Some(-1) => format!(
                "{}: NUMA node unknown (-1: firmware gives no proximity; single-node or VM), local CPUs {}",
                d.label(),
                local.as_deref().unwrap_or("?")
            ),
            Some(n) => format!("{}: NUMA node {n}, local CPUs {}", d.label(), local.as_deref().unwrap_or("?")),
            None => format!("{}: NUMA node unreadable", d.label()),
        },
        evidence,
        "pin the processes that drive this device to its local CPUs (numactl --cpunodebind)",
    );
    let (Some(irqs), Some(local_set)) = (&d.msi_irqs, local.as_deref().and_then(parse_cpulist))
    else {
        return;
    };
    let mut off = Vec::new();
    let mut seen = Vec::new();
    let mut unreadable = Vec::new();
    for irq in irqs {
        let p = format!("/proc/irq/{irq}/smp_affinity_list");
        match tree.read(&p) {
            Ok(a) => {
                let cpus = parse_cpulist(&a).unwrap_or_default();
                if !cpus.is_empty() && !cpus.iter().any(|c| local_set.contains(c)) {
                    off.push(ev(&p, &a));
                }
                seen.push(ev(&p, &a));
            }
            Err(e) => unreadable.push(format!("{p}: {e}")),
        }
    }
    // One finding for the device, not one per vector (a NIC has dozens).
    if !unreadable.is_empty() {
        let advice = f.unreadable_advice();
        f.add(
            "irq.affinity.unreadable",
            Severity::Unknown,
            &d.bdf,
            format!(
                "{}: CPU affinity of {} of {} MSI/MSI-X vectors unreadable",
                d.label(),
                unreadable.len(),
                irqs.len()
            ),
            unreadable,
            advice,
        );
    }
    if seen.is_empty() {
        return;
    }
    let local_s = local.unwrap_or_default();
    if off.is_empty() {
        f.add(
            "irq.affinity",
            Severity::Ok,
            &d.bdf,
            format!(
                "{}: {} MSI/MSI-X vectors, all may run on local CPUs {local_s}",
                d.label(),
                seen.len()
            ),
            seen,
            "",
        );
    } else {
        f.add(
            "irq.affinity_off_node",
            Severity::Warn,
            &d.bdf,
            format!(
                "{}: {} of {} MSI/MSI-X vectors may only run on CPUs outside the device's local CPUs {local_s}",
                d.label(),
                off.len(),
                seen.len()
            ),
            off,
            "set the IRQs' smp_affinity_list to the device's local CPUs (or let irqbalance do \
             it). The field guide's `echo 1 > /proc/irq/N/smp_affinity` pins every vector to \
             CPU0, which may be on the wrong socket and serialises all interrupts on one CPU",
        );
    }
}
