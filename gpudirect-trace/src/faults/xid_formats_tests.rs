//! Xid lines in the NVIDIA driver's own formats, under every log prefix a
//! user pastes them with.
//!
//! The formats are krcReportXid()'s (NVIDIA/open-gpu-kernel-modules,
//! src/nvidia/src/kernel/gpu/rc/kernel_rc.c; read at 515.43.04, 550.40.07,
//! 570.86.15, 570.124.04, 580.105.08, 595.45.04):
//! - 515 to 565: `NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s`,
//!   pid `'<unknown>'` and name `<unknown>` where no channel names a process;
//! - 570+: `... %d, pid=%s, name=%s, %s%s` with a process and `... %d, %s%s`
//!   without one; the last `%s` is ` caused by previous Xid %d` (570.124+,
//!   Xid 45 with a known cause);
//! - MIG: `(PCI:%04x:%02x:%02x GPU-I:%02u)` and `(... GPU-I:%02u GPU-CI:%02u)`;
//! - before the open module (and quoted in kern_gpu_error_cont_ga100.c):
//!   `pid=%u` without `name=`, or neither.
//!
//! Message texts are real where cited; the others are built from the format
//! strings with the values of the H200 incident (pid 619 `xid`).

use super::*;
use crate::faults::parse_line;

pub(crate) struct Form {
    /// What `NVRM: ` is followed by.
    pub(crate) body: &'static str,
    pub(crate) xid: u32,
    pub(crate) device: &'static str,
    /// (pid, name) the line names; None: no process.
    pub(crate) process: Option<(u32, Option<&'static str>)>,
    pub(crate) flags: &'static [&'static str],
    /// The reason text after `Xid N: `.
    pub(crate) reason: &'static str,
}

pub(crate) const FORMS: &[Form] = &[
    // 580.159.04 on the H200 host, 2026-12-01: a CUDA kernel writing to an
    // unmapped GPU address (the incident of issue 13).
    Form {
        body: "Xid (PCI:0000:00:06): 31, pid=619, name=xid, channel 0x00000002, intr 00000000. \
               MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x7f00_00000000. Fault \
               is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE",
        xid: 31,
        device: "0000:00:06.0",
        process: Some((619, Some("xid"))),
        flags: &["FAULT_PDE"],
        reason: "channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 \
                 GPCCLIENT_T1_0 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE \
                 ACCESS_TYPE_VIRT_WRITE",
    },
    // 570+ without a process: osHandleGpuLost()'s message, no channel.
    Form {
        body: "Xid (PCI:0000:00:06): 79, GPU has fallen off the bus.",
        xid: 79,
        device: "0000:00:06.0",
        process: None,
        flags: &[],
        reason: "GPU has fallen off the bus",
    },
    // 550 (leptonai/gpud components/accelerator/nvidia/error/xid/README.md,
    // dmesg --ctime): no channel, so the quoted '<unknown>'.
    Form {
        body: "Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp \
               Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
        xid: 13,
        device: "0000:cb:00.0",
        process: None,
        flags: &[],
        reason: "Graphics SM Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction \
                 Parameter",
    },
    // 550, the same source: a channel's process.
    Form {
        body: "Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, \
               errorString CTX SWITCH TIMEOUT, Info 0x58005",
        xid: 109,
        device: "0000:cb:00.0",
        process: Some((1_797_828, Some("pt_main_thread"))),
        flags: &[],
        reason: "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005",
    },
    // kern_gpu_error_cont_ga100.c's own example (a GPU instance, pid only).
    Form {
        body: "Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). \
               RST: No, D-RST: No",
        xid: 94,
        device: "0000:01:00.0",
        process: Some((7194, None)),
        flags: &["gpu_instance=05"],
        reason: "Contained: CE User Channel (0x9). RST: No, D-RST: No",
    },
    // The same file's uncontained example.
    Form {
        body: "Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, \
               D-RST: No",
        xid: 95,
        device: "0000:01:00.0",
        process: Some((7062, None)),
        flags: &[],
        reason: "Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No",
    },
    // The MIG format with a compute instance (format string, H200 values).
    Form {
        body: "Xid (PCI:0000:00:06 GPU-I:02 GPU-CI:01): 31, pid=619, name=xid, channel \
               0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 \
               faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
        xid: 31,
        device: "0000:00:06.0",
        process: Some((619, Some("xid"))),
        flags: &["FAULT_PDE", "gpu_instance=02", "compute_instance=01"],
        reason: "channel 0x00000002, intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 \
                 GPCCLIENT_T1_0 faulted @ 0x7f00_00000000. Fault is of type FAULT_PDE \
                 ACCESS_TYPE_VIRT_READ",
    },
    // 570.124+: the root cause appended to an Xid 45 (format string).
    Form {
        body: "Xid (PCI:0000:00:06): 45, pid=619, name=xid, Ch 00000002 caused by previous \
               Xid 31",
        xid: 45,
        device: "0000:00:06.0",
        process: Some((619, Some("xid"))),
        flags: &["caused_by_xid=31"],
        reason: "Ch 00000002 caused by previous Xid 31",
    },
    // GSP_RPC_TIMEOUT names the current process (kernel_rc.c) with
    // kernel_gsp.c's message format.
    Form {
        body: "Xid (PCI:0000:00:06): 119, pid=2210, name=nvidia-smi, Timeout after 6s of \
               waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) \
               sequence 1234 (0x20800a4c 0x4).",
        xid: 119,
        device: "0000:00:06.0",
        process: Some((2210, Some("nvidia-smi"))),
        flags: &[],
        reason: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function \
                 76 (GSP_RM_CONTROL) sequence 1234 (0x20800a4c 0x4)",
    },
    // A quoted numeric pid: not printed by the open module (it quotes only
    // '<unknown>'); read the same where a log shipper quoted it.
    Form {
        body: "Xid (PCI:0000:00:06): 31, pid='619', name=xid, channel 0x00000002",
        xid: 31,
        device: "0000:00:06.0",
        process: Some((619, Some("xid"))),
        flags: &[],
        reason: "channel 0x00000002",
    },
    // 4xx, no pid at all (doitsujin/dxvk#1027), trailing channel text.
    Form {
        body: "Xid (PCI:0000:01:00): 32, Channel ID 00000052 intr 02000000",
        xid: 32,
        device: "0000:01:00.0",
        process: None,
        flags: &[],
        reason: "Channel ID 00000052 intr 02000000",
    },
];

pub(crate) struct Prefix {
    pub(crate) text: &'static str,
    ts_ns: Option<u64>,
    wall: Option<&'static str>,
}

/// How the lines reach us: /dev/kmsg records, `dmesg`, `dmesg -T`, a
/// traditional syslog file (with the printk time), `journalctl -k`,
/// `journalctl -k -o short-monotonic`, rsyslog's RFC 3339 files.
pub(crate) const PREFIXES: &[Prefix] = &[
    Prefix {
        text: "4,1931,40194000,-;",
        ts_ns: Some(40_194_000_000),
        wall: None,
    },
    Prefix {
        text: "[   40.194000] ",
        ts_ns: Some(40_194_000_000),
        wall: None,
    },
    Prefix {
        text: "[Tue Dec  1 10:00:40 2026] ",
        ts_ns: None,
        wall: Some("Tue Dec  1 10:00:40 2026"),
    },
    Prefix {
        text: "Dec  1 10:00:40 gpuhost kernel: [   40.194000] ",
        ts_ns: Some(40_194_000_000),
        wall: Some("Dec  1 10:00:40"),
    },
    Prefix {
        text: "Dec 01 10:00:40 gpuhost kernel: ",
        ts_ns: None,
        wall: Some("Dec 01 10:00:40"),
    },
    Prefix {
        text: "[   40.194000] gpuhost kernel: ",
        ts_ns: Some(40_194_000_000),
        wall: None,
    },
    Prefix {
        text: "2026-12-01T10:00:40.194000+00:00 gpuhost kernel: ",
        ts_ns: None,
        wall: Some("2026-12-01T10:00:40.194000+00:00"),
    },
];

#[test]
fn every_driver_format_under_every_log_prefix() {
    for form in FORMS {
        for prefix in PREFIXES {
            let line = format!("{}NVRM: {}", prefix.text, form.body);
            let f = parse_line(&line).unwrap_or_else(|| panic!("not an Xid: {line}"));
            assert_eq!(f.source, Source::NvidiaXid, "{line}");
            assert_eq!(f.xid, Some(form.xid), "{line}");
            assert_eq!(f.device.as_deref(), Some(form.device), "{line}");
            let want = form
                .process
                .map(|(pid, name)| Process::reported(pid, name.map(str::to_owned)));
            assert_eq!(f.process, want, "{line}");
            assert_eq!(f.flags, form.flags, "{line}");
            assert_eq!(
                f.reason,
                format!("Xid {}: {}", form.xid, form.reason),
                "{line}"
            );
            assert!(!f.partial, "{line}");
            assert_eq!(f.timestamp_ns, prefix.ts_ns, "{line}");
            assert_eq!(f.wall_time.as_deref(), prefix.wall, "{line}");
            assert_eq!(f.raw, line);
        }
    }
}

/// What the nvidia:nvidia_dev_xid tracepoint carries for the same Xids:
/// the message alone (nv_report_error() formats only the caller's
/// message), so it names no process and the analysis falls back to the
/// tracepoint's current task, marked as such, until the log line merges
/// in (analysis/ledger tests; report tests for the whole recording).
#[test]
fn the_tracepoints_message_names_no_process() {
    for form in FORMS {
        let msg = form.reason;
        let f = super::super::tracepoint::from_xid_event("0000:00:06.0", form.xid, msg);
        assert_eq!(f.xid, Some(form.xid));
        assert_eq!(f.process, None, "{msg}");
        assert_eq!(f.reason, format!("Xid {}: {}", form.xid, form.reason));
        assert_eq!(
            f.flags.contains(&"FAULT_PDE".to_owned()),
            form.flags.contains(&"FAULT_PDE")
        );
    }
}
