//! Hostile input, round 2 (issue 30): a capture is untrusted input.
//! `doctor --root` and `--capture` never read outside the capture's root
//! (links out of it, to /dev/zero, FIFOs, link chains), and every read of
//! a capture or a `--baseline` is bounded.
//!
//! "Never read" is proven two ways: a sentinel file outside the capture,
//! which every link points at, whose content must appear in no output and
//! no archive; and its access time, on a tmpfs mounted `strictatime` (every
//! read(2) moves it; a control file read by the test shows that it does).
//!
//! `cargo test -p gpudirect-trace --test host hostile_capture` (as root:
//! it mounts tmpfs).

use std::{
    fs,
    io::Read as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, SystemTime},
};

use crate::{
    hostile::{assert_stderr_has, bin, run, stderr},
    hostile_bounds::{peak_rss, spawn_quiet, spawn_with_stderr, RSS_BOUND_KIB},
    require_root,
};

/// A tmpfs mounted for one test, unmounted when dropped.
pub(crate) struct Tmpfs {
    pub dir: tempfile::TempDir,
}

impl Tmpfs {
    pub(crate) fn mount(options: &str) -> Self {
        require_root();
        let dir = tempfile::tempdir().expect("tempdir");
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "gdt-test"])
            .arg(dir.path())
            .status()
            .expect("mount");
        assert!(st.success(), "mount -t tmpfs -o {options}");
        Self { dir }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().expect("utf-8")).expect("path");
    // SAFETY: mkfifo reads a NUL-terminated path we own.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {p:?}"
    );
}

fn put(root: &Path, rel: &str, content: impl AsRef<[u8]>) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    fs::write(p, content).expect("write");
}

fn link(root: &Path, rel: &str, target: impl AsRef<Path>) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::os::unix::fs::symlink(target, p).expect("symlink");
}

/// A capture of a host with one NVIDIA GPU (so the driver's files are
/// read) in which the files doctor reads lead out of it every way there is.
fn hostile_capture(root: &Path, sentinel: &Path) {
    const BDF: &str = "0000:01:00.0";
    let dev = format!("sys/bus/pci/devices/{BDF}");
    put(
        root,
        &format!("{dev}.link"),
        format!("../../../devices/pci0000:00/0000:00:01.0/{BDF}\n"),
    );
    put(root, &format!("{dev}/class"), "0x030200\n");
    put(root, &format!("{dev}/vendor"), "0x10de\n");
    put(root, &format!("{dev}/device"), "0x2335\n");
    put(root, "sys/devices/system/node/node0/cpulist", "0-7\n");
    // Absolute, relative climbing out, through a chain inside that ends
    // outside, to a device, to a FIFO, a chain past the kernel's 40.
    link(root, "proc/driver/nvidia/version", sentinel);
    link(root, "proc/driver/nvidia/params", "../../../../sentinel");
    link(root, "proc/cmdline", "hop1");
    link(root, "proc/hop1", "hop2");
    link(root, "proc/hop2", "../sys/hop3");
    link(root, "sys/hop3", "../../sentinel");
    link(root, &format!("{dev}/config"), sentinel);
    link(root, "nvml.json", sentinel);
    link(root, "proc/modules", "/dev/zero");
    link(root, "pci-device-paths.txt", "/dev/urandom");
    mkfifo(&root.join("dmesg.txt"));
    for i in 0..50 {
        let target = if i == 0 {
            "../sentinel".to_owned()
        } else {
            format!("chain{}", i - 1)
        };
        link(root, &format!("chain{i}"), target);
    }
    link(root, "nvidia-smi-q.txt", "chain49");
    // A directory of the capture that is a link out of it.
    link(
        root,
        "sys/kernel/iommu_groups",
        Path::new(sentinel).parent().expect("dir"),
    );
    // The sentinel's own directory holds it as `sentinel` (for the
    // relative links above: the capture is `dir/cap`).
}

/// An access time far in the past (relatime would move it too).
fn age(p: &Path) -> SystemTime {
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(946_684_800);
    let f = fs::File::options().write(true).open(p).expect("open");
    f.set_times(fs::FileTimes::new().set_accessed(old).set_modified(old))
        .expect("set times");
    old
}

fn atime(p: &Path) -> SystemTime {
    fs::metadata(p).expect("stat").accessed().expect("atime")
}

#[test]
fn doctor_never_reads_or_copies_what_a_capture_links_to_outside_it() {
    let fs_ = Tmpfs::mount("size=16m,strictatime");
    let secret = format!(
        "GDT-SENTINEL-{}-{:?}",
        std::process::id(),
        SystemTime::now()
    );
    let sentinel = fs_.path().join("sentinel");
    fs::write(&sentinel, format!("{secret}\n")).expect("sentinel");
    let control = fs_.path().join("control");
    fs::write(&control, "control\n").expect("control");
    let cap = fs_.path().join("cap");
    hostile_capture(&cap, &sentinel);
    let (t_sentinel, t_control) = (age(&sentinel), age(&control));
    // The method sees a read: the control file's atime moves.
    fs::read(&control).expect("read control");
    assert_ne!(atime(&control), t_control, "strictatime tmpfs shows reads");

    let out_dir = tempfile::tempdir().expect("tempdir");
    let tgz = out_dir.path().join("c.tar.gz");
    let mut outputs: Vec<(String, Vec<u8>)> = Vec::new();
    for args in [
        vec!["-v"],
        vec!["--json"],
        vec!["--capture", tgz.to_str().expect("utf-8")],
    ] {
        let started = std::time::Instant::now();
        let out = run(bin().args(["doctor", "--root"]).arg(&cap).args(&args));
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{args:?}: no FIFO or device blocks it"
        );
        assert!(
            matches!(out.status.code(), Some(0 | 2)),
            "{args:?}: {}",
            stderr(&out)
        );
        outputs.push((format!("{args:?} stdout"), out.stdout));
        outputs.push((format!("{args:?} stderr"), out.stderr));
    }
    let mut unpacked = Vec::new();
    flate2::read::GzDecoder::new(fs::File::open(&tgz).expect("archive"))
        .read_to_end(&mut unpacked)
        .expect("gunzip");
    outputs.push(("the archive".into(), unpacked));
    for (what, bytes) in &outputs {
        assert!(
            !String::from_utf8_lossy(bytes).contains(&secret),
            "{what} holds the sentinel's content"
        );
    }
    assert_eq!(atime(&sentinel), t_sentinel, "the sentinel was read");
    let text = String::from_utf8_lossy(&outputs[0].1);
    for refused in [
        "/proc/driver/nvidia/version: a symbolic link",
        "/proc/driver/nvidia/params: a symbolic link",
        "/dmesg.txt: a FIFO",
    ] {
        assert!(text.contains(refused), "{refused}: {text}");
    }
    // The archive says what it left out.
    let list = Command::new("tar")
        .args(["-xzOf"])
        .arg(&tgz)
        .arg("capture-errors.txt")
        .output()
        .expect("tar");
    let errors = String::from_utf8_lossy(&list.stdout);
    for p in [
        "/proc/cmdline",
        "/proc/modules",
        "/nvidia-smi-q.txt",
        "/nvml.json",
    ] {
        assert!(errors.contains(p), "{p}: {errors}");
    }
    assert!(errors.contains("more than 40 symbolic links"), "{errors}");
    // The archive itself as --root: read as the tree it was taken from
    // (its GPU), named as given, and its unpacked copy gone afterwards (a
    // TMPDIR of the test's own shows it).
    let tmp = tempfile::tempdir().expect("tempdir");
    let again = run(bin()
        .args(["doctor", "-v", "--root"])
        .arg(&tgz)
        .env("TMPDIR", tmp.path()));
    assert!(
        matches!(again.status.code(), Some(0 | 2)),
        "{}",
        stderr(&again)
    );
    let text = String::from_utf8_lossy(&again.stdout);
    let head = format!("gpudirect-trace doctor: {}\n", tgz.display());
    assert!(text.starts_with(&head), "{text}");
    assert!(text.contains("[10de:2335] (0000:01:00.0)"), "{text}");
    assert!(!text.contains(&secret), "the sentinel's content");
    let left: Vec<_> = fs::read_dir(tmp.path()).expect("TMPDIR").collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}

/// A writer thread feeding `fifo` for ever (until the reader goes).
fn endless_fifo(fifo: PathBuf) {
    mkfifo(&fifo);
    std::thread::spawn(move || {
        let Ok(mut f) = fs::OpenOptions::new().write(true).open(&fifo) else {
            return;
        };
        let chunk = vec![b'x'; 1 << 16];
        while std::io::Write::write_all(&mut f, &chunk).is_ok() {}
    });
}

#[test]
fn baseline_refuses_devices_fifos_and_archives_that_expand_without_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo.json");
    endless_fifo(fifo.clone());
    for (path, says) in [
        (
            PathBuf::from("/dev/zero"),
            "a character device, not a capture",
        ),
        (fifo, "a FIFO, not a capture"),
    ] {
        let out = run(bin().args(["doctor", "--baseline"]).arg(&path));
        assert_eq!(out.status.code(), Some(1), "{path:?}");
        assert!(stderr(&out).contains(says), "{path:?}: {}", stderr(&out));
    }
    // A 300 MiB member in ~1.3 MB: refused at 256 MiB, in bounded memory.
    let bomb = dir.path().join("bomb.tar.gz");
    let mut header = tar::Header::new_gnu();
    header.set_path("filler").expect("path");
    header.set_size(300 << 20);
    header.set_cksum();
    fs::write(dir.path().join("hdr"), header.as_bytes()).expect("header");
    let st = Command::new("sh")
        .arg("-c")
        .arg("{ cat hdr; head -c 314572800 /dev/zero; } | gzip -1 > bomb.tar.gz")
        .current_dir(dir.path())
        .status()
        .expect("gzip");
    assert!(st.success());
    let child = spawn_with_stderr(
        bin().args(["doctor", "--baseline"]).arg(&bomb),
        Stdio::piped(),
    );
    let (kib, running) = peak_rss(child, Duration::from_secs(60));
    assert!(!running, "doctor --baseline on a gzip bomb ends");
    assert!(kib < RSS_BOUND_KIB, "{kib} KiB");
    let out = run(bin().args(["doctor", "--baseline"]).arg(&bomb));
    assert_stderr_has(&out, "expands past 256 MiB");
}

#[test]
fn doctor_on_a_capture_of_files_at_the_limits_stays_bounded() {
    // Every file doctor reads made as large as a file may be (16 MiB,
    // sparse: cheap here, zeros and text to the reader), and more of them
    // than the capture's budget allows.
    let dir = tempfile::tempdir().expect("tempdir");
    let cap = dir.path().join("cap");
    put(&cap, "sys/bus/pci/devices/.keep", "");
    let line = "[ 1.0] NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.\n";
    let text = line.repeat((16 << 20) / line.len());
    for f in [
        "dmesg.txt",
        "nvidia-smi-q.txt",
        "nvidia-smi-topo-m.txt",
        "proc/cmdline",
    ] {
        put(&cap, f, &text);
    }
    for f in ["proc/modules", "nvml.json", "proc/interrupts"] {
        let p = cap.join(f);
        fs::File::create(&p)
            .expect("create")
            .set_len(16 << 20)
            .expect("len");
    }
    let big = cap.join("proc/driver/nvidia/version");
    fs::create_dir_all(big.parent().expect("dir")).expect("mkdir");
    fs::File::create(&big)
        .expect("create")
        .set_len(1 << 40)
        .expect("1 TiB sparse");
    for args in [vec!["-v"], vec!["--json"]] {
        let child = spawn_quiet(bin().args(["doctor", "--root"]).arg(&cap).args(&args));
        let (kib, running) = peak_rss(child, Duration::from_secs(120));
        assert!(!running, "{args:?} ends");
        assert!(kib < RSS_BOUND_KIB, "{args:?}: {kib} KiB");
    }
}
