//! Snapshot files: named by time, host and trigger, written under a
//! temporary name and renamed only when complete (a recorder killed in the
//! middle leaves no file under a final name), kept within a disk budget.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, BufWriter, Write},
    os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _},
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

fn is_snapshot(name: &str) -> bool {
    name.starts_with("gdt-") && name.ends_with(".gdt")
}

/// Creates the snapshot directory (0700) if it is missing and checks that
/// files can be created in it; one clear error otherwise.
pub fn prepare_dir(dir: &Path) -> anyhow::Result<()> {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => anyhow::bail!(
            "{} is not a directory: with --ring, -o names the directory snapshots go to",
            dir.display()
        ),
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot create the snapshot directory {}: {e}",
                    dir.display()
                )
            })?,
        Err(e) => anyhow::bail!("cannot use the snapshot directory {}: {e}", dir.display()),
    }
    let probe = dir.join(format!(".gdt-probe-{}", std::process::id()));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&probe)
        .map_err(|e| anyhow::anyhow!("cannot write snapshots to {}: {e}", dir.display()))?;
    let _ = fs::remove_file(&probe);
    clean_stale(dir);
    Ok(())
}

/// Temporary files of recorders that died mid-snapshot (their pid is gone).
fn clean_stale(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((_, pid)) = name.rsplit_once(".tmp-") else {
            continue;
        };
        if !name.starts_with(".gdt-") {
            continue;
        }
        let alive = pid
            .parse::<u32>()
            .is_ok_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            let _ = fs::remove_file(e.path());
        }
    }
}

pub struct SnapshotFile {
    dir: PathBuf,
    name: String,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
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

    /// Makes the file durable and gives it its final name (another name if
    /// that one appeared meanwhile: two snapshots in one second).
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
        let mut fin = self.dir.join(&self.name);
        let mut n = 2;
        while fin.exists() {
            fin = self.dir.join(format!("{stem}-{n}.gdt"));
            n += 1;
        }
        fs::rename(&self.tmp, &fin)?;
        if let Ok(d) = File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok((fin, self.sync_seconds))
    }
}

impl Drop for SnapshotFile {
    /// An unfinished snapshot never stays: not under its final name (it
    /// never had it), not as a temporary file.
    fn drop(&mut self) {
        if self.out.is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Deletes the oldest snapshots in `dir` until they fit in `max_bytes`;
/// returns the ones deleted. Only files named as snapshots are touched.
pub fn enforce_budget(dir: &Path, max_bytes: u64, keep: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(String, PathBuf, u64)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let m = e.metadata().ok()?;
            (is_snapshot(&name) && m.is_file()).then(|| (name, e.path(), m.len()))
        })
        .collect();
    // The names start with the UTC time: name order is age order.
    files.sort();
    let mut total: u64 = files.iter().map(|f| f.2).sum();
    let mut deleted = Vec::new();
    for (_, path, len) in files {
        if total <= max_bytes {
            break;
        }
        if path == keep {
            continue;
        }
        if fs::remove_file(&path).is_ok() {
            total -= len;
            deleted.push(path);
        }
    }
    deleted
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
        let left: Vec<_> = fs::read_dir(dir.path())
            .expect("ls")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(
            prepare_dir(&dir.path().join("gdt-x.gdt")).is_err(),
            "a file is not a directory"
        );
    }

    #[test]
    fn the_budget_deletes_the_oldest_first_and_only_snapshots() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, len) in [
            ("gdt-20261201T000001Z-h-a.gdt", 100),
            ("gdt-20261201T000002Z-h-b.gdt", 100),
            ("gdt-20261201T000003Z-h-c.gdt", 100),
            ("notes.txt", 1000),
        ] {
            fs::write(dir.path().join(name), vec![0u8; len]).expect("write");
        }
        let keep = dir.path().join("gdt-20261201T000003Z-h-c.gdt");
        let gone = enforce_budget(dir.path(), 150, &keep);
        assert_eq!(gone.len(), 2);
        assert!(keep.exists() && dir.path().join("notes.txt").exists());
    }
}
