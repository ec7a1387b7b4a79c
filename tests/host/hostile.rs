//! Hostile and damaged input (issue 19), through the real binary: output
//! files are never clobbered, followed or chmod-ed; readers stay within
//! 256 MiB on endless and crafted input; no control character from a log
//! reaches the terminal; bad values are refused at parse time; a closed
//! stderr never panics. The memory bounds and `serve` under abuse are in
//! hostile_bounds.rs.
//!
//! `cargo test -p gpudirect-trace --test host hostile` (as root: some run
//! the tool as `nobody` through setpriv, or load the programs).

use std::{
    fs,
    io::Write as _,
    os::{
        fd::{FromRawFd as _, OwnedFd},
        unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _},
    },
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use crate::require_root;

const BIN: &str = env!("CARGO_BIN_EXE_gpudirect-trace");

pub(crate) fn bin() -> Command {
    Command::new(BIN)
}

/// The tool run as user `nobody` (no capabilities), through setpriv.
pub(crate) fn as_nobody() -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]);
    c
}

pub(crate) fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .expect("run gpudirect-trace")
}

/// Runs `cmd` and fails, showing its standard error, unless it succeeds.
pub(crate) fn succeeds(cmd: &mut Command) -> Output {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        out.status,
        stderr(&out)
    );
    out
}

/// `succeeds` for the tool with `args`.
pub(crate) fn run_ok(args: &[&str]) -> Output {
    succeeds(bin().args(args))
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Fails unless the command's standard error says `what`, showing all of
/// it (the one check nearly every refusal test makes).
pub(crate) fn assert_stderr_has(o: &Output, what: &str) {
    let err = stderr(o);
    assert!(err.contains(what), "{err}");
}

/// `record -o /dev/stdout --output-special` for a second, its standard
/// output the file `f` (as a shell's `> f` would open it).
pub(crate) fn record_through_stdout(f: &Path) -> Output {
    bin()
        .args([
            "record",
            "-o",
            "/dev/stdout",
            "--output-special",
            "--duration",
            "1s",
        ])
        .stdin(Stdio::null())
        .stdout(fs::File::create(f).expect("create"))
        .stderr(Stdio::piped())
        .output()
        .expect("record")
}

/// A directory `nobody` can write in (tempdirs are 0700).
pub(crate) fn shared_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o777)).expect("chmod");
    d
}

pub(crate) fn small_trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/reader/small.gdt")
}

/// The names in `dir`, sorted: what a refused or failed write left there.
pub(crate) fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A copy of /dev/null (same major/minor, mode 0666) at `p`.
fn dev_null_copy(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().expect("utf-8")).expect("path");
    // SAFETY: mknod reads a NUL-terminated path we own.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(rc, 0, "mknod: {}", std::io::Error::last_os_error());
    fs::set_permissions(p, fs::Permissions::from_mode(0o666)).expect("chmod");
}

fn assert_dev_null_copy(p: &Path) {
    let m = fs::symlink_metadata(p).expect("the node is still there");
    assert!(
        m.file_type().is_char_device(),
        "{p:?} is no longer a char device"
    );
    assert_eq!(
        m.permissions().mode() & 0o7777,
        0o666,
        "mode of {p:?} changed"
    );
    assert_eq!(m.rdev(), libc::makedev(1, 3));
}

/// A `record --force` that failed with exit 1, saying `says`: `old`
/// (old.gdt in `dir`) is as it was seeded, and no temporary is left beside it.
fn assert_failed_keeping_old_file(out: &Output, says: &str, dir: &Path, old: &Path) {
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    assert_stderr_has(out, says);
    assert_eq!(fs::read(old).expect("old file"), b"precious trace");
    assert_eq!(names(dir), vec!["old.gdt"], "no temporary left behind");
}

#[test]
fn record_force_that_fails_to_start_keeps_the_old_file() {
    require_root();
    let dir = shared_dir();
    let old = dir.path().join("old.gdt");
    fs::write(&old, b"precious trace").expect("seed");
    // The user's own trace, as in issue 19.
    std::os::unix::fs::chown(&old, Some(65534), Some(65534)).expect("chown");
    // nobody lacks CAP_BPF: the start fails after the output was prepared.
    let out =
        run(as_nobody()
            .args(["record", "-o"])
            .arg(&old)
            .args(["--force", "--duration", "1s"]));
    assert_failed_keeping_old_file(&out, "missing capability", dir.path(), &old);
}

/// Issue 30: a command that cannot start must not cost the old file
/// (before: old.gdt became a header-only trace).
#[test]
fn record_force_with_a_command_that_cannot_run_keeps_the_old_file() {
    require_root();
    let dir = shared_dir();
    let old = dir.path().join("old.gdt");
    fs::write(&old, b"precious trace").expect("seed");
    let out =
        run(bin()
            .args(["record", "-o"])
            .arg(&old)
            .args(["--force", "--", "/nonexistent/cmd"]));
    assert_failed_keeping_old_file(&out, "cannot run /nonexistent/cmd", dir.path(), &old);
    // A command that starts replaces it, with a whole recording.
    succeeds(
        bin()
            .args(["record", "-o"])
            .arg(&old)
            .args(["--force", "--", "true"]),
    );
    let new = fs::read(&old).expect("new file");
    assert_ne!(new, b"precious trace");
    succeeds(bin().args(["report", "--json"]).arg(&old));
}

#[test]
fn a_device_node_as_output_is_refused_and_left_as_it_was() {
    require_root();
    let dir = shared_dir();
    let node = dir.path().join("null");
    dev_null_copy(&node);
    for force in [false, true] {
        let mut cmd = bin();
        cmd.args(["record", "-o"])
            .arg(&node)
            .args(["--duration", "1s"]);
        if force {
            cmd.arg("--force");
        }
        let out = run(&mut cmd);
        assert_eq!(out.status.code(), Some(1));
        let err = stderr(&out);
        assert!(
            err.contains("character device") && err.contains("--output-special"),
            "{err}"
        );
        assert_dev_null_copy(&node);
    }
    // A start that fails with --output-special: the node stays as well.
    let out = run(as_nobody()
        .args([
            "record",
            "--output-special",
            "--force",
            "--duration",
            "1s",
            "-o",
        ])
        .arg(&node));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_dev_null_copy(&node);
    // Allowed explicitly, a whole recording goes into it, as it is.
    succeeds(
        bin()
            .args(["record", "--output-special", "--duration", "1s", "-o"])
            .arg(&node),
    );
    assert_dev_null_copy(&node);
}

#[test]
fn dev_stdout_is_written_only_with_output_special_and_never_replaced() {
    require_root();
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("via-stdout.gdt");
    // As root, --force used to be able to rename over /dev/stdout itself.
    let out = run(bin().args(["record", "-o", "/dev/stdout", "--force", "--duration", "1s"]));
    assert_eq!(out.status.code(), Some(1));
    assert_stderr_has(&out, "--output-special");
    let m = fs::symlink_metadata("/dev/stdout").expect("lstat /dev/stdout");
    assert!(m.file_type().is_symlink(), "/dev/stdout is still a link");
    // Explicitly: the recording goes to the file the shell opened.
    let out = record_through_stdout(&f);
    assert!(out.status.success(), "{}", stderr(&out));
    succeeds(bin().arg("report").arg(&f));
}

#[test]
fn record_never_follows_or_truncates_a_symlink() {
    require_root();
    let dir = shared_dir();
    let target = dir.path().join("target.gdt");
    fs::write(&target, b"someone else's file").expect("seed");
    fs::set_permissions(&target, fs::Permissions::from_mode(0o666)).expect("chmod");
    let link = dir.path().join("out.gdt");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let unchanged = |why: &str| {
        assert_eq!(
            fs::read(&target).expect("target"),
            b"someone else's file",
            "{why}"
        );
        assert_eq!(
            fs::metadata(&target).expect("stat").permissions().mode() & 0o777,
            0o666,
            "{why}"
        );
    };
    let out = run(bin().args(["record", "--duration", "1s", "-o"]).arg(&link));
    assert_eq!(out.status.code(), Some(1));
    assert_stderr_has(&out, "symbolic link");
    unchanged("without --force");
    let out = run(as_nobody()
        .args(["record", "--force", "--duration", "1s", "-o"])
        .arg(&link));
    assert_eq!(out.status.code(), Some(1));
    unchanged("--force, failed start");
    assert!(fs::symlink_metadata(&link)
        .expect("link")
        .file_type()
        .is_symlink());
    succeeds(
        bin()
            .args(["record", "--force", "--duration", "1s", "-o"])
            .arg(&link),
    );
    unchanged("--force, recorded");
    let m = fs::symlink_metadata(&link).expect("lstat");
    assert!(m.file_type().is_file(), "the link itself was replaced");
    assert_eq!(m.permissions().mode() & 0o777, 0o600);
}

#[test]
fn export_report_html_and_doctor_capture_do_not_overwrite_or_follow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = small_trace();
    let root = doctor_root(dir.path(), "quiet");
    let target = dir.path().join("target");
    let existing = dir.path().join("existing");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let cases: Vec<(&str, Box<OutputCommand<'_>>)> = vec![
        (
            "export -o",
            Box::new(|out: &Path| {
                let mut c = bin();
                c.args(["export", "--format", "jsonl"])
                    .arg(&trace)
                    .arg("-o")
                    .arg(out);
                c
            }),
        ),
        (
            "report --html",
            Box::new(|out: &Path| {
                let mut c = bin();
                c.arg("report").arg(&trace).arg("--html").arg(out);
                c
            }),
        ),
        (
            "doctor --capture",
            Box::new(|out: &Path| {
                let mut c = bin();
                c.args(["doctor", "--root"])
                    .arg(&root)
                    .arg("--capture")
                    .arg(out);
                c
            }),
        ),
    ];
    for (what, cmd) in &cases {
        fs::write(&target, b"target").expect("seed");
        fs::write(&existing, b"existing").expect("seed");
        let out = run(&mut cmd(&existing));
        assert_eq!(out.status.code(), Some(1), "{what}: {}", stderr(&out));
        assert!(stderr(&out).contains("--force"), "{what}: {}", stderr(&out));
        assert_eq!(
            fs::read(&existing).expect("existing"),
            b"existing",
            "{what}"
        );
        let out = run(&mut cmd(&link));
        assert_eq!(out.status.code(), Some(1), "{what}: {}", stderr(&out));
        assert_eq!(fs::read(&target).expect("target"), b"target", "{what}");
        let out = run(cmd(&existing).arg("--force"));
        assert!(out.status.success(), "{what} --force: {}", stderr(&out));
        assert_ne!(
            fs::read(&existing).expect("replaced"),
            b"existing",
            "{what}"
        );
        let mode = fs::metadata(&existing).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{what}");
        // A directory as output: one line, no suggestion of --force.
        let out = run(&mut cmd(dir.path()));
        assert_eq!(out.status.code(), Some(1), "{what}");
        let err = stderr(&out);
        assert!(
            err.contains("is a directory") && !err.contains("--force"),
            "{what}: {err}"
        );
        fs::remove_file(&existing).expect("rm");
    }
    let out = run(bin()
        .args(["record", "--duration", "1s", "-o"])
        .arg(dir.path()));
    let err = stderr(&out);
    assert!(
        err.contains("is a directory") && !err.contains("--force"),
        "{err}"
    );
    assert_eq!(names(dir.path()).len(), 3, "{:?}", names(dir.path()));
}

/// A command line writing to the output path it is given.
type OutputCommand<'a> = dyn Fn(&Path) -> Command + 'a;

/// A minimal captured tree for `doctor --root` whose kernel command line
/// carries `extra`.
pub(crate) fn doctor_root(parent: &Path, extra: &str) -> PathBuf {
    let root = parent.join("root");
    for (p, c) in [
        (
            "proc/cmdline",
            format!("BOOT_IMAGE=/vmlinuz {extra} quiet\n"),
        ),
        ("proc/modules", String::new()),
        ("sys/devices/system/node/node0/cpulist", "0-1\n".into()),
    ] {
        let f = root.join(p);
        fs::create_dir_all(f.parent().expect("parent")).expect("mkdir");
        fs::write(f, c).expect("write");
    }
    fs::create_dir_all(root.join("sys/bus/pci/devices")).expect("mkdir");
    root
}

/// Raw control bytes: ESC, BEL, and C1 CSI (U+009B as UTF-8).
pub(crate) fn has_raw_controls(b: &[u8]) -> bool {
    b.contains(&0x1b) || b.contains(&0x07) || b.windows(2).any(|w| w == [0xc2, 0x9b])
}

#[test]
fn explain_and_doctor_never_write_control_characters_from_their_input() {
    let log = b"[ 1.0] NVRM: Xid (PCI:0000:01:00): 79, pid=4242, name=\x1b]0;owned\x07\xc2\x9b2J, GPU has fallen off the bus.\n\
[ 2.0] DMAR: [DMA Write NO_PASID] Request device [00:03.0] fault addr 0x123000 [fault reason 0x05] PTE Write access is not set \xff\xfe\x1b[31m\n";
    let mut child = bin()
        .args(["explain", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("explain");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(log)
        .expect("feed");
    let out = child.wait_with_output().expect("explain");
    assert!(out.status.success());
    assert!(
        !has_raw_controls(&out.stdout),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\\x1b]0;owned\\x07\\x9b2J"), "{text}");
    // `explain -` no longer refuses the whole input over the bad bytes.
    assert!(text.contains("2 fault(s)"), "{text}");

    let dir = tempfile::tempdir().expect("tempdir");
    let root = doctor_root(dir.path(), "iommu=pt \x1b]0;owned\x07");
    let out = run(bin().args(["doctor", "-v", "--root"]).arg(&root));
    assert!(
        out.status.code().is_some_and(|c| c != 1 && c != 101),
        "{}",
        stderr(&out)
    );
    assert!(
        !has_raw_controls(&out.stdout),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn durations_intervals_and_ring_sizes_are_refused_at_parse_time() {
    let cases: [&[&str]; 5] = [
        &["live", "--duration", "18446744073709551615s"],
        &[
            "record",
            "-o",
            "/nonexistent/x.gdt",
            "--duration",
            "1000000000y",
        ],
        &["live", "--interval", "1ns"],
        &["live", "--ring-size", "4294967295"],
        &["serve", "--ring-size", "2147483649"],
    ];
    for args in cases {
        let out = run(bin().args(args));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            err.contains("too long") || err.contains("too short") || err.contains("at most"),
            "{args:?}: {err}"
        );
    }
}

/// The write end of a pipe whose read end is closed: writes fail with EPIPE.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array we own.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors are ours, each owned once.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(r);
    Stdio::from(w)
}

#[test]
fn a_closed_stderr_never_panics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let existing = dir.path().join("existing.gdt");
    fs::write(&existing, b"x").expect("seed");
    // A truncated copy: reading it ends with a warning on stderr.
    let trace = fs::read(small_trace()).expect("seed trace");
    let cut = dir.path().join("cut.gdt");
    fs::write(&cut, &trace[..trace.len() - 7]).expect("write");
    let html = dir.path().join("r.html");
    let jsonl = dir.path().join("e.jsonl");
    let root = doctor_root(dir.path(), "quiet");
    let tgz = dir.path().join("c.tar.gz");
    let cases: Vec<(Vec<&std::ffi::OsStr>, i32)> = vec![
        // The error line of a refused output (exit 1, not 101).
        (
            vec!["record".as_ref(), "-o".as_ref(), existing.as_os_str()],
            1,
        ),
        (
            vec![
                "export".as_ref(),
                cut.as_os_str(),
                "--format".as_ref(),
                "jsonl".as_ref(),
                "-o".as_ref(),
                jsonl.as_os_str(),
            ],
            0,
        ),
        (
            vec![
                "report".as_ref(),
                cut.as_os_str(),
                "--html".as_ref(),
                html.as_os_str(),
            ],
            0,
        ),
        (
            vec![
                "doctor".as_ref(),
                "--root".as_ref(),
                root.as_os_str(),
                "--capture".as_ref(),
                tgz.as_os_str(),
            ],
            0,
        ),
    ];
    for (args, code) in cases {
        let out = bin()
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(closed_pipe())
            .status()
            .expect("run");
        assert_eq!(out.code(), Some(code), "{args:?}");
    }
}

#[test]
fn the_tracefs_note_says_mounted_but_unreadable() {
    require_root();
    let tracefs = gpudirect_trace::kernel::ensure_tracefs().expect("tracefs as root");
    let mode = fs::metadata(&tracefs).expect("stat").permissions().mode() & 0o777;
    assert_eq!(
        mode & 0o005,
        0,
        "{tracefs:?} is mode {mode:o}, not tracefs' default 0700"
    );
    let out = run(Command::new("setpriv").args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=+bpf,+perfmon",
        "--ambient-caps=+bpf,+perfmon",
        BIN,
        "probes",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}{text}", stderr(&out));
    assert!(text.contains("tracefs is mounted at"), "{text}");
    assert!(
        text.contains("not readable") && !text.contains("not mounted"),
        "{text}"
    );
}
