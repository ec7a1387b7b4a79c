//! Hostile input, round 2 (issue 30): the command line and what reaches the
//! terminal. Usage errors for settings that would be ignored, binary input
//! to `explain`, control bytes in file names, a descriptor limit too low.

use std::{fs, os::unix::process::CommandExt as _};

use crate::{
    hostile::{as_nobody, assert_stderr_has, bin, has_raw_controls, run, shared_dir, stderr},
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
    assert_stderr_has(&out, "binary input");
    let dir = shared_dir();
    let trace = dir.path().join("t.gdt");
    let mut bytes = b"GDTRACE\0".to_vec();
    bytes.extend_from_slice(&[0u8; 56]);
    fs::write(&trace, &bytes).expect("write");
    let out = run(bin().arg("explain").arg(&trace));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_stderr_has(&out, "gpudirect-trace report");
}

/// Issue 30: a file name's control bytes reached stderr raw.
#[test]
fn file_names_with_control_bytes_are_escaped_on_stderr() {
    let dir = shared_dir();
    let evil = dir.path().join("x\u{1b}[2J\u{7}.gdt");
    let out = run(bin().arg("report").arg(&evil));
    assert_eq!(out.status.code(), Some(1));
    assert!(!has_raw_controls(&out.stderr), "{:?}", stderr(&out));
    assert_stderr_has(&out, "\\x1b[2J");
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

/// Issue 30: a line feed inside a trace's strings (host, boot id, command,
/// comm, GPU and device names, fault text, Xid message) forged whole lines
/// in `report`, and `export --format hdr` wrote ESC/OSC/CSI/DEL into its
/// `#` and `Tag=` lines. Every string of the crafted file carries them; no
/// output of any reader may hold a raw control byte or a line that starts
/// with what followed a line feed.
#[test]
fn no_string_of_a_trace_forges_a_line_or_reaches_an_output_raw() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("forge.gdt");
    crate::crafted::forging_strings(&trace);
    let html = dir.path().join("r.html");
    let cases: Vec<(&str, Vec<std::ffi::OsString>)> = vec![
        ("report", vec!["report".into(), trace.clone().into()]),
        (
            "report --html",
            vec![
                "report".into(),
                trace.clone().into(),
                "--html".into(),
                html.clone().into(),
            ],
        ),
        (
            "report --json",
            vec!["report".into(), trace.clone().into(), "--json".into()],
        ),
        // The header's class device names carry it too: the name typed
        // finds the device, whose bus id (FORGE-carrying) is not one.
        (
            "report --device NAME",
            vec![
                "report".into(),
                trace.clone().into(),
                "--device".into(),
                format!("nvme0{}", crate::crafted::FORGE).into(),
            ],
        ),
        (
            "export hdr",
            vec![
                "export".into(),
                trace.clone().into(),
                "--format".into(),
                "hdr".into(),
            ],
        ),
        (
            "export jsonl",
            vec![
                "export".into(),
                trace.clone().into(),
                "--format".into(),
                "jsonl".into(),
            ],
        ),
        (
            "export chrome",
            vec![
                "export".into(),
                trace.clone().into(),
                "--format".into(),
                "chrome".into(),
            ],
        ),
    ];
    for (what, args) in cases {
        let out = run(bin().args(&args));
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            let text = String::from_utf8_lossy(bytes);
            assert!(
                !has_raw_controls(bytes) && !bytes.contains(&0x7f) && !bytes.contains(&b'\r'),
                "{what} {stream}: {text}"
            );
            let forged = text
                .lines()
                .find(|l| l.trim_start().trim_start_matches('"').starts_with("FORGED"));
            assert!(forged.is_none(), "{what} {stream}: forged line {forged:?}");
        }
    }
    // A GPU the recording lacks: the error lists the recording's GPUs,
    // whose names are the file's.
    let out = run(bin().arg("report").arg(&trace).args(["--device", "GPU5"]));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("GPUs in the recording: ") && !has_raw_controls(&out.stderr),
        "{err}"
    );
    assert!(!err.lines().any(|l| l.starts_with("FORGED")), "{err}");
    // The text report shows the strings, escaped where they stand.
    let out = run(bin().arg("report").arg(&trace));
    let text = String::from_utf8_lossy(&out.stdout);
    for field in ["host", "boot", "cmd", "comm", "0000:01:00.0", "reason"] {
        assert!(
            text.contains(&format!("{field}ok\\x0aFORGED line\\x0d\\x1b[2J")),
            "{field}: {text}"
        );
    }
    let page = fs::read_to_string(&html).expect("page");
    assert!(
        !page.contains('\u{1b}') && !page.contains("\nFORGED"),
        "the page"
    );
    // The hdr log's comment and tags: one line each, escaped.
    let out = run(bin().arg("export").arg(&trace).args(["--format", "hdr"]));
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(log.contains("host hostok\\x0aFORGED"), "{log}");
    assert!(
        log.contains("Tag=0000:01:00.0ok\\x0aFORGED_line\\x0d\\x1b[2J"),
        "{log}"
    );
}

/// doctor run by a user where kernel.dmesg_restrict is 1 (Debian's
/// default): the kernel log finding says it could not be read, with
/// dmesg's own reason, and advises root (it said "no dmesg.txt in the
/// capture / dmesg failed", with no capture in sight).
#[test]
fn doctor_as_a_user_says_why_the_kernel_log_was_not_read() {
    require_root();
    let restrict = fs::read_to_string("/proc/sys/kernel/dmesg_restrict").unwrap_or_default();
    if restrict.trim() != "1" {
        // libtest captures eprintln!, not a direct write: the skip shows.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED doctor_as_a_user_says_why_the_kernel_log_was_not_read: \
             kernel.dmesg_restrict is not 1, so a user may read the log here"
        );
        return;
    }
    let out = run(as_nobody().args(["doctor", "--json"]));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}; stderr: {}", stderr(&out)));
    let klog = doc["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["id"] == "klog.unreadable")
        .unwrap_or_else(|| panic!("no klog.unreadable finding: {doc}"));
    assert_eq!(klog["summary"], "unknown: the kernel log could not be read");
    let why = klog["evidence"][0].as_str().expect("evidence");
    assert!(why.starts_with("dmesg failed"), "{why}");
    assert!(!why.contains("capture"), "{why}");
    let advice = klog["advice"].as_str().expect("advice");
    assert!(advice.contains("run as root"), "{advice}");
}

/// doctor's "a finding is a problem" and clap's usage error both exited 2,
/// so a script (the doctor-vtd VM scenario among them) read a mistyped
/// option as a checked host with problems. A problem is 4 now; 2 stays the
/// usage error of every command.
#[test]
fn doctor_tells_a_problem_found_from_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::create_dir_all(dir.path().join("proc")).expect("mkdir");
    fs::create_dir_all(dir.path().join("sys")).expect("mkdir");
    fs::write(dir.path().join("proc/cmdline"), "ro swiotlb=force\n").expect("write");
    let found = bin()
        .args(["doctor", "--root"])
        .arg(dir.path())
        .output()
        .expect("run doctor");
    let text = String::from_utf8_lossy(&found.stdout);
    assert!(text.contains("[swiotlb.forced]"), "{text}");
    assert_eq!(found.status.code(), Some(4), "{text}");
    let usage = bin()
        .args(["doctor", "--jsno", "--root"])
        .arg(dir.path())
        .output()
        .expect("run doctor");
    assert_eq!(usage.status.code(), Some(2), "{}", stderr(&usage));
    assert!(stderr(&usage).contains("--jsno"), "{}", stderr(&usage));
}

/// `record -- CMD` with a mistyped CMD loaded every probe (seconds on a
/// large kernel) and only then said it could not run it. Now it is said
/// first, with nothing loaded and no file written: a missing path, a name
/// that no PATH directory holds, a directory, a file without execute bits.
#[test]
fn record_says_a_command_it_cannot_run_before_loading_anything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = dir.path().join("notes.txt");
    fs::write(&plain, "not a program\n").expect("write");
    // Set, not left to the umask: the message quotes the mode.
    fs::set_permissions(&plain, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    let out_file = dir.path().join("t.gdt");
    let cases = [
        ("/nonexistent/cmd".to_string(), "No such file or directory"),
        (
            "gdt-no-such-command".to_string(),
            "no executable of that name in PATH",
        ),
        (dir.path().display().to_string(), "is a directory"),
        (plain.display().to_string(), "not executable (mode 644)"),
    ];
    for (cmd, why) in cases {
        let out = bin()
            .args(["record", "-o"])
            .arg(&out_file)
            .args(["--", &cmd])
            .output()
            .expect("run record");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert!(
            err.contains(&format!("cannot run {cmd}: {why}")),
            "{cmd}: {err}"
        );
        assert!(
            !err.contains("probes attached"),
            "{cmd}: loaded first: {err}"
        );
        assert!(!out_file.exists(), "{cmd}: a trace file was left");
    }
}
