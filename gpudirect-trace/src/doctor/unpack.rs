//! `doctor --root CAPTURE.tar.gz`: the archive `--capture` wrote, read
//! without unpacking it by hand.
//!
//! Why: a capture travels as the `.tar.gz` (a bug report's attachment);
//! `--root` took only its unpacked directory, so the first try on a
//! received capture was "not a directory". The archive is unpacked into a
//! private directory of this process (mode 0700, made new, never one that
//! existed), read through the same confined tree as any captured
//! directory, and removed when the report is done.
//!
//! The archive comes from elsewhere: the bounds of `--baseline` hold
//! (`baseline::refuse_member`, `MAX_EXPANDED_BYTES` in all,
//! `MAX_FILE_BYTES` a member), and a member that is a link, a device or a
//! path leaving the archive refuses the whole archive before anything is
//! read from it.

use std::{
    fs,
    io::{self, Read as _},
    os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _};

use super::{
    baseline::{each_member, open_regular, MAX_EXPANDED_BYTES},
    tree::MAX_FILE_BYTES,
};

/// A directory this process made, removed with all it holds when dropped.
#[derive(Debug)]
pub struct Unpacked {
    dir: PathBuf,
}

impl Unpacked {
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Unpacked {
    fn drop(&mut self) {
        // Only what unpack() made: the directory was new (mkdir, not
        // reused) and holds only the archive's members.
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A new private directory under the temporary directory.
fn private_dir() -> io::Result<Unpacked> {
    let base = std::env::temp_dir();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut last = None;
    for attempt in 0..16u32 {
        let dir = base.join(format!(
            "gdt-capture-{}-{nanos:08x}{attempt:x}",
            std::process::id()
        ));
        // mkdir fails on any name that exists (a link planted there
        // included): the directory is always this process's own.
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(Unpacked { dir }),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::ErrorKind::AlreadyExists.into()))
}

/// `path` (a capture's `.tar.gz`) unpacked into a private directory.
pub fn capture_archive(path: &Path) -> anyhow::Result<Unpacked> {
    let name = path.display().to_string();
    let takes = "the .tar.gz that `doctor --capture` wrote, or its unpacked directory";
    let file = open_regular(path, &name, takes)?;
    let out = private_dir().context("cannot make a directory to unpack the capture into")?;
    unpack_into(file, &name, out.path(), MAX_EXPANDED_BYTES)?;
    Ok(out)
}

fn unpack_into(file: fs::File, name: &str, dir: &Path, limit: u64) -> anyhow::Result<()> {
    let mut members = 0u64;
    each_member(file, name, limit, |rel, kind, e| {
        if rel.as_os_str().is_empty() {
            return Ok(());
        }
        if kind == tar::EntryType::Directory {
            return make_dirs(dir, &rel);
        }
        if let Some(parent) = rel.parent() {
            make_dirs(dir, parent)?;
        }
        // New files only: a member named twice is refused, never written
        // over (O_EXCL), and nothing is followed (O_NOFOLLOW).
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dir.join(&rel))
            .with_context(|| format!("{name}: member {}", rel.display()))?;
        let copied = io::copy(&mut e.take(MAX_FILE_BYTES + 1), &mut f)
            .with_context(|| format!("reading {name}"))?;
        if copied > MAX_FILE_BYTES {
            bail!(
                "{name}: member {} is larger than {} MiB, more than any file of a capture",
                rel.display(),
                MAX_FILE_BYTES >> 20
            );
        }
        members += 1;
        Ok(())
    })?;
    if members == 0 {
        bail!("{name}: no files in it (give the .tar.gz that `doctor --capture` wrote)");
    }
    Ok(())
}

/// `rel` and its parents under `dir`, private. Nothing but this unpacking
/// writes in `dir` (a new 0700 directory) and it makes no link, so no
/// component can lead elsewhere; a member path that is also a file fails.
fn make_dirs(dir: &Path, rel: &Path) -> anyhow::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir.join(rel))
        .with_context(|| format!("making the directory {} of the archive", rel.display()))
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    /// A .tar.gz of `members` (path, bytes); `kind` for the last one.
    fn archive(members: &[(&str, &[u8])], last: tar::EntryType) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut b = tar::Builder::new(gz);
        for (i, (p, data)) in members.iter().enumerate() {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o600);
            h.set_entry_type(if i + 1 == members.len() {
                last
            } else {
                tar::EntryType::Regular
            });
            if last == tar::EntryType::Symlink && i + 1 == members.len() {
                h.set_link_name("/etc/shadow").expect("link name");
                h.set_size(0);
            }
            // Raw names: tar's own append_data refuses "..".
            h.as_gnu_mut().expect("gnu").name[..p.len()].copy_from_slice(p.as_bytes());
            h.set_cksum();
            b.append(&h, *data).expect("append");
        }
        b.into_inner().expect("tar").finish().expect("gzip")
    }

    fn unpack(bytes: &[u8], limit: u64) -> (tempfile::TempDir, anyhow::Result<()>) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let src = tmp.path().join("cap.tgz");
        fs::File::create(&src)
            .and_then(|mut f| f.write_all(bytes))
            .expect("write");
        let out = tmp.path().join("out");
        fs::create_dir(&out).expect("mkdir");
        let r = unpack_into(fs::File::open(&src).expect("open"), "cap.tgz", &out, limit);
        (tmp, r)
    }

    #[test]
    fn a_capture_unpacks_privately_and_is_removed_after() {
        let a = archive(
            &[
                ("sys/bus/pci/devices/0000:00:00.0/vendor", b"0x8086\n"),
                ("./proc/cmdline", b"intel_iommu=on\n"),
            ],
            tar::EntryType::Regular,
        );
        let (tmp, r) = unpack(&a, 1 << 20);
        r.expect("unpacked");
        let out = tmp.path().join("out");
        let vendor = out.join("sys/bus/pci/devices/0000:00:00.0/vendor");
        assert_eq!(fs::read(&vendor).expect("read"), b"0x8086\n");
        assert_eq!(
            fs::read(out.join("proc/cmdline")).expect("read"),
            b"intel_iommu=on\n"
        );
        use std::os::unix::fs::PermissionsExt as _;
        let mode = |p: &Path| fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!((mode(&vendor), mode(&out.join("sys"))), (0o600, 0o700));
        // The private directory goes when its guard does.
        let made = private_dir().expect("private dir");
        let p = made.path().to_path_buf();
        assert_eq!(mode(&p), 0o700);
        fs::write(p.join("x"), b"x").expect("write");
        drop(made);
        assert!(!p.exists());
    }

    #[test]
    fn links_escapes_bombs_and_repeats_are_refused() {
        for (members, last, says) in [
            (
                vec![("sys/a", &b"x"[..]), ("sys/evil", &b""[..])],
                tar::EntryType::Symlink,
                "is a symbolic link",
            ),
            (
                vec![("../outside", &b"x"[..])],
                tar::EntryType::Regular,
                "leaves the archive's directory",
            ),
            (
                vec![("sys/a", &b"x"[..]), ("sys/a", &b"y"[..])],
                tar::EntryType::Regular,
                "member sys/a",
            ),
            (
                vec![("sys/a", &b"x"[..]), ("sys/a/b", &b"y"[..])],
                tar::EntryType::Regular,
                "making the directory sys/a",
            ),
            (
                vec![("big", &[0u8; 128 << 10][..])],
                tar::EntryType::Regular,
                "expands past",
            ),
        ] {
            let (tmp, r) = unpack(&archive(&members, last), 64 << 10);
            let e = format!("{:#}", r.expect_err(says));
            assert!(e.contains(says), "{says}: {e}");
            assert!(!tmp.path().join("outside").exists());
        }
        let (_tmp, r) = unpack(&archive(&[], tar::EntryType::Regular), 64 << 10);
        assert!(format!("{:#}", r.expect_err("empty")).contains("no files"));
    }
}
