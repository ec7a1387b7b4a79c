//! Hostile and clumsy use, round 2 (issue 30): outputs. `-` is standard
//! output (never a terminal for binary data), the input is never the
//! output, a second writer never replaces a file being written, the sizes
//! said are what was written, a full disk leaves no empty file, and a stop
//! signal at any moment of record's start leaves no empty or temporary
//! file.
//!
//! `cargo test -p gpudirect-trace --test host hostile_outputs` (as root).

use std::{
    fs,
    io::{BufRead as _, BufReader},
    os::fd::{FromRawFd as _, OwnedFd},
    process::{Child, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use crate::{
    hostile::{
        assert_stderr_has, bin, doctor_root, names, record_through_stdout, run, small_trace,
        stderr, succeeds,
    },
    hostile_bounds::{spawn_quiet, spawn_with_stderr},
    hostile_capture::Tmpfs,
    require_root,
};

/// A pseudo-terminal's slave end, as standard output of a child.
fn a_terminal() -> (OwnedFd, Stdio) {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors into the ints we own; no name,
    // termios or window size is passed.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty");
    // SAFETY: both descriptors were just returned to us, each owned once.
    unsafe {
        (
            OwnedFd::from_raw_fd(master),
            Stdio::from(OwnedFd::from_raw_fd(slave)),
        )
    }
}

#[test]
fn dash_is_standard_output_and_binary_never_goes_to_a_terminal() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let root = doctor_root(dir.path(), "quiet");
    let out = bin()
        .args(["record", "-o", "-", "--duration", "1s"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("record");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.starts_with(b"GDTRACE"), "a trace on stdout");
    let trace = dir.path().join("piped.gdt");
    fs::write(&trace, &out.stdout).expect("write");
    succeeds(bin().arg("report").arg(&trace));
    assert_stderr_has(&out, "to standard output");
    let jsonl = run(bin()
        .arg("export")
        .arg(small_trace())
        .args(["--format", "jsonl", "-o", "-"])
        .current_dir(dir.path()));
    assert!(jsonl.status.success() && jsonl.stdout.starts_with(b"{"));
    let html = succeeds(
        bin()
            .arg("report")
            .arg(small_trace())
            .args(["--html", "-"])
            .current_dir(dir.path()),
    );
    assert!(html.stdout.starts_with(b"<!DOCTYPE html>"), "only the page");
    let tgz = succeeds(
        bin()
            .args(["doctor", "--root"])
            .arg(&root)
            .args(["--capture", "-"])
            .current_dir(dir.path()),
    );
    assert!(tgz.stdout.starts_with(&[0x1f, 0x8b]), "gzip on stdout");
    assert!(!dir.path().join("-").exists(), "no file named -");
    // Binary data to a terminal, - where it cannot go: refused at once.
    for args in [
        vec!["record", "-o", "-", "--duration", "1s"],
        vec!["doctor", "--capture", "-"],
    ] {
        let (_master, tty) = a_terminal();
        let out = bin()
            .args(&args)
            .stdin(Stdio::null())
            .stdout(tty)
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_stderr_has(&out, "to a terminal");
    }
    let trace = small_trace();
    let trace = trace.to_str().expect("a UTF-8 fixture path");
    for (args, says) in [
        (
            vec!["record", "-o", "-", "--json"],
            "both want standard output",
        ),
        (
            vec!["record", "-o", "-", "--ring", "5s"],
            "cannot hold them",
        ),
        (
            vec!["report", trace, "--html", "-", "--json"],
            "both want standard output",
        ),
        (
            vec!["report", trace, "--from", "5s", "--to", "1s"],
            "--to must be later than --from",
        ),
    ] {
        let out = run(bin().args(&args).current_dir(dir.path()));
        // A usage error, as clap's own.
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
    assert!(!dir.path().join("-").exists(), "no file named -");
}

#[test]
fn the_input_is_never_written_over_whatever_name_reaches_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.gdt");
    fs::copy(small_trace(), &input).expect("copy");
    let original = fs::read(&input).expect("read");
    let link = dir.path().join("link.gdt");
    std::os::unix::fs::symlink(&input, &link).expect("symlink");
    let hard = dir.path().join("hard.gdt");
    fs::hard_link(&input, &hard).expect("hard link");
    for out in [&input, &link, &hard] {
        for args in [
            vec![
                "report".as_ref(),
                input.as_os_str(),
                "--html".as_ref(),
                out.as_os_str(),
            ],
            vec![
                "export".as_ref(),
                link.as_os_str(),
                "--format".as_ref(),
                "jsonl".as_ref(),
                "-o".as_ref(),
                out.as_os_str(),
            ],
        ] {
            let o = run(bin().args(&args).arg("--force"));
            assert_eq!(o.status.code(), Some(1), "{args:?}");
            assert_stderr_has(&o, "is the file being read");
        }
    }
    assert_eq!(fs::read(&input).expect("read"), original);
    // A capture written into the capture being read.
    let root = doctor_root(dir.path(), "quiet");
    let inside = root.join("proc/cmdline");
    let before = fs::read(&inside).expect("cmdline");
    let o = run(bin()
        .args(["doctor", "--root"])
        .arg(&root)
        .arg("--capture")
        .arg(&inside)
        .arg("--force"));
    assert_eq!(o.status.code(), Some(1));
    assert_stderr_has(&o, "a file of the capture being read");
    assert_eq!(fs::read(&inside).expect("cmdline"), before);
}

/// `record ARGS` with its stderr lines sent to the receiver as they come.
pub(crate) fn spawn_record(args: &[&std::ffi::OsStr]) -> (Child, mpsc::Receiver<String>) {
    let mut child = spawn_with_stderr(bin().arg("record").args(args), Stdio::piped());
    let err = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// Waits for a line containing `pat`; all lines seen so far.
pub(crate) fn wait_for(rx: &mpsc::Receiver<String>, pat: &str, seen: &mut Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen.iter().any(|l| l.contains(pat)) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => seen.push(l),
            Err(_) => panic!("no line with {pat:?}: {seen:?}"),
        }
    }
}

#[test]
fn a_second_recorder_never_replaces_the_file_the_first_is_writing() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("x.gdt");
    let (mut first, rx) = spawn_record(&[
        "-o".as_ref(),
        path.as_os_str(),
        "--duration".as_ref(),
        "4s".as_ref(),
    ]);
    let mut seen = Vec::new();
    wait_for(&rx, "probes attached", &mut seen);
    let second = run(bin()
        .args(["record", "--force", "--duration", "1s", "-o"])
        .arg(&path));
    assert_eq!(second.status.code(), Some(1), "{}", stderr(&second));
    assert_stderr_has(&second, "being written by another process");
    assert!(first.wait().expect("first").success());
    let report = succeeds(bin().arg("report").arg(&path));
    assert!(
        !stderr(&report).contains("did not finish"),
        "the first recording is whole: {}",
        stderr(&report)
    );
    assert_eq!(names(dir.path()), ["x.gdt"]);
    // Once it is done, --force replaces it as before.
    succeeds(
        bin()
            .args(["record", "--force", "--duration", "1s", "-o"])
            .arg(&path),
    );
}

#[test]
fn output_special_says_the_bytes_it_wrote() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("via-stdout.gdt");
    let out = record_through_stdout(&f);
    assert!(out.status.success(), "{}", stderr(&out));
    let len = fs::metadata(&f).expect("stat").len();
    let said = format!("({}", gpudirect_trace::output::bytes(len));
    assert!(
        len > 0 && stderr(&out).contains(&said),
        "{len}: {}",
        stderr(&out)
    );
}

#[test]
fn a_full_disk_leaves_no_empty_file_and_the_old_one_as_it_was() {
    let disk = Tmpfs::mount("size=1m");
    let old = disk.path().join("old.gdt");
    fs::write(&old, b"precious trace").expect("seed");
    let filler = disk.path().join("filler");
    let mut f = fs::File::create(&filler).expect("filler");
    while std::io::Write::write_all(&mut f, &[0u8; 4096]).is_ok() {}
    drop(f);
    for (name, force) in [("new.gdt", false), ("old.gdt", true)] {
        let mut cmd = bin();
        cmd.args(["record", "--duration", "1s", "-o"])
            .arg(disk.path().join(name));
        if force {
            cmd.arg("--force");
        }
        let out = run(&mut cmd);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stderr(&out));
        assert_stderr_has(&out, "No space left");
        assert_eq!(names(disk.path()), ["filler", "old.gdt"], "{name}");
        assert_eq!(fs::read(&old).expect("old"), b"precious trace");
    }
}

#[test]
fn a_stop_signal_at_any_moment_of_the_start_leaves_no_empty_or_temporary_file() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("x.gdt");
    let old = dir.path().join("old.gdt");
    // Signalled at 0 to 1 s after the exec (a start takes ~0.3 s idle, a
    // few seconds on a loaded host), by SIGTERM and SIGINT, new and --force.
    let delays = [0, 5, 20, 50, 100, 200, 300, 450, 600, 800, 1000];
    for (i, ms) in delays.into_iter().enumerate() {
        let (sig, name) = if i % 2 == 0 {
            (libc::SIGTERM, "SIGTERM")
        } else {
            (libc::SIGINT, "SIGINT")
        };
        let force = i % 3 == 0;
        let target = if force { &old } else { &path };
        if force {
            fs::write(&old, b"precious trace").expect("seed");
        }
        let mut cmd = bin();
        cmd.args(["record", "--duration", "3s", "-o"]).arg(target);
        if force {
            cmd.arg("--force");
        }
        let child = spawn_quiet(&mut cmd);
        std::thread::sleep(Duration::from_millis(ms));
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        let status = child.wait_with_output().expect("wait").status;
        let why = format!("{name} at {ms} ms (force: {force}): {status:?}");
        let left = names(dir.path());
        assert!(
            !left.iter().any(|n| n.contains("tmp")),
            "{why}: a temporary file is left: {left:?}"
        );
        match fs::read(target) {
            Ok(b) if force && b == b"precious trace" => {}
            Ok(b) => {
                assert!(!b.is_empty(), "{why}: an empty file is left");
                let r = run(bin().arg("report").arg(target));
                assert!(r.status.success(), "{why}: {}", stderr(&r));
            }
            Err(_) => assert!(!force, "{why}: the old file is gone"),
        }
        let _ = fs::remove_file(&path);
    }
}

/// `-o` reads FILE|DIR in record's help; a directory without --ring is
/// refused with why (a trace is one file; a directory takes --ring's
/// snapshots), before anything is loaded, and the directory stays empty.
#[test]
fn record_into_a_directory_without_ring_says_what_a_directory_is_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = run(bin()
        .args(["record", "--duration", "1", "-o"])
        .arg(dir.path()));
    assert_eq!(o.status.code(), Some(1));
    assert_stderr_has(&o, "is a directory: record writes one trace file (-o FILE)");
    assert_stderr_has(&o, "(--ring)");
    assert_eq!(fs::read_dir(dir.path()).expect("read_dir").count(), 0);
}
