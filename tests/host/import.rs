//! `import`: ftrace text of the kernel's own tracepoints into a trace file
//! (no eBPF, no root), then read by `report` and `export`.

use std::{fs, os::unix::fs::PermissionsExt as _, path::Path};

use crate::hostile::{assert_stderr_has, bin, run, shared_dir, stderr};

const TEXT: &str = "# tracer: nop\n\
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n\
    fio-42 [001] ..... 5.000000: dma_map_phys: 0000:00:04.0 dir=FROM_DEVICE dma_addr=ffe00000 size=4096 phys_addr=1234000 attrs=\n\
    fio-42 [001] ..... 5.000200: dma_map_phys: 0000:00:04.0 dir=FROM_DEVICE dma_addr=ffe01000 size=4096 phys_addr=1235000 attrs=\n\
CPU:0 [LOST 3 EVENTS]\n\
    fio-42 [001] ..s1. 5.000300: dma_unmap_phys: 0000:00:04.0 dir=FROM_DEVICE dma_addr=ffe00000 size=4096 attrs=\n";

/// The whole path a user takes: import, report, export; the file is
/// private, the kernel's losses are shown, an existing output is kept.
#[test]
fn ftrace_text_imports_and_reports() {
    let dir = shared_dir();
    let txt = dir.path().join("dma.txt");
    fs::write(&txt, TEXT).expect("write");
    let gdt = dir.path().join("dma.gdt");
    let out = run(bin().arg("import").arg(&txt).arg("-o").arg(&gdt));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_stderr_has(&out, "imported 3 events of 1 device (6 lines)");
    assert_stderr_has(&out, "3 events lost");
    let mode = fs::metadata(&gdt).expect("output").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // What ftrace does not say is not printed as empty fields.
    let out = run(bin().arg("report").arg(&gdt));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("host (ftrace text: "), "{text}");
    assert!(
        !text.contains("boot \n") && text.contains("kernel ?"),
        "{text}"
    );

    let out = run(bin().args(["report", "--json"]).arg(&gdt));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let text = doc.to_string();
    assert!(text.contains("0000:00:04.0"), "{text}");
    assert_eq!(doc["lost_events"].as_u64(), Some(3), "{text}");

    let out = run(bin().args(["export", "--format", "jsonl"]).arg(&gdt));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .matches("\"kind\":\"dma_map\"")
            .count(),
        2
    );

    // An existing output is not replaced without --force; --json for scripts.
    let out = run(bin().arg("import").arg(&txt).arg("-o").arg(&gdt));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_stderr_has(&out, "--force");
    let out = run(bin()
        .arg("import")
        .arg(&txt)
        .arg("-o")
        .arg(&gdt)
        .args(["--force", "--json"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        (stats["events"].as_u64(), stats["lost"].as_u64()),
        (Some(3), Some(3))
    );
}

/// `report` of the text itself says what to run; text without events is
/// one clear error and leaves no output behind.
#[test]
fn ftrace_text_given_to_report_points_to_import() {
    let dir = shared_dir();
    let txt = dir.path().join("dma.txt");
    fs::write(&txt, TEXT).expect("write");
    let out = run(bin().arg("report").arg(&txt));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_stderr_has(&out, "gpudirect-trace import");

    let empty = dir.path().join("empty.txt");
    fs::write(&empty, "# tracer: nop\n#\n").expect("write");
    let gdt = dir.path().join("none.gdt");
    let out = run(bin().arg("import").arg(&empty).arg("-o").arg(&gdt));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_stderr_has(&out, "no events of the dma, iommu or swiotlb tracepoints");
    assert!(!Path::new(&gdt).exists(), "a failed import left its output");
}
