//! The confinement, by both methods (openat2 and the walk used where the
//! kernel has none), on links a capture's author may plant.

use std::{fs, io::Read as _, os::unix::fs::symlink, path::Path};

use super::{Method, Refusal, Root, MAX_LINKS};

const METHODS: [Method; 2] = [Method::Openat2, Method::Walk];

/// A capture in `dir/cap` with every kind of link, and a secret beside it.
fn planted(dir: &Path) -> std::path::PathBuf {
    let cap = dir.join("cap");
    fs::create_dir_all(cap.join("proc/driver/nvidia")).expect("mkdir");
    fs::create_dir_all(cap.join("sys/a/b")).expect("mkdir");
    fs::write(dir.join("secret"), "SECRET\n").expect("secret");
    fs::write(cap.join("sys/a/b/real"), "inside\n").expect("write");
    let l = |target: &str, at: &str| symlink(target, cap.join(at)).expect("symlink");
    // Inside: relative links that stay in, a `..` that stays in.
    l("b/real", "sys/a/inner");
    l("../../a/b/real", "sys/a/b/sibling");
    // Out: absolute, relative climbing above the root, through a directory.
    l("/etc/passwd", "proc/driver/nvidia/version");
    l("../../../../secret", "proc/driver/nvidia/params");
    l("../..", "sys/a/up");
    l("/dev/zero", "sys/a/zero");
    // A loop, and chains just within and just past the limit.
    l("loop2", "sys/loop1");
    l("loop1", "sys/loop2");
    for i in 0..=MAX_LINKS {
        let target = if i == 0 {
            "a/b/real".to_owned()
        } else {
            format!("c{}", i - 1)
        };
        l(&target, &format!("sys/c{i}"));
    }
    cap
}

fn refusal(r: std::io::Result<impl std::fmt::Debug>) -> Refusal {
    let e = r.expect_err("must be refused");
    Refusal::of(&e)
        .unwrap_or_else(|| panic!("not a refusal: {e}"))
        .clone()
}

#[test]
fn links_inside_are_followed_and_links_out_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Root::open(&planted(dir.path())).expect("root");
    for m in METHODS {
        let read = |rel: &str| -> std::io::Result<String> {
            let fd = root.resolve_with(m, Path::new(rel), false)?;
            let mut s = String::new();
            fs::File::open(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&fd)
            ))?
            .read_to_string(&mut s)?;
            Ok(s)
        };
        for ok in [
            "sys/a/b/real",
            "sys/a/inner",
            "sys/a/b/sibling",
            "sys/a/b/../b/real",
            "sys/a/up/sys/a/b/real",
        ] {
            // `up` is ../.. from sys/a: the root itself, still inside.
            assert_eq!(read(ok).expect(ok), "inside\n", "{m:?} {ok}");
        }
        for out in [
            "proc/driver/nvidia/version",
            "proc/driver/nvidia/params",
            "sys/a/zero",
            "sys/a/up/..",
            "../secret",
            "sys/../../secret",
        ] {
            assert_eq!(
                refusal(root.resolve_with(m, Path::new(out), false)),
                Refusal::Escapes,
                "{m:?} {out}"
            );
        }
        // The link itself may be looked at, not followed.
        assert!(root
            .resolve_with(m, Path::new("proc/driver/nvidia/version"), true)
            .is_ok());
        assert_eq!(
            refusal(root.resolve_with(m, Path::new("sys/loop1"), false)),
            Refusal::LinkChain,
            "{m:?}"
        );
        let within = format!("sys/c{}", MAX_LINKS - 1);
        assert_eq!(read(&within).expect("40 links"), "inside\n", "{m:?}");
        let past = format!("sys/c{MAX_LINKS}");
        assert_eq!(
            refusal(root.resolve_with(m, Path::new(&past), false)),
            Refusal::LinkChain,
            "{m:?}"
        );
    }
}

#[test]
fn only_regular_files_are_opened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cap = planted(dir.path());
    let fifo = cap.join("sys/fifo");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("path");
    // SAFETY: mkfifo reads a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let root = Root::open(&cap).expect("root");
    // A FIFO with no writer: refused at once, never opened (it would block).
    assert_eq!(
        refusal(root.open_file(Path::new("sys/fifo"))),
        Refusal::NotRegular("a FIFO")
    );
    assert_eq!(
        refusal(root.open_file(Path::new("sys/a"))),
        Refusal::NotRegular("a directory")
    );
    let (mut f, size) = root.open_file(Path::new("sys/a/inner")).expect("file");
    assert_eq!(size, 7);
    let mut s = String::new();
    f.read_to_string(&mut s).expect("read");
    assert_eq!(s, "inside\n");
    let mut names = root.list(Path::new("sys/a"), 100).expect("list");
    names.sort();
    assert_eq!(names, ["b", "inner", "up", "zero"]);
    assert!(matches!(
        refusal(root.list(Path::new("sys"), 3)),
        Refusal::TooManyEntries { limit: 3 }
    ));
    // A listing through a link out of the root is refused like a read.
    assert_eq!(
        refusal(root.list(Path::new("sys/a/up/.."), 100)),
        Refusal::Escapes
    );
    assert_eq!(
        root.read_link(Path::new("proc/driver/nvidia/version"))
            .expect("readlink"),
        Some("/etc/passwd".into())
    );
    assert_eq!(
        root.read_link(Path::new("sys/a/b/real")).expect("file"),
        None
    );
}
