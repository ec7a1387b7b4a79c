//! `--baseline` on what is not a capture: devices, FIFOs, archives that
//! expand without end or hold links, devices and `..` paths.

use std::{fs, io::Write as _, path::Path};

use super::{from_archive, read, refuse_member};
use crate::gpu::{
    facts::{FORMAT, NVML_FILE},
    NvmlRecord, NvmlStatus,
};

fn record() -> NvmlRecord {
    NvmlRecord {
        format: FORMAT,
        status: NvmlStatus::Unavailable { why: "test".into() },
        samples: Vec::new(),
    }
}

/// A .tar.gz holding `members` (path, type, data), written as a crafted
/// archive would be: the paths and types as given, unchecked.
fn archive(path: &Path, members: &[(&str, tar::EntryType, &[u8])]) {
    let f = fs::File::create(path).expect("create");
    let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
    for (name, kind, data) in members {
        let mut h = tar::Header::new_old();
        // set_path refuses `..`; a crafted archive has it anyway.
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_size(data.len() as u64);
        h.set_mode(0o600);
        h.set_entry_type(*kind);
        if *kind == tar::EntryType::Symlink {
            h.set_link_name("/etc/shadow").expect("link name");
        }
        h.set_cksum();
        gz.write_all(h.as_bytes()).expect("header");
        gz.write_all(data).expect("data");
        let pad = (512 - data.len() % 512) % 512;
        gz.write_all(&vec![0u8; pad]).expect("pad");
    }
    gz.write_all(&[0u8; 1024]).expect("end");
    gz.finish().expect("gz");
}

#[test]
fn devices_fifos_and_directories_without_nvml_are_refused_at_once() {
    for dev in ["/dev/zero", "/dev/null", "/dev/urandom"] {
        let e = read(Path::new(dev)).expect_err(dev).to_string();
        assert!(e.contains("a character device, not a capture"), "{e}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("nvml.json");
    let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("path");
    // SAFETY: mkfifo reads a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // No writer: opening it would block forever.
    let e = read(&fifo).expect_err("fifo").to_string();
    assert!(e.contains("a FIFO, not a capture"), "{e}");
    // An unpacked capture whose nvml.json is that FIFO.
    let e = format!("{:#}", read(dir.path()).expect_err("fifo inside"));
    assert!(e.contains("a FIFO, not a regular file"), "{e}");
    // ... or a link out of the capture.
    fs::remove_file(&fifo).expect("rm");
    std::os::unix::fs::symlink("/etc/passwd", &fifo).expect("link");
    let e = format!("{:#}", read(dir.path()).expect_err("link out"));
    assert!(e.contains("outside the capture"), "{e}");
}

#[test]
fn an_archive_expanding_past_the_limit_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bomb = dir.path().join("bomb.tar.gz");
    // 4 MiB of zeros in one member: a few KiB compressed.
    archive(
        &bomb,
        &[("filler", tar::EntryType::Regular, &vec![0u8; 4 << 20])],
    );
    assert!(fs::metadata(&bomb).expect("stat").len() < 64 << 10);
    let f = fs::File::open(&bomb).expect("open");
    let e = format!(
        "{:#}",
        from_archive(f, "bomb.tar.gz", 1 << 20).expect_err("bomb")
    );
    assert!(e.contains("expands past 1 MiB"), "{e}");
    // Within the limit it is read to its end (and has no nvml.json).
    let f = fs::File::open(&bomb).expect("open");
    let e = format!("{:#}", from_archive(f, "b", 8 << 20).expect_err("none"));
    assert!(e.contains("has no nvml.json"), "{e}");
}

#[test]
fn archive_members_that_are_links_devices_or_climb_out_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = serde_json::to_vec(&record()).expect("json");
    let good = dir.path().join("good.tar.gz");
    archive(
        &good,
        &[("./nvml.json", tar::EntryType::Regular, json.as_slice())],
    );
    assert_eq!(read(&good).expect("good"), record());
    for (name, kind, why) in [
        (NVML_FILE, tar::EntryType::Symlink, "is a symbolic link"),
        ("x", tar::EntryType::Link, "is a hard link"),
        ("dev", tar::EntryType::Char, "is a character device"),
        ("pipe", tar::EntryType::Fifo, "is a FIFO"),
        (
            "../../etc/cron.d/x",
            tar::EntryType::Regular,
            "leaves the archive",
        ),
        ("/etc/passwd", tar::EntryType::Regular, "leaves the archive"),
    ] {
        let bad = dir.path().join("bad.tar.gz");
        archive(
            &bad,
            &[
                (name, kind, b"".as_slice()),
                (NVML_FILE, tar::EntryType::Regular, json.as_slice()),
            ],
        );
        let e = format!("{:#}", read(&bad).expect_err(name));
        assert!(e.contains(why) && e.contains("refused"), "{name}: {e}");
    }
    assert!(refuse_member(Path::new("sys/a"), tar::EntryType::Directory).is_none());
}
