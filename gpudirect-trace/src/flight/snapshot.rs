//! Snapshot files: named by time, host and trigger, written under a
//! temporary name and renamed only when complete (a recorder killed in the
//! middle leaves no file under a final name), kept within a disk budget.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, BufWriter, Write},
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
    time::{Duration, UNIX_EPOCH},
};

/// `gdt-20261201T031502Z-node7-xid79.gdt`.
pub fn file_name(at_unix_ns: u64, host: &str, label: &str) -> String {
    let t = UNIX_EPOCH + Duration::from_nanos(at_unix_ns);
    let stamp: String = humantime::format_rfc3339_seconds(t)
        .to_string()
        .chars()
        .filter(|c| *c != '-' && *c != ':')
        .collect();
    format!("gdt-{stamp}-{}-{}.gdt", safe(host), safe(label))
}

/// A file-name part: letters, digits, `.`, `_` and `-` only.
fn safe(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if out.is_empty() {
        "host".into()
    } else {
        out
    }
}

pub use super::snapdir::prepare_dir;

pub struct SnapshotFile {
    dir: PathBuf,
    name: String,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
    /// Renamed to its final name: nothing to remove on drop.
    renamed: bool,
    pub bytes: u64,
    /// How long making it durable took (the disk's share of a snapshot).
    pub sync_seconds: f64,
}

impl SnapshotFile {
    pub fn create(dir: &Path, name: String) -> io::Result<Self> {
        let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        Ok(Self {
            dir: dir.to_owned(),
            name,
            tmp,
            out: Some(BufWriter::with_capacity(1 << 20, f)),
            renamed: false,
            bytes: 0,
            sync_seconds: 0.0,
        })
    }

    pub fn write(&mut self, b: &[u8]) -> io::Result<()> {
        match self.out.as_mut() {
            Some(o) => o.write_all(b)?,
            None => return Err(io::Error::other("snapshot already closed")),
        }
        self.bytes += b.len() as u64;
        Ok(())
    }

    /// Makes the file durable, gives it its final name (another name if
    /// that one is taken: two snapshots in one second) and enters it in
    /// the directory's index of our snapshots. On any failure the
    /// temporary file is removed (it was left before, even at a clean
    /// exit).
    pub fn commit(mut self) -> io::Result<(PathBuf, f64)> {
        let out = self
            .out
            .take()
            .ok_or_else(|| io::Error::other("snapshot already closed"))?;
        let f = out.into_inner().map_err(|e| e.into_error())?;
        let t = std::time::Instant::now();
        // fdatasync: the data and the size, not the times.
        f.sync_data()?;
        self.sync_seconds = t.elapsed().as_secs_f64();
        let stem = self.name.trim_end_matches(".gdt").to_owned();
        let mut name = self.name.clone();
        let mut n = 2;
        loop {
            match rename_new(&self.tmp, &self.dir.join(&name)) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => {
                    name = format!("{stem}-{n}.gdt");
                    n += 1;
                }
                Err(e) => return Err(e),
            }
        }
        self.renamed = true;
        if let Ok(d) = File::open(&self.dir) {
            let _ = d.sync_all();
        }
        // After the rename, which sets the change time the index keeps.
        let id = super::snapdir::FileId::of(&f.metadata()?);
        if let Err(e) = super::snapdir::remember(&self.dir, &name, id) {
            crate::output::warn(&format!(
                "flight recorder: {name} is written but not entered in {}: the disk budget will \
                 not count or delete it ({e})",
                self.dir.join(super::snapdir::INDEX).display()
            ));
        }
        Ok((self.dir.join(name), self.sync_seconds))
    }
}

/// Renames `from` to `to` unless `to` exists (a link included): atomically
/// where the file system has RENAME_NOREPLACE.
fn rename_new(from: &Path, to: &Path) -> io::Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
            if fs::symlink_metadata(to).is_ok() {
                return Err(io::ErrorKind::AlreadyExists.into());
            }
            fs::rename(from, to)
        }
        Err(e) => Err(e.into()),
    }
}

impl Drop for SnapshotFile {
    /// An unfinished snapshot never stays: not under its final name (it
    /// never had it), not as a temporary file.
    fn drop(&mut self) {
        if !self.renamed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

pub use super::snapdir::Retention;

/// Deletes the oldest of this tool's snapshots in `dir` until those left
/// hold to `r` (see [`super::snapdir`]); returns the ones deleted.
pub fn enforce_retention(
    dir: &Path,
    r: &Retention,
    keep: Option<&Path>,
    now: std::time::SystemTime,
) -> io::Result<Vec<super::snapdir::Deleted>> {
    super::snapdir::enforce(dir, r, keep, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_when_where_and_why() {
        // 2026-12-01T03:15:02Z
        let at = 1_796_094_902_000_000_000;
        assert_eq!(
            file_name(at, "node7", "xid79"),
            "gdt-20261201T031502Z-node7-xid79.gdt"
        );
        assert_eq!(
            file_name(at, "a/b c", "x"),
            "gdt-20261201T031502Z-a_b_c-x.gdt"
        );
    }

    #[test]
    fn a_snapshot_has_its_final_name_only_when_complete() {
        let dir = tempfile::tempdir().expect("tempdir");
        prepare_dir(dir.path()).expect("usable");
        let mut s = SnapshotFile::create(dir.path(), "gdt-x.gdt".into()).expect("create");
        s.write(b"abc").expect("write");
        assert!(!dir.path().join("gdt-x.gdt").exists());
        let (fin, _) = s.commit().expect("commit");
        assert_eq!(fin, dir.path().join("gdt-x.gdt"));
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &fs::metadata(&fin).expect("meta").permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        // A second one of the same name gets another; a dropped one leaves nothing.
        let s2 = SnapshotFile::create(dir.path(), "gdt-x.gdt".into()).expect("create");
        assert_eq!(
            s2.commit().expect("commit").0,
            dir.path().join("gdt-x-2.gdt")
        );
        let mut s3 = SnapshotFile::create(dir.path(), "gdt-y.gdt".into()).expect("create");
        s3.write(b"partial").expect("write");
        drop(s3);
        let mut left: Vec<_> = fs::read_dir(dir.path())
            .expect("ls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, [".gdt-snapshots", "gdt-x-2.gdt", "gdt-x.gdt"]);
        assert!(
            prepare_dir(&dir.path().join("gdt-x.gdt")).is_err(),
            "a file is not a directory"
        );
    }
}
