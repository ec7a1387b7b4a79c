//! Tests of `explain` (kept apart: the module stays under 600 lines).

use super::*;

// Mixed real lines (sources cited in the per-family tests): one VT-d storm
// with rate limiting (patmagauran/i915ovmfPkg#23), the 6.1 line from
// environment.md, an Xid 79 with its echo line (pop-os/pop#3363) and an
// unrelated line that must be skipped.
const LOG: &str = "\
[  139.513963] DMAR: DRHD: handling fault status reg 3
[  144.480629] dmar_fault: 893 callbacks suppressed
[  144.480638] DMAR: DRHD: handling fault status reg 3
[  144.480641] DMAR: [DMA Read] Request device [00:02.0] PASID ffffffff fault addr 9c000000 [fault reason 06] PTE Read access is not set
[  144.497296] DMAR: DRHD: handling fault status reg 3
[  144.497303] DMAR: [DMA Read] Request device [00:02.0] PASID ffffffff fault addr 9c000000 [fault reason 06] PTE Read access is not set
DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr 0x123000 [fault reason 0x05] PTE Write access is not set
Sep 23 18:37:03 xxx kernel: [   34.193759] NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
Sep 23 18:37:03 xxx kernel: [   34.193770] NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.
[    0.554378] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)
";

#[test]
fn storm_is_counted_and_echo_dropped() {
    let faults = decode_text(LOG);
    let s = summarize(&faults, LOG.lines().count(), 0);
    // status(139.5, no record) + suppressed(893) + 2 records + 6.1 record + Xid 79
    assert_eq!(faults.len(), 6, "{faults:#?}");
    assert!(faults[0].partial && faults[0].flags[0].starts_with("PFO"));
    assert_eq!(faults[1].count, 893);
    assert_eq!(s.suppressed, 893);
    assert_eq!(s.total, 1 + 893 + 2 + 1 + 1);
    assert_eq!(s.by_device.get("0000:00:02.0"), Some(&2));
    assert_eq!(
        s.by_device.get("0000:01:00.0"),
        Some(&1),
        "echo line deduplicated"
    );
    let top = &s.causes[0];
    assert_eq!(top.count, 893);
    let read = s
        .causes
        .iter()
        .find(|c| c.reason_code == Some(6))
        .expect("PTE read cause");
    assert_eq!(read.count, 2);
    assert_eq!(read.first_ns, Some(144_480_641_000));
    assert_eq!(read.last_ns, Some(144_497_303_000));
}

#[test]
fn json_shape() {
    let faults = decode_text(LOG);
    let s = summarize(&faults, 10, 0);
    let v = serde_json::to_value(Report {
        faults: &faults,
        summary: &s,
    })
    .expect("json");
    assert_eq!(v["faults"][3]["address"], "0x9c000000");
    assert_eq!(v["faults"][3]["source"], "vtd");
    assert_eq!(v["faults"][3]["device"], "0000:00:02.0");
    assert_eq!(v["faults"][3]["access"], "read");
    assert!(v["faults"][3]["mapping"].is_null());
    assert_eq!(v["summary"]["suppressed"], 893);
}

#[test]
fn text_has_summary_then_blocks() {
    let faults = decode_text(LOG);
    let s = summarize(&faults, 10, 0);
    let t = render_text(&faults, &s);
    let by_cause = t.find("By cause:").expect("summary");
    let first_block = t.find("[1] vtd").expect("block");
    assert!(by_cause < first_block);
    assert!(t.contains("address:  0x123000  access: write"));
    assert!(t.contains("Xid 79: GPU has fallen off the bus"));
}

// Measured in this project: Debian 6.1.0-57 under qemu intel-iommu, edu
// device DMA-ing 40 times to unmapped IOVAs (tests/vm/faults_vtd_kmsg.sh
// with a loop; docs/faults.md). The last interrupt has no record after it.
#[test]
fn qemu_fault_burst_keeps_the_bare_interrupt() {
    let log = "\
[    1.111105] DMAR: dmar0: Using Queued invalidation
[    3.954400] DMAR: DRHD: handling fault status reg 2
[    3.955804] DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr 0x123000 [fault reason 0x05] PTE Write access is not set
[    4.075264] DMAR: DRHD: handling fault status reg 2
[    4.079241] DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr 0x127000 [fault reason 0x05] PTE Write access is not set
[    4.204035] DMAR: DRHD: handling fault status reg 2
[    4.204109] DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr 0x12b000 [fault reason 0x05] PTE Write access is not set
[    4.311344] DMAR: DRHD: handling fault status reg 2
";
    let faults = decode_text(log);
    assert_eq!(faults.len(), 4, "{faults:#?}");
    assert_eq!(faults[2].address, Some(0x12b000));
    let bare = &faults[3];
    assert!(bare.partial);
    assert_eq!(bare.device, None);
    assert_eq!(bare.timestamp_ns, Some(4_311_344_000));
    assert_eq!(bare.flags, vec!["PPF: primary fault pending".to_string()]);
    let s = summarize(&faults, 8, 0);
    assert_eq!(s.by_device.get("0000:00:03.0"), Some(&3));
    assert_eq!(s.suppressed, 0);
}

// Real boot log of the project's H200 host (no faults in it): nothing
// may be reported. tests/fixtures/gpu-host-h200x2-snapshot/dmesg.txt
#[test]
fn clean_gpu_host_log_has_no_faults() {
    let log = "\
[    0.157454] iommu: Default domain type: Translated
[    0.157456] iommu: DMA domain TLB invalidation policy: lazy mode
[    0.554378] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)
[    1.044000] NVRM: gpuClearFbhubPoisonIntrForBug2924523_GA100: FBHUB Interrupt detected. Clearing it.
[    4.152501] NVRM: Persistence mode is deprecated and will be removed in a future release. Please use nvidia-persistenced instead.
";
    assert!(decode_text(log).is_empty());
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/gpu-host-h200x2-snapshot/dmesg.txt");
    let full = std::fs::read_to_string(&path).expect("the H200 host's dmesg fixture");
    assert!(decode_text(&full).is_empty());
}

#[test]
fn stdin_style_input_with_bad_utf8_and_a_huge_line_still_decodes() {
    let mut log = b"[ 1.0] DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr \
0x123000 [fault reason 0x05] PTE Write access is not set \xff\xfe\n"
        .to_vec();
    log.extend(std::iter::repeat_n(b'z', MAX_LINE * 3));
    log.extend_from_slice(
        b"\n[ 2.0] NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=\x1b]0;pwn\x07, x\n",
    );
    let (faults, s) = collect_from(&log[..]).expect("read");
    assert_eq!(faults.len(), 2, "{faults:#?}");
    assert_eq!((s.lines_read, s.lines_truncated), (3, 1));
    let text = sanitize::multiline(&render_text(&faults, &s)).into_owned();
    assert!(
        !text.contains('\x1b') && text.contains("\\x1b]0;pwn\\x07"),
        "{text}"
    );
}

#[test]
fn an_endless_fault_storm_is_listed_up_to_the_limit_and_counted_in_full() {
    let mut c = Collector::default();
    let extra = 25;
    for i in 0..(MAX_LISTED + extra) {
        c.feed_line(&format!(
            "DMAR: [DMA Read NO_PASID] Request device [{:02x}:{:02x}.{}] fault addr {:#x} \
             [fault reason 0x06] PTE Read access is not set",
            (i >> 8) & 0xff,
            (i >> 3) & 0x1f,
            i & 7,
            i << 12
        ));
    }
    let (faults, s) = c.finish();
    assert_eq!(faults.len(), MAX_LISTED);
    assert_eq!(s.records, MAX_LISTED + extra);
    assert_eq!(s.records_not_listed, extra);
    assert_eq!(s.total, (MAX_LISTED + extra) as u64);
    assert!(
        s.by_device.len() <= MAX_SUMMARY_KEYS + 1,
        "{}",
        s.by_device.len()
    );
    assert!(s.causes.len() <= MAX_SUMMARY_KEYS + 1);
    assert_eq!(s.by_device.values().sum::<u64>(), s.total);
    let t = render_text(&faults, &s);
    assert!(
        t.contains(&format!("{extra} more are counted")),
        "{}",
        &t[..400]
    );
}

#[test]
fn endless_aer_continuation_lines_close_the_report() {
    let mut c = Collector::default();
    c.feed_line("pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0");
    c.feed_line(
        "nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, \
         (Receiver ID)",
    );
    for _ in 0..10_000 {
        c.feed_line("nvidia 0000:01:00.0:    [ 0] RxErr");
    }
    let (faults, _) = c.finish();
    let longest = faults.iter().map(|f| f.raw.lines().count()).max();
    assert!(longest.is_some_and(|n| n <= 100), "{longest:?}");
}

#[test]
fn missing_file_is_an_error() {
    let args = ExplainOptions {
        input: Some(PathBuf::from("/nonexistent/dmesg.txt")),
        json: false,
    };
    let err = run_explain(&args).expect_err("must fail");
    assert!(format!("{err:#}").contains("cannot read /nonexistent/dmesg.txt"));
}

#[test]
fn a_journalctl_json_export_decodes_as_its_dmesg() {
    // `journalctl -k -o json`: a VT-d report over two records (the status
    // line, then the fault) and an Xid 31 with quotes to unescape; each
    // fault gets the printk time and the text without JSON's quoting.
    let log = concat!(
        r#"{"_TRANSPORT":"kernel","_SOURCE_MONOTONIC_TIMESTAMP":"5000000","MESSAGE":"DMAR: DRHD: handling fault status reg 3"}"#,
        "\n",
        r#"{"_TRANSPORT":"kernel","_SOURCE_MONOTONIC_TIMESTAMP":"5000001","MESSAGE":"DMAR: [DMA Write NO_PASID] Request device [41:00.0] fault addr 0x7f5a3000 [fault reason 0x05] PTE Write access is not set"}"#,
        "\n",
        r#"{"_SOURCE_MONOTONIC_TIMESTAMP":"6250000","MESSAGE":"NVRM: Xid (PCI:0000:41:00): 31, pid=1234, name=python3, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_WRITE \"q\""}"#,
        "\n",
    );
    let (faults, s) = collect_from(log.as_bytes()).expect("read");
    assert_eq!((faults.len(), s.lines_read), (2, 3), "{faults:#?}");
    let (vtd, xid) = (&faults[0], &faults[1]);
    assert_eq!(vtd.device.as_deref(), Some("0000:41:00.0"));
    assert_eq!(
        (vtd.address, vtd.timestamp_ns),
        (Some(0x7f5a3000), Some(5_000_001_000))
    );
    assert_eq!(xid.device.as_deref(), Some("0000:41:00.0"));
    assert_eq!(xid.timestamp_ns, Some(6_250_000_000));
    assert!(
        xid.reason.ends_with("ACCESS_TYPE_VIRT_WRITE \"q\""),
        "{}",
        xid.reason
    );
    assert!(!xid.raw.contains("MESSAGE"), "{}", xid.raw);
}

#[test]
fn rotated_logs_are_read_compressed_and_a_journal_file_is_named() {
    use std::io::Write as _;
    // Two gzip members (a file appended to after rotation: zcat reads
    // both) and a zstd frame, each holding one Xid line.
    let xid = |n: u32| format!("[ {n}.0] NVRM: Xid (PCI:0000:01:00): 79, pid=1, name=x, x\n");
    let mut gz = Vec::new();
    for n in [1, 2] {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(xid(n).as_bytes()).expect("gzip");
        gz.extend(e.finish().expect("gzip"));
    }
    let (faults, s) = collect_from(&gz[..]).expect("gzip input");
    assert_eq!((faults.len(), s.lines_read), (2, 2), "{faults:#?}");
    let zst = zstd::encode_all(xid(3).as_bytes(), 1).expect("zstd");
    let (faults, _) = collect_from(&zst[..]).expect("zstd input");
    assert_eq!(faults[0].timestamp_ns, Some(3_000_000_000));
    // A journal file (its header's magic): refused with what to run.
    let e = collect_from(&b"LPKSHHRH\0\0\0\0"[..]).expect_err("a journal file");
    assert!(e.to_string().contains("journalctl --file"), "{e}");
    // A truncated gzip stream is an error, not a silent end.
    assert!(collect_from(&gz[..gz.len() / 2 - 5]).is_err());
}
