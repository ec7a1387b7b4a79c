//! Hostile use, round 2 (issue 30): the flight recorder's directory. One
//! that is a symlink, another user's or writable by others is refused with
//! its reason; the disk budget deletes only the snapshots the recorder
//! wrote (a planted sparse 100 GB file named like one, another user's file,
//! stay); a snapshot that fails on a full disk leaves no temporary file.
//!
//! `cargo test -p gpudirect-trace --test host hostile_snapdir` (as root).

use std::{
    fs,
    net::SocketAddr,
    os::unix::fs::{MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    process::Child,
    time::{Duration, Instant},
};

use crate::{
    hostile::{bin, run, stderr},
    hostile_bounds::{spawn_quiet, try_get},
    hostile_capture::Tmpfs,
    hostile_outputs::{spawn_record, wait_for},
    require_root,
};

/// Snapshot names in `dir` (what the recorder may have written).
fn snapshots(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("gdt-") && !n.contains("-planted-"))
        .collect();
    v.sort();
    v
}

fn poll(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_snapshot_dir_that_is_a_link_shared_or_another_users_is_refused() {
    require_root();
    let top = tempfile::tempdir().expect("tempdir");
    let dir = |name: &str, mode: u32, uid: u32| -> PathBuf {
        let p = top.path().join(name);
        fs::create_dir(&p).expect("mkdir");
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).expect("chmod");
        std::os::unix::fs::chown(&p, Some(uid), None).expect("chown");
        p
    };
    let dangling = top.path().join("dangling");
    std::os::unix::fs::symlink(top.path().join("nowhere"), &dangling).expect("symlink");
    let good = dir("good", 0o700, 0);
    let to_good = top.path().join("to-good");
    std::os::unix::fs::symlink(&good, &to_good).expect("symlink");
    let cases = [
        (
            dir("world", 0o777, 0),
            "writable by its group and all users",
        ),
        (
            dir("sticky", 0o1777, 0),
            "writable by its group and all users",
        ),
        (dir("others", 0o703, 0), "writable by all users"),
        (dir("group", 0o770, 0), "writable by its group"),
        (dir("nobodys", 0o700, 65534), "belongs to uid 65534"),
        (dangling, "which does not exist"),
        (to_good, "is a symbolic link"),
    ];
    for (path, says) in &cases {
        for mut cmd in [
            {
                let mut c = bin();
                c.args(["record", "--ring", "5s", "--duration", "1s", "-o"])
                    .arg(path);
                c
            },
            {
                let mut c = bin();
                c.args(["serve", "--listen", "127.0.0.1:1", "--ring", "5s"])
                    .arg("--snapshot-dir")
                    .arg(path);
                c
            },
        ] {
            let started = Instant::now();
            let out = run(&mut cmd);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{path:?}: {err}");
            assert!(err.contains(says), "{path:?}: {err}");
            assert!(!err.contains("os error 17"), "{path:?}: {err}");
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "refused at once"
            );
        }
    }
    assert!(
        !top.path().join("nowhere").exists(),
        "no directory made behind a link"
    );
}

fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    l.local_addr().expect("addr")
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
}

#[test]
fn the_budget_deletes_only_the_snapshots_the_recorder_wrote() {
    require_root();
    let top = tempfile::tempdir().expect("tempdir");
    let dir = top.path().join("snaps");
    fs::create_dir(&dir).expect("mkdir");
    // Older than anything the recorder writes, named like snapshots: a
    // sparse 100 GB file of another user, and a file of ours it did not
    // write.
    let sparse = dir.join("gdt-20000101T000000Z-planted-sparse.gdt");
    fs::File::create(&sparse)
        .expect("create")
        .set_len(100 << 30)
        .expect("sparse");
    std::os::unix::fs::chown(&sparse, Some(65534), Some(65534)).expect("chown");
    let stray = dir.join("gdt-20000101T000001Z-planted-stray.gdt");
    fs::write(&stray, vec![7u8; 64 << 10]).expect("write");
    let addr = free_addr();
    let mut serve = spawn_quiet(
        bin()
            .args(["serve", "--listen", &addr.to_string()])
            .args(["--ring", "30s", "--trigger", "signal", "--after", "1s"])
            .args(["--min-spacing", "0s", "--snapshot-max-bytes", "1"])
            .arg("--snapshot-dir")
            .arg(&dir),
    );
    poll("serve's /healthz", || {
        try_get(addr, "/healthz").is_some_and(|(s, _)| s == 200)
    });
    signal(&serve, libc::SIGUSR1);
    poll("the first snapshot", || snapshots(&dir).len() == 1);
    let first = snapshots(&dir);
    // A second one: the budget (1 byte) then holds only the newest.
    std::thread::sleep(Duration::from_millis(1100));
    signal(&serve, libc::SIGUSR1);
    poll("the second snapshot, the first deleted", || {
        let now = snapshots(&dir);
        now.len() == 1 && now != first
    });
    signal(&serve, libc::SIGTERM);
    assert!(serve.wait().expect("serve").success());
    let m = fs::metadata(&sparse).expect("the sparse file stays");
    assert_eq!((m.len(), m.uid()), (100 << 30, 65534));
    assert_eq!(
        fs::read(&stray).expect("the stray file stays").len(),
        64 << 10
    );
    let index = fs::read_to_string(dir.join(".gdt-snapshots")).expect("index");
    assert!(!index.contains("planted"), "{index}");
    assert_eq!(
        fs::metadata(dir.join(".gdt-snapshots"))
            .expect("index")
            .mode()
            & 0o777,
        0o600
    );
}

#[test]
fn a_snapshot_that_fails_on_a_full_disk_leaves_no_temporary_file() {
    let disk = Tmpfs::mount("size=512k,mode=0700");
    let dir = disk.path().join("snaps");
    let (mut child, rx) = spawn_record(&[
        "--ring".as_ref(),
        "30s".as_ref(),
        "--trigger".as_ref(),
        "signal".as_ref(),
        "--after".as_ref(),
        "1s".as_ref(),
        "--duration".as_ref(),
        "5s".as_ref(),
        "-o".as_ref(),
        dir.as_os_str(),
    ]);
    let mut seen = Vec::new();
    wait_for(&rx, "probes attached", &mut seen);
    // No room left at all: the snapshot's first write fails.
    let mut f = fs::File::create(disk.path().join("filler")).expect("filler");
    while std::io::Write::write_all(&mut f, &[0u8; 4096]).is_ok() {}
    drop(f);
    signal(&child, libc::SIGUSR1);
    assert!(child.wait().expect("record").success(), "{seen:?}");
    seen.extend(rx.iter());
    let err = seen.join("\n");
    let left: Vec<String> = fs::read_dir(&dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !left.iter().any(|n| n.contains(".tmp-")),
        "a temporary file is left: {left:?}\n{err}"
    );
    assert!(err.contains("1 failed"), "{err}");
}
