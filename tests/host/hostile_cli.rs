//! Hostile input, round 2 (issue 30): the command line and what reaches the
//! terminal. Usage errors for settings that would be ignored, binary input
//! to `explain`, control bytes in file names.

use std::fs;

use crate::hostile::{bin, has_raw_controls, run, shared_dir, stderr};

/// Issue 30: the flight recorder's settings without --ring were ignored in
/// silence; clap now refuses them (usage error, exit 2), defaults aside.
#[test]
fn flight_settings_without_a_ring_are_refused() {
    let dir = shared_dir();
    let out_path = dir.path().join("x.gdt");
    for extra in [
        &["--trigger", "fault"][..],
        &["--after", "5s"],
        &["--max-snapshots", "3"],
        &["--min-spacing", "5s"],
    ] {
        let out = run(bin()
            .args(["record", "--duration", "1s", "-o"])
            .arg(&out_path)
            .args(extra));
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("--ring"),
            "{extra:?}: {}",
            stderr(&out)
        );
        assert!(!out_path.exists(), "{extra:?}: an output was created");
    }
}

/// Issue 30: `explain /dev/zero` read forever; a recording given to explain
/// points to report.
#[test]
fn explain_refuses_binary_input_and_points_a_recording_to_report() {
    let out = run(bin().args(["explain", "/dev/zero"]));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("binary input"), "{}", stderr(&out));
    let dir = shared_dir();
    let trace = dir.path().join("t.gdt");
    let mut bytes = b"GDTRACE\0".to_vec();
    bytes.extend_from_slice(&[0u8; 56]);
    fs::write(&trace, &bytes).expect("write");
    let out = run(bin().arg("explain").arg(&trace));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("gpudirect-trace report"),
        "{}",
        stderr(&out)
    );
}

/// Issue 30: a file name's control bytes reached stderr raw.
#[test]
fn file_names_with_control_bytes_are_escaped_on_stderr() {
    let dir = shared_dir();
    let evil = dir.path().join("x\u{1b}[2J\u{7}.gdt");
    let out = run(bin().arg("report").arg(&evil));
    assert_eq!(out.status.code(), Some(1));
    assert!(!has_raw_controls(&out.stderr), "{:?}", stderr(&out));
    assert!(stderr(&out).contains("\\x1b[2J"), "{}", stderr(&out));
}
