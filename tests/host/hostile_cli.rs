//! Hostile input, round 2 (issue 30): the command line and what reaches the
//! terminal. Usage errors for settings that would be ignored, binary input
//! to `explain`, control bytes in file names, a descriptor limit too low.

use std::{fs, os::unix::process::CommandExt as _};

use crate::{
    hostile::{bin, has_raw_controls, run, shared_dir, stderr},
    require_root,
};

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

/// Issue 30: with `ulimit -n 12` the error blamed the kernel ("failed to
/// create map ... with code -1"), at 30 a map "of an unexpected type".
#[test]
fn too_few_file_descriptors_is_said_as_such() {
    require_root();
    for limit in [12u64, 20, 30, 48] {
        let mut cmd = bin();
        cmd.arg("probes");
        // SAFETY: setrlimit is async-signal-safe and touches only the child.
        unsafe {
            cmd.pre_exec(move || {
                let l = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &l) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let out = run(&mut cmd);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "ulimit -n {limit}: {err}");
        assert!(
            err.contains("too many open files (EMFILE)")
                && err.contains(&format!("may open {limit} here"))
                && !err.contains("error: loading the eBPF object failed: the kernel refused"),
            "ulimit -n {limit}: {err}"
        );
    }
}
