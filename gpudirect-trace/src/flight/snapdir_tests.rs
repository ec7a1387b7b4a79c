//! The snapshot directory's rules: a private directory, and a budget that
//! counts and deletes only the snapshots this tool wrote, by blocks used.

use std::{
    fs,
    os::unix::fs::{symlink, MetadataExt as _, PermissionsExt as _},
    path::Path,
};

use super::{enforce, enforce_budget, prepare_dir, read_index, Retention, INDEX};
use crate::flight::snapshot::SnapshotFile;

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A prepared, empty snapshot directory in a fresh tempdir (kept by the
/// caller).
fn snapshot_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let top = tempfile::tempdir().expect("tempdir");
    let dir = top.path().join("snaps");
    prepare_dir(&dir).expect("dir");
    (top, dir)
}

#[test]
fn a_link_or_a_directory_others_can_write_is_refused_with_its_name() {
    let top = tempfile::tempdir().expect("tempdir");
    let link = top.path().join("snaps");
    symlink(top.path().join("gone"), &link).expect("symlink");
    let e = prepare_dir(&link).expect_err("dangling link").to_string();
    assert!(
        e.contains("is a symbolic link") && e.contains("gone, which does not exist"),
        "{e}"
    );
    assert!(!e.contains("os error 17"), "{e}");
    fs::create_dir(top.path().join("gone")).expect("mkdir");
    let e = prepare_dir(&link).expect_err("link to a dir").to_string();
    assert!(e.contains("is a symbolic link"), "{e}");
    let shared = top.path().join("shared");
    fs::create_dir(&shared).expect("mkdir");
    for (mode, who) in [
        (0o1777, "its group and all users"),
        (0o757, "all users"),
        (0o770, "its group"),
    ] {
        chmod(&shared, mode);
        let e = prepare_dir(&shared)
            .expect_err("writable by others")
            .to_string();
        assert!(e.contains(&format!("writable by {who}")), "{mode:o}: {e}");
    }
    chmod(&shared, 0o755);
    prepare_dir(&shared).expect("only ours to write");
    let fresh = top.path().join("a/b");
    prepare_dir(&fresh).expect("created");
    assert_eq!(fs::metadata(&fresh).expect("stat").mode() & 0o777, 0o700);
}

/// A snapshot of `len` bytes of data, written as the recorder writes one.
fn snapshot(dir: &Path, name: &str, len: usize) -> std::path::PathBuf {
    let mut s = SnapshotFile::create(dir, name.into()).expect("create");
    s.write(&vec![0xa5; len]).expect("write");
    s.commit().expect("commit").0
}

#[test]
fn the_budget_counts_and_deletes_only_our_snapshots_by_blocks_used() {
    let (top, dir) = snapshot_dir();
    let a = snapshot(&dir, "gdt-20261201T000001Z-h-a.gdt", 100 << 10);
    let b = snapshot(&dir, "gdt-20261201T000002Z-h-b.gdt", 100 << 10);
    let c = snapshot(&dir, "gdt-20261201T000003Z-h-c.gdt", 100 << 10);
    assert_eq!(read_index(&dir).expect("index").len(), 3);
    let index_mode = fs::metadata(dir.join(INDEX)).expect("index").mode() & 0o777;
    assert_eq!(index_mode, 0o600);
    // Named like snapshots, older than all of ours, not ours: a sparse
    // 100 GB file, a link to a file outside, a file put in place of one of
    // ours (another inode under its name).
    let sparse = dir.join("gdt-20000101T000000Z-x-sparse.gdt");
    fs::File::create(&sparse)
        .expect("create")
        .set_len(100 << 30)
        .expect("sparse");
    let outside = top.path().join("precious");
    fs::write(&outside, vec![1u8; 300 << 10]).expect("write");
    let link = dir.join("gdt-20000101T000001Z-x-link.gdt");
    symlink(&outside, &link).expect("symlink");
    fs::remove_file(&a).expect("rm");
    fs::write(&a, vec![2u8; 300 << 10]).expect("replace");
    // b and c use ~200 KiB: within 250 KiB, nothing goes.
    let gone = enforce_budget(&dir, 250 << 10, &c).expect("budget");
    assert!(gone.is_empty(), "{gone:?}");
    // Within 150 KiB: the oldest of ours (b) goes, c is kept.
    let gone = enforce_budget(&dir, 150 << 10, &c).expect("budget");
    assert_eq!(gone, [b]);
    // Even with no room at all, the snapshot just written stays.
    assert!(enforce_budget(&dir, 0, &c).expect("budget").is_empty());
    for p in [&sparse, &link, &a, &c, &outside] {
        assert!(fs::symlink_metadata(p).is_ok(), "{p:?} was deleted");
    }
    assert_eq!(fs::read(&outside).expect("outside").len(), 300 << 10);
    // The replaced one left the index: it is not ours any more.
    let names: Vec<String> = read_index(&dir)
        .expect("index")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["gdt-20261201T000003Z-h-c.gdt"]);
}

#[test]
fn an_index_that_is_not_ours_alone_deletes_nothing() {
    let (top, dir) = snapshot_dir();
    let a = snapshot(&dir, "gdt-20261201T000001Z-h-a.gdt", 10 << 10);
    let b = snapshot(&dir, "gdt-20261201T000002Z-h-b.gdt", 10 << 10);
    chmod(&dir.join(INDEX), 0o644);
    let e = enforce_budget(&dir, 0, &b).expect_err("untrusted index");
    assert!(e.to_string().contains("not trusted"), "{e}");
    assert!(a.exists() && b.exists());
    // An index that is a link is not followed.
    fs::remove_file(dir.join(INDEX)).expect("rm");
    let elsewhere = top.path().join("elsewhere");
    fs::write(&elsewhere, "1 1 gdt-x.gdt\n").expect("write");
    symlink(&elsewhere, dir.join(INDEX)).expect("symlink");
    assert!(enforce_budget(&dir, 0, &b).is_err());
    assert!(a.exists() && b.exists());
}

#[test]
fn a_restarted_recorder_counts_its_predecessors_snapshots() {
    let (_top, dir) = snapshot_dir();
    let old = snapshot(&dir, "gdt-20261201T000001Z-h-a.gdt", 64 << 10);
    // A new process: nothing but the directory carries over.
    prepare_dir(&dir).expect("again");
    let new = snapshot(&dir, "gdt-20261202T000001Z-h-b.gdt", 64 << 10);
    let gone = enforce_budget(&dir, 80 << 10, &new).expect("budget");
    assert_eq!(gone, [old]);
}

/// Issue 29: a fleet node keeps its snapshots for a bounded count and age
/// too; each deletion says which bound it was over.
#[test]
fn count_and_age_bounds_delete_the_oldest_of_ours_and_say_why() {
    use std::time::{Duration, SystemTime};
    let (_top, dir) = snapshot_dir();
    let names = [
        "gdt-20261201T000001Z-h-a.gdt",
        "gdt-20261201T000002Z-h-b.gdt",
        "gdt-20261201T000003Z-h-c.gdt",
        "gdt-20261201T000004Z-h-d.gdt",
    ];
    let paths: Vec<_> = names.iter().map(|n| snapshot(&dir, n, 4 << 10)).collect();
    // Another user's file named like the oldest snapshot: never counted.
    let stranger = dir.join("gdt-20000101T000000Z-x-stranger.gdt");
    fs::write(&stranger, b"not ours").expect("write");
    let now = SystemTime::now();
    let count = Retention {
        max_count: Some(2),
        ..Retention::default()
    };
    let gone = enforce(&dir, &count, Some(&paths[3]), now).expect("count");
    let gone_paths: Vec<_> = gone.iter().map(|d| d.path.clone()).collect();
    assert_eq!(gone_paths, [paths[0].clone(), paths[1].clone()]);
    assert!(
        gone.iter().all(|d| d.why == "more than 2 snapshots"),
        "{gone:?}"
    );
    // Age: two hours on, c and d are older than an hour; d, just written,
    // stays (a changed mtime would change the ctime: no longer ours).
    let later = now + Duration::from_secs(7200);
    let age = Retention {
        max_age: Some(Duration::from_secs(3600)),
        ..Retention::default()
    };
    let gone = enforce(&dir, &age, Some(&paths[3]), later).expect("age");
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert_eq!(gone[0].path, paths[2]);
    assert_eq!(gone[0].why, "older than 1h");
    assert!(paths[3].exists() && stranger.exists());
    // Nothing set: nothing goes.
    assert!(enforce(&dir, &Retention::default(), None, now)
        .expect("none")
        .is_empty());
}
