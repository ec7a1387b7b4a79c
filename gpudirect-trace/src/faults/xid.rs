//! NVIDIA Xid reports from the driver (`NVRM: Xid (PCI:0000:3b:00): 79, ...`).
//!
//! Numbers: src/common/sdk/nvidia/inc/nverror.h in
//! NVIDIA/open-gpu-kernel-modules (ROBUST_CHANNEL_* / named errors, up to 153
//! in the 570/580 branches). Meanings and first checks: NVIDIA's Xid catalog
//! (docs.nvidia.com/deploy/xid-errors), condensed. Xid 154 ("GPU recovery
//! action changed") is printed by r565+ drivers; its text names the action.
//!
//! Line shapes across driver versions:
//! - old:   `NVRM: Xid (PCI:0000:01:00): 31, Ch 0000005a, intr 10000000. MMU Fault: ...`
//! - 4xx:   `NVRM: Xid (PCI:0000:c1:00): 31, pid=12890, Ch 0000003b, intr 00000000. MMU Fault: ...`
//! - 5xx:   `NVRM: Xid (PCI:0000:08:00): 31, pid=169800, name=chrome, Ch 00000023, ...`
//! - 550+:  `..., pid='<unknown>', name=<unknown>, GPU has fallen off the bus.`
//! - 595:   `..., pid=13705, name=UnrealEditor, channel 0x0000000c, intr 00000000. MMU Fault: ...`
//! - no Xid: `NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.` (follows Xid 79)
//!
//! The open module's krcReportXid() (src/nvidia/src/kernel/gpu/rc/kernel_rc.c)
//! prints them: 515 to 565 always `%d, pid=%s, name=%s, %s` (pid `'<unknown>'`
//! and name `<unknown>` without a channel), 570+ `%d, pid=%s, name=%s, %s%s`
//! with a process and `%d, %s%s` without one, the last `%s` being
//! ` caused by previous Xid %d` for an Xid 45 with a known cause; on a MIG
//! GPU the parenthesis is `(PCI:%04x:%02x:%02x GPU-I:%02u)` or
//! `(... GPU-I:%02u GPU-CI:%02u)`. The nvidia:nvidia_dev_xid tracepoint
//! (575+) gets less: nvErrorLog2() hands nv_report_error() only the
//! caller's message, so the tracepoint's text has no `pid=`/`name=`, and an
//! Xid seen there takes its process from its log line (analysis/ledger.rs).

use super::{parse_hex, Access, Fault, Source};
use crate::model::Process;

/// (Xid, nverror.h name, meaning, first checks). Key Xids carry the catalog's
/// guidance; the rest name the engine from nverror.h.
pub const XIDS: &[(u32, &str, &str, &str)] = &[
    (13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics engine exception (illegal instruction, out-of-range address or similar inside a kernel/shader)",
     "Usually the application: run it under compute-sanitizer; if different applications hit it on one GPU, run DCGM diagnostics."),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory management unit fault: an engine accessed a GPU virtual address that is not mapped or not permitted",
     "The line names the faulting process and address: check that application (use-after-free, out-of-bounds, freed UVM/peer mapping); repeats on one GPU across applications point at hardware."),
    (32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream",
     "Driver or application corruption, or data corrupted on the way from system memory: check PCIe AER errors for this GPU and system memory errors."),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing a channel (the channel was reset after a fault)",
     "Usually follows an application fault: look at the Xid just before it; the GPU stays usable."),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup of a channel because of an earlier error or an application that was killed",
     "Look for the error before it (often Xid 13/31/43, or a process killed with Ctrl-C); alone it is benign."),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double-bit (uncorrectable) ECC error in GPU memory",
     "Reset the GPU/reboot; check `nvidia-smi -q -d ECC,ROW_REMAPPER`; repeated DBEs mean RMA."),
    (61, "PMU_BREAKPOINT", "Internal micro-controller breakpoint/warning",
     "Driver/firmware issue: collect nvidia-bug-report.sh; update the driver if it repeats."),
    (62, "PMU_HALT_ERROR", "Internal micro-controller halted",
     "Reset the GPU; check temperatures and power; collect nvidia-bug-report.sh."),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "ECC page retirement or row remapping recorded (memory row remapped, pending until reset)",
     "Reset the GPU to apply the remap; check `nvidia-smi -q -d ROW_REMAPPER`; not an outage by itself."),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "ECC page retirement or row remapping failed",
     "Reset the GPU; if it persists the memory repair resources are exhausted: RMA."),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "Video decoder (NVDEC) exception", "Usually the application or driver; update the driver if it repeats."),
    (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics engine class error", "Usually the application (bad method/class use)."),
    (74, "NVLINK_ERROR", "NVLink error (link training, CRC/replay threshold, or link down)",
     "Check `nvidia-smi nvlink -s` and `-e` for the link named in the line, NVSwitch/fabric manager logs, bridges/cables; reset the GPU; repeats on one link mean hardware."),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus: it stopped answering on PCIe",
     "A platform problem until proven otherwise: look at the PCIe AER history of the GPU and its upstream port just before (this report lists AER faults), link state (`lspci -vv` LnkSta), power cables/PSU, temperatures, firmware; the GPU needs a reset or reboot."),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "High rate of single-bit (corrected) ECC errors",
     "Check ECC counters; a warning sign before uncorrectable errors."),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained uncorrectable memory error: only the applications using the affected memory were stopped",
     "Restart the affected applications; reset the GPU when convenient so the row remap takes effect."),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained uncorrectable memory error: every application on the GPU is affected",
     "Stop the workloads and reset the GPU (or reboot); check row remapping; repeats mean RMA."),
    (109, "(Xid catalog; not in nverror.h)", "Context switch timeout",
     "Usually an application/driver hang (very long-running kernels, deadlock); if it repeats with different applications, collect nvidia-bug-report.sh."),
    (119, "GSP_RPC_TIMEOUT", "GSP firmware did not answer an RPC in time",
     "Reset the GPU (often a reboot is needed); collect nvidia-bug-report.sh; check for a newer driver; can follow a GPU that fell off the bus."),
    (120, "GSP_ERROR", "GSP firmware reported an error", "Reset the GPU; collect nvidia-bug-report.sh; update the driver."),
    (121, "C2C_ERROR", "Chip-to-chip (C2C) interconnect error", "Grace-Hopper C2C link: reset; repeats mean hardware."),
    (136, "ALI_TRAINING_FAIL", "NVLink autonomous link initialisation (ALI) training failed", "Check NVLink state and fabric; reset."),
    (137, "NVLINK_FLA_PRIV_ERR", "NVLink fabric linear address privilege error", "Peer mapping / fabric address misuse: check the application's P2P/IMEX setup."),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "An uncorrectable ECC error escaped containment",
     "Reset the GPU; check ECC and row remapping state; contact support if it repeats."),
    (143, "GPU_INIT_ERROR", "GPU initialisation failed", "Check power, PCIe link and firmware; reset or reboot."),
    (144, "NVLINK_SAW_ERROR", "NVLink SAW error", "NVLink hardware/fabric: check link counters; reset."),
    (145, "NVLINK_RLW_ERROR", "NVLink RLW error", "NVLink hardware/fabric: check link counters; reset."),
    (146, "NVLINK_TLW_ERROR", "NVLink TLW error", "NVLink hardware/fabric: check link counters; reset."),
    (147, "NVLINK_TREX_ERROR", "NVLink TREX error", "NVLink hardware/fabric: check link counters; reset."),
    (148, "NVLINK_NVLPW_CTRL_ERROR", "NVLink NVLPW control error", "NVLink hardware/fabric: check link counters; reset."),
    (149, "NVLINK_NETIR_ERROR", "NVLink NETIR error", "NVLink hardware/fabric: the message names the link; check the peer device too."),
    (150, "NVLINK_MSE_ERROR", "NVLink MSE error", "NVLink hardware/fabric: check link counters; reset."),
    (151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Confidential-computing key rotation error", "Restart the affected application."),
    (154, "(Xid catalog; r565+ drivers)", "The driver changed the GPU's required recovery action (none, GPU reset, node reboot, drain)",
     "Do what the message says (e.g. 'Node Reboot Required'); `nvidia-smi -q` shows 'GPU Recovery Action'; look at the Xid before it for the cause."),
];

/// Short names for the remaining nverror.h numbers (engine errors).
fn engine_name(xid: u32) -> Option<&'static str> {
    Some(match xid {
        14 => "Fake error (test)",
        19..=22 => "Display/video engine software method error",
        23 => "RC logging enabled",
        27..=29 => "Video engine error",
        30 => "Bad address access",
        33 => "Security engine (SEC) error",
        34..=36 => "Video engine (MSVLD/MSPDEC/MSPPP) error",
        39..=41 | 70..=72 | 75..=77 | 85 | 126..=135 => "Copy engine (CE) error",
        42 => "Video image compositor (VIC) error",
        44 => "Graphics engine fault during context switch",
        47 | 65 | 73 => "Video encoder (NVENC) error",
        59 => "PMU error",
        60 => "SEC2 error",
        78 => "vGPU device cannot be started",
        80 => "Push buffer CRC mismatch",
        81 => "VGA subsystem error",
        82 => "JPEG engine (NVJPG) error",
        83 | 84 | 88 | 89 => "Video decoder (NVDEC) error",
        86 | 139 => "Optical flow engine (OFA) error",
        87 => "Telemetry driver report",
        90 => "LTC (L2 cache) error",
        93 => "InfoROM erase limit exceeded",
        122..=124 => "SPI PMU RPC failure",
        125 => "InfoROM filesystem error",
        138 => "Deep learning accelerator (DLA) error",
        141 => "Fast path error",
        _ => return None,
    })
}

pub fn lookup(xid: u32) -> Option<(&'static str, &'static str)> {
    if let Some(e) = XIDS.iter().find(|e| e.0 == xid) {
        return Some((e.2, e.3));
    }
    engine_name(xid).map(|n| {
        (
            n,
            "Engine-level error: usually the application or driver; look at other Xids around it.",
        )
    })
}

/// Parse a `NVRM:` line.
pub fn parse(body: &str) -> Option<Fault> {
    let nvrm = body.find("NVRM: ")?;
    let msg = &body[nvrm + 6..];
    if let Some(rest) = msg.strip_prefix("Xid ") {
        return Some(parse_xid(rest, body));
    }
    fallen_off_without_xid(msg, body)
}

fn parse_xid(rest: &str, raw: &str) -> Fault {
    // "(PCI:0000:01:00): 79, pid=..., name=..., text", or on a MIG GPU
    // "(PCI:0000:01:00 GPU-I:05 GPU-CI:01): ..."
    let (attribution, after_dev) = match rest.strip_prefix('(').and_then(|r| r.split_once("):")) {
        Some((attr, tail)) => (Some(attr), tail),
        None => (None, rest),
    };
    let mut attr = attribution.unwrap_or("").split_whitespace();
    let device = attr.next();
    let instances: Vec<String> = attr
        .filter_map(|a| {
            if let Some(i) = a.strip_prefix("GPU-I:") {
                Some(format!("gpu_instance={i}"))
            } else {
                a.strip_prefix("GPU-CI:")
                    .map(|i| format!("compute_instance={i}"))
            }
        })
        .collect();
    let tail = after_dev.trim();
    let (num, text) = match tail.split_once(',') {
        Some((n, t)) => (n.trim(), t.trim()),
        None => (tail, ""),
    };
    let mut f = match num.parse::<u32>() {
        Ok(xid) => from_message(xid, text, raw),
        Err(_) => {
            let mut f = Fault::new(Source::NvidiaXid, "Xid line without a number", raw);
            f.partial = true;
            f.explanation =
                "The driver reported an Xid but the number could not be read; see the raw line."
                    .into();
            f
        }
    };
    match device {
        Some(dev) => f.set_device(dev),
        None => f.partial = true,
    }
    f.flags.extend(instances);
    f
}

/// An Xid from its number and the driver's message: the text after
/// `Xid (PCI:...): N, ` in the log line, or the tracepoint's message (the
/// same without `pid=`/`name=`, see the module doc). The process comes from
/// the message's own `pid=`/`name=` (quoted or not, `<unknown>` meaning
/// none), never from whichever task printed it.
pub fn from_message(xid: u32, message: &str, raw: &str) -> Fault {
    let mut f = Fault::new(Source::NvidiaXid, "", raw);
    f.xid = Some(xid);
    f.reason_code = Some(xid);
    let mut text = message.trim();
    let unquote = |v: &str| v.trim().trim_matches('\'').to_string();
    let mut pid: Option<u32> = None;
    let mut name: Option<String> = None;
    // Optional "pid=...", "name=...", in that order.
    if let Some(t) = text.strip_prefix("pid=") {
        let (p, t2) = t.split_once(',').unwrap_or((t, ""));
        pid = unquote(p).parse().ok();
        text = t2.trim();
    }
    if let Some(t) = text.strip_prefix("name=") {
        let (n, t2) = t.split_once(',').unwrap_or((t, ""));
        let n = unquote(n);
        if n != "<unknown>" && !n.is_empty() {
            name = Some(n);
        }
        text = t2.trim();
    }
    if pid.is_some() || name.is_some() {
        f.process = Some(Process::reported(pid.unwrap_or(0), name));
    }
    // 570+: an Xid 45 names the Xid that caused it.
    if let Some((_, cause)) = text.rsplit_once(" caused by previous Xid ") {
        if let Ok(n) = cause.trim().trim_end_matches('.').parse::<u32>() {
            f.flags.push(format!("caused_by_xid={n}"));
        }
    }
    if xid == 31 {
        mmu_fault_details(&mut f, text);
    }
    match lookup(xid) {
        Some((meaning, checks)) => {
            f.reason = if text.is_empty() {
                format!("Xid {xid}: {meaning}")
            } else {
                format!("Xid {xid}: {}", text.trim_end_matches('.'))
            };
            f.explanation = format!("{meaning}. {checks}");
        }
        None => {
            f.partial = true;
            f.reason = format!("Xid {xid}: {}", text.trim_end_matches('.'));
            f.explanation = "Xid number not in this tool's table (newer driver): look it up in \
                 NVIDIA's Xid catalog."
                .to_string();
        }
    }
    f
}

/// `MMU Fault: ENGINE GRAPHICS GPC2 ... faulted @ 0x0_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ`
fn mmu_fault_details(f: &mut Fault, text: &str) {
    if let Some(p) = text.find("faulted @ ") {
        let addr = text[p + 10..].split_whitespace().next().unwrap_or("");
        f.address = parse_hex(addr);
    }
    if let Some(p) = text.find("ACCESS_TYPE_") {
        let ty = text[p + 12..].split_whitespace().next().unwrap_or("");
        f.access = if ty.contains("WRITE") {
            Some(Access::Write)
        } else if ty.contains("READ") {
            Some(Access::Read)
        } else if ty.contains("ATOMIC") {
            Some(Access::Atomic)
        } else if ty.contains("PREFETCH") {
            Some(Access::Prefetch)
        } else {
            None
        };
    }
    if let Some(p) = text.find("Fault is of type ") {
        if let Some(kind) = text[p + 17..].split_whitespace().next() {
            f.flags.push(kind.to_string());
        }
    }
}

/// `NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.` (the probe-time
/// multi-line `NVRM: The NVIDIA GPU ...` form is joined by the decoder).
fn fallen_off_without_xid(msg: &str, raw: &str) -> Option<Fault> {
    let rest = msg.strip_prefix("GPU ")?;
    let (dev, tail) = rest.split_once(": ")?;
    if !tail.contains("fallen off the bus") {
        return None;
    }
    let mut f = Fault::new(Source::NvidiaXid, "GPU has fallen off the bus", raw);
    f.set_device(dev);
    f.device.as_ref()?;
    f.xid = Some(79);
    f.reason_code = Some(79);
    if let Some((meaning, checks)) = lookup(79) {
        f.explanation = format!("{meaning}. {checks}");
    }
    Some(f)
}

#[cfg(test)]
#[path = "xid_formats_tests.rs"]
pub(crate) mod formats;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{parse_line, parsed};

    // https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1030 (595.71.05)
    #[test]
    fn xid31_new_format_with_pid_name_channel() {
        let f = parsed("[  365.969681] NVRM: Xid (PCI:0000:01:00): 31, pid=13705, name=UnrealEditor, channel 0x0000000c, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC2 GPCCLIENT_PROP_0 faulted @ 0x0_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ");
        assert_eq!(f.source, Source::NvidiaXid);
        assert_eq!(f.xid, Some(31));
        assert_eq!(f.device.as_deref(), Some("0000:01:00.0"));
        assert_eq!(
            f.process,
            Some(Process::reported(13705, Some("UnrealEditor".into())))
        );
        assert_eq!(f.address, Some(0));
        assert_eq!(f.access, Some(Access::Read));
        assert_eq!(f.flags, vec!["FAULT_PDE".to_string()]);
        assert!(!f.partial);
    }

    // https://github.com/doitsujin/dxvk/issues/1027 (418, no pid)
    #[test]
    fn xid31_old_format_and_xid32() {
        let f = parsed("[31543.449443] NVRM: Xid (PCI:0000:01:00): 31, Ch 0000003a, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x17_00592000. Fault is of type FAULT_PDE ACCESS_TYPE_READ");
        assert_eq!(f.process, None);
        assert_eq!(f.address, Some(0x17_0059_2000));
        let f = parsed(
            "[31609.615516] NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000052 intr 02000000",
        );
        assert_eq!(f.xid, Some(32));
        assert!(f.explanation.contains("push buffer"));
    }

    // https://github.com/doitsujin/dxvk/issues/1799 (journalctl -k, 450)
    #[test]
    fn xid31_journalctl_write() {
        let f = parsed("Nov 29 11:28:11 zeus kernel: NVRM: Xid (PCI:0000:c1:00): 31, pid=12890, Ch 0000003b, intr 00000000. MMU Fault: ENGINE HOST0 HUBCLIENT_HOST_CPU faulted @ 0x1_0c3c0000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE");
        assert_eq!(f.device.as_deref(), Some("0000:c1:00.0"));
        assert_eq!(f.access, Some(Access::Write));
        assert_eq!(f.address, Some(0x1_0c3c_0000));
    }

    // https://github.com/pop-os/pop/issues/3363 (syslog + printk time, pid='<unknown>')
    #[test]
    fn xid79_unknown_pid() {
        let f = parsed("Sep 23 18:37:03 xxx kernel: [   34.193759] NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.");
        assert_eq!(f.xid, Some(79));
        assert_eq!(
            f.process, None,
            "pid='<unknown>', name=<unknown> names no one"
        );
        assert_eq!(f.reason, "Xid 79: GPU has fallen off the bus");
        assert!(f.explanation.contains("AER"));
        let g = parsed("Sep 23 18:37:03 xxx kernel: [   34.193770] NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.");
        assert_eq!(g.xid, Some(79));
        assert_eq!(g.device.as_deref(), Some("0000:01:00.0"));
    }

    // https://github.com/NVIDIA/NVSentinel/issues/155 (no pid field; probe-time
    // multi-line message without an Xid)
    #[test]
    fn xid79_minimal_and_probe_message() {
        let f = parsed("NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus");
        assert_eq!(f.device.as_deref(), Some("0000:44:00.0"));
        assert_eq!(
            parse_line("[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0"),
            None
        );
        let out = crate::faults::Decoder::decode_all([
            "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
            "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
            "               NVRM: fallen off the bus and is not responding to commands.",
            "[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).",
        ]);
        assert_eq!(out.len(), 1, "{out:#?}");
        assert_eq!(out[0].device.as_deref(), Some("0000:b3:00.0"));
        assert_eq!(out[0].xid, Some(79));
        assert_eq!(out[0].timestamp_ns, Some(1_843_308_145_000));
    }

    // https://github.com/leptonai/gpud/pull/46 (dmesg --ctime, 109 with pid)
    #[test]
    fn xid109_dmesg_ctime() {
        let f = parsed("[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005");
        assert_eq!(f.xid, Some(109));
        assert_eq!(
            f.process,
            Some(Process::reported(1_797_828, Some("pt_main_thread".into())))
        );
        assert_eq!(f.wall_time.as_deref(), Some("Fri Aug 30 11:43:14 2024"));
    }

    // https://github.com/doitsujin/dxvk/issues/1027 (Xid 13, old format)
    #[test]
    fn xid13_graphics_exception() {
        let f = parsed("[31609.615230] NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception: Class 0x0 Subchannel 0x0 Mismatch");
        assert_eq!(f.xid, Some(13));
        assert_eq!(
            f.reason,
            "Xid 13: Graphics Exception: Class 0x0 Subchannel 0x0 Mismatch"
        );
        assert!(f.explanation.contains("compute-sanitizer"));
    }

    // Quoted as kmsg input in https://github.com/leptonai/gpud/pull/1174
    // (NVLink Xid on a PCI domain other than 0000).
    #[test]
    fn xid149_nvlink_other_domain() {
        let f = parsed("NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)");
        assert_eq!(f.device.as_deref(), Some("0019:01:00.0"));
        assert_eq!(f.xid, Some(149));
        assert!(!f.partial);
    }

    #[test]
    fn missing_number_and_unknown_xid_are_partial() {
        // Malformed input taken from NVSentinel's parser tests (xid parser test vectors).
        let f = parse_line("NVRM: Xid (PCI:0000:66:00): abc, pid=2280636").expect("recognised");
        assert!(f.partial);
        assert_eq!(f.xid, None);
        let f = parse_line("NVRM: Xid (PCI:0000:66:00): 999, something").expect("recognised");
        assert!(f.partial);
        assert_eq!(f.xid, Some(999));
    }

    #[test]
    fn table_has_the_key_xids() {
        for x in [
            13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 140,
            154,
        ] {
            assert!(lookup(x).is_some(), "Xid {x} missing");
        }
        assert!(lookup(39).is_some(), "CE errors come from nverror.h ranges");
    }
}
