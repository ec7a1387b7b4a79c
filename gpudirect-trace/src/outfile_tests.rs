use std::{
    fs,
    io::{Read as _, Write as _},
    os::unix::fs::{FileTypeExt as _, PermissionsExt as _},
    path::Path,
};

use super::{create, Options};

const PLAIN: Options = Options {
    force: false,
    allow_special: false,
    binary: false,
    input: None,
};
const FORCE: Options = Options {
    force: true,
    allow_special: false,
    binary: false,
    input: None,
};
const SPECIAL: Options = Options {
    force: false,
    allow_special: true,
    binary: false,
    input: None,
};

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).expect("stat").permissions().mode() & 0o7777
}

#[test]
fn a_new_file_is_private_and_an_existing_one_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("out.gdt");
    let mut o = create(&p, PLAIN).expect("create");
    o.write_all(b"new").expect("write");
    o.commit().expect("commit");
    assert_eq!(mode(&p), 0o600);
    assert_eq!(fs::read(&p).expect("read"), b"new");
    let err = create(&p, PLAIN).expect_err("exists").to_string();
    assert!(err.contains("exists") && err.contains("--force"), "{err}");
    assert_eq!(fs::read(&p).expect("read"), b"new", "untouched");
}

#[test]
fn an_uncommitted_new_file_is_removed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("out.gdt");
    let mut o = create(&p, PLAIN).expect("create");
    o.write_all(b"partial").expect("write");
    drop(o);
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
}

#[test]
fn force_replaces_only_at_commit_and_keeps_the_old_file_otherwise() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("out.gdt");
    fs::write(&p, b"old trace").expect("seed");
    fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).expect("chmod");

    // A start that fails: the old file stays as it was, no temporary left.
    let mut o = create(&p, FORCE).expect("create");
    o.write_all(b"half").expect("write");
    assert_eq!(fs::read(&p).expect("read"), b"old trace");
    drop(o);
    assert_eq!(fs::read(&p).expect("read"), b"old trace");
    assert_eq!(mode(&p), 0o644, "the old file is never chmod-ed");
    assert_eq!(entries(dir.path()), vec!["out.gdt"]);

    // A start that succeeds: the new file takes the name, 0600.
    let o = create(&p, FORCE).expect("create");
    let mut f = o.commit().expect("commit");
    f.write_all(b"new trace").expect("write after commit");
    assert_eq!(fs::read(&p).expect("read"), b"new trace");
    assert_eq!(mode(&p), 0o600);
    assert_eq!(entries(dir.path()), vec!["out.gdt"]);
}

#[test]
fn a_symlink_is_not_followed_and_force_replaces_the_link_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("precious");
    fs::write(&target, b"keep me").expect("seed");
    let link = dir.path().join("out.gdt");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");

    let err = create(&link, PLAIN).expect_err("symlink").to_string();
    assert!(err.contains("symbolic link"), "{err}");
    let mut o = create(&link, FORCE).expect("force");
    o.write_all(b"new").expect("write");
    o.commit().expect("commit");
    assert_eq!(fs::read(&target).expect("target"), b"keep me");
    let m = fs::symlink_metadata(&link).expect("lstat");
    assert!(m.file_type().is_file(), "the link became a file");
    assert_eq!(fs::read(&link).expect("read"), b"new");

    // A dangling link is not created through either.
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).expect("symlink");
    assert!(create(&dangling, PLAIN).is_err());
    assert!(!dir.path().join("nowhere").exists());
}

#[test]
fn a_directory_is_refused_without_suggesting_force() {
    let dir = tempfile::tempdir().expect("tempdir");
    for opts in [PLAIN, FORCE, SPECIAL] {
        let err = create(dir.path(), opts).expect_err("dir").to_string();
        assert!(err.contains("is a directory"), "{err}");
        assert!(!err.contains("--force"), "{err}");
    }
}

#[test]
fn dev_null_is_refused_even_with_force_and_its_mode_kept() {
    let null = Path::new("/dev/null");
    let before = fs::metadata(null).expect("stat").permissions().mode();
    for opts in [PLAIN, FORCE] {
        let err = create(null, opts).expect_err("device").to_string();
        assert!(
            err.contains("character device") && err.contains("--output-special"),
            "{err}"
        );
    }
    // Allowed explicitly: written as it is, never truncated or chmod-ed.
    let mut o = create(null, SPECIAL).expect("special");
    assert!(o.is_special());
    o.write_all(b"discarded").expect("write");
    o.commit().expect("commit");
    let after = fs::metadata(null).expect("stat");
    assert!(after.file_type().is_char_device());
    assert_eq!(after.permissions().mode(), before);
}

#[test]
fn a_fifo_is_refused_unless_allowed_and_then_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("pipe");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("path");
    // SAFETY: mkfifo reads a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let err = create(&fifo, FORCE).expect_err("fifo").to_string();
    assert!(err.contains("a FIFO"), "{err}");
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut s = String::new();
            fs::File::open(fifo)
                .expect("open for reading")
                .read_to_string(&mut s)
                .expect("read");
            s
        })
    };
    let mut o = create(&fifo, SPECIAL).expect("special");
    o.write_all(b"through the pipe").expect("write");
    drop(o.commit().expect("commit"));
    assert_eq!(reader.join().expect("reader"), "through the pipe");
    assert!(fs::symlink_metadata(&fifo)
        .expect("lstat")
        .file_type()
        .is_fifo());
}

#[test]
fn a_special_file_behind_a_link_is_allowed_explicitly() {
    // /dev/stdout is such a link (to /proc/self/fd/1) on Linux.
    let dir = tempfile::tempdir().expect("tempdir");
    let link = dir.path().join("null-link");
    std::os::unix::fs::symlink("/dev/null", &link).expect("symlink");
    assert!(create(&link, PLAIN).is_err());
    // --force never replaces a link to a device (as root, that would have
    // been /dev/stdout itself).
    let err = create(&link, FORCE)
        .expect_err("link to a device")
        .to_string();
    assert!(
        err.contains("character device") && err.contains("--output-special"),
        "{err}"
    );
    assert!(fs::symlink_metadata(&link)
        .expect("lstat")
        .file_type()
        .is_symlink());
    let o = create(&link, SPECIAL).expect("special through a link");
    assert!(o.is_special());
    assert!(fs::symlink_metadata(&link)
        .expect("lstat")
        .file_type()
        .is_symlink());
}

#[test]
fn a_missing_directory_is_one_clear_error() {
    let err = create(Path::new("/nonexistent-dir/x.gdt"), FORCE)
        .expect_err("no dir")
        .to_string();
    assert!(
        err.contains("cannot create /nonexistent-dir/x.gdt"),
        "{err}"
    );
}

#[test]
fn dev_stdout_is_this_process_descriptor_when_allowed_and_never_replaced() {
    for opts in [PLAIN, FORCE] {
        let err = create(Path::new("/dev/stdout"), opts)
            .expect_err("needs the flag")
            .to_string();
        assert!(
            err.contains("descriptor 1") && err.contains("--output-special"),
            "{err}"
        );
        assert!(!err.contains("--force"), "{err}");
    }
    assert!(fs::symlink_metadata("/dev/stdout")
        .expect("lstat")
        .file_type()
        .is_symlink());
    // A duplicate of our own descriptor 2 (the test harness' stderr).
    let o = create(Path::new("/dev/fd/2"), SPECIAL).expect("own descriptor");
    assert!(o.is_special());
    let o = create(Path::new("/proc/self/fd/987654"), SPECIAL);
    assert!(o.is_err(), "a descriptor that is not open");
}

#[test]
fn the_input_is_never_the_output_whatever_its_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.gdt");
    fs::write(&input, b"recording").expect("seed");
    let link = dir.path().join("link.gdt");
    std::os::unix::fs::symlink(&input, &link).expect("symlink");
    let hard = dir.path().join("hard.gdt");
    fs::hard_link(&input, &hard).expect("hard link");
    let other = dir.path().join("other.gdt");
    fs::write(&other, b"other").expect("seed");
    let same = dir.path().join(".").join("in.gdt");
    for reading in [&input, &link] {
        let opts = FORCE.reading(reading);
        for out in [&input, &link, &hard, &same] {
            let e = create(out, opts).expect_err("the input").to_string();
            assert!(e.contains("is the file being read"), "{out:?}: {e}");
        }
        create(&other, opts)
            .expect("another file")
            .commit()
            .expect("commit");
    }
    assert_eq!(fs::read(&input).expect("input"), b"recording");
}

#[test]
fn a_file_being_written_is_not_replaced_by_a_second_writer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("rec.gdt");
    let mut first = create(&p, PLAIN).expect("first").commit().expect("commit");
    first.write_all(b"first recorder").expect("write");
    let e = create(&p, FORCE).expect_err("locked").to_string();
    assert!(e.contains("being written by another process"), "{e}");
    // Locked between the second writer's start and its commit: refused
    // then, the first file kept.
    drop(first);
    let second = create(&p, FORCE).expect("no writer now");
    let third = create(&p, PLAIN);
    assert!(third.is_err());
    let holder = fs::File::open(&p).expect("open");
    rustix::fs::flock(&holder, rustix::fs::FlockOperation::LockExclusive).expect("lock");
    let e = second.commit().expect_err("locked at commit").to_string();
    assert!(e.contains("being written by another process"), "{e}");
    assert_eq!(fs::read(&p).expect("kept"), b"first recorder");
    assert_eq!(entries(dir.path()), ["rec.gdt"], "no temporary left");
}
