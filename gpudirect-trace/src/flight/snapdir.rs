//! The snapshot directory (`record --ring -o DIR`, `serve --snapshot-dir
//! DIR`): whose it is, and which of its files are ours.
//!
//! Issue 30: in a world-writable directory another user's sparse 100 GB
//! file named like a snapshot made the disk budget delete every earlier
//! snapshot, and that user's file too. So:
//! - the directory must be this user's, writable by nobody else, and not a
//!   symlink (a dangling one gave "File exists (os error 17)"); otherwise
//!   one message says which and what to do;
//! - every snapshot written is entered in [`INDEX`] (0600, ours) with its
//!   inode and change time (an inode number alone is reused at once by the
//!   next file created); the budget counts and deletes only files of the
//!   index that are still that inode with that change time, a regular file
//!   and ours, never through a link, by
//!   the blocks they use (`st_blocks`, so a sparse file counts what it
//!   takes); a restarted recorder finds its predecessor's snapshots there.

use std::{
    fs::{self, File, OpenOptions},
    io::{self, Read as _, Write as _},
    os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use anyhow::bail;
use rustix::fs::{flock, FlockOperation};

/// The snapshots this tool wrote in a directory, one `INODE CTIME_NS NAME`
/// a line.
pub const INDEX: &str = ".gdt-snapshots";
/// The index is refused beyond this (~60 bytes a snapshot: 70 000 of them).
const MAX_INDEX_BYTES: u64 = 4 << 20;

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Creates the snapshot directory (0700) if it is missing, checks that it
/// is this user's alone and that files can be created in it, and removes
/// the temporary files of recorders that died mid-snapshot.
pub fn prepare_dir(dir: &Path) -> anyhow::Result<()> {
    let d = dir.display();
    match fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => {
            let target = fs::read_link(dir)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "?".into());
            let dangling = if fs::metadata(dir).is_err() {
                ", which does not exist"
            } else {
                ""
            };
            bail!(
                "the snapshot directory {d} is a symbolic link (to {target}{dangling}): give the \
                 directory itself (a link can be pointed elsewhere by whoever owns it)"
            )
        }
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            bail!("{d} is not a directory: with --ring, -o names the directory snapshots go to")
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| anyhow::anyhow!("cannot create the snapshot directory {d}: {e}"))?,
        Err(e) => bail!("cannot use the snapshot directory {d}: {e}"),
    }
    let m = fs::symlink_metadata(dir)
        .map_err(|e| anyhow::anyhow!("cannot use the snapshot directory {d}: {e}"))?;
    check_private(dir, &m)?;
    let probe = dir.join(format!(".gdt-probe-{}", std::process::id()));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&probe)
        .map_err(|e| anyhow::anyhow!("cannot write snapshots to {d}: {e}"))?;
    let _ = fs::remove_file(&probe);
    clean_stale(dir);
    Ok(())
}

/// The directory must be this user's, and no one else's to write in.
fn check_private(dir: &Path, m: &fs::Metadata) -> anyhow::Result<()> {
    let d = dir.display();
    let me = euid();
    if m.uid() != me {
        bail!(
            "the snapshot directory {d} belongs to uid {}, not to this user (uid {me}): its \
             owner could replace, read or plant snapshots; use a directory of your own (a new \
             one is created 0700)",
            m.uid()
        );
    }
    let mode = m.mode() & 0o7777;
    if mode & 0o022 != 0 {
        let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
            (true, true) => "its group and all users",
            (true, false) => "its group",
            _ => "all users",
        };
        bail!(
            "the snapshot directory {d} is writable by {who} (mode {mode:o}): they could plant \
             files named like snapshots there or take a snapshot's name; use a directory only \
             this user can write (chmod go-w {d}, or a new one: it is created 0700)"
        );
    }
    Ok(())
}

/// Temporary files of recorders that died mid-snapshot (their pid is
/// gone): ours only, never through a link.
fn clean_stale(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let me = euid();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((_, pid)) = name.rsplit_once(".tmp-") else {
            continue;
        };
        if !name.starts_with(".gdt-") {
            continue;
        }
        let ours = fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_file() && m.uid() == me);
        let alive = pid
            .parse::<u32>()
            .is_ok_and(|p| Path::new(&format!("/proc/{p}")).exists());
        if ours && !alive {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// A snapshot the index names.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    id: FileId,
    name: String,
}

/// What tells our file from another one put under its name: the inode and
/// its change time (set by the kernel, moved by any change; a user cannot
/// set it back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    pub ino: u64,
    pub ctime_ns: i128,
}

impl FileId {
    pub fn of(m: &fs::Metadata) -> Self {
        Self {
            ino: m.ino(),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        }
    }
}

/// A name this tool gives snapshots (`gdt-...gdt`, safe characters only).
fn snapshot_name(name: &str) -> bool {
    name.starts_with("gdt-")
        && name.ends_with(".gdt")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The directory, locked against other recorders using it (flock on the
/// directory itself: the index is replaced by rename, so it cannot carry
/// the lock).
fn lock_dir(dir: &Path) -> io::Result<File> {
    let d = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)?;
    flock(&d, FlockOperation::LockExclusive)?;
    Ok(d)
}

/// The index's entries; a missing index is empty. An index that is not
/// this user's regular 0600 file is refused (someone else wrote it).
fn read_index(dir: &Path) -> io::Result<Vec<Entry>> {
    let path = dir.join(INDEX);
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let m = f.metadata()?;
    if !m.is_file() || m.uid() != euid() || m.mode() & 0o077 != 0 {
        return Err(io::Error::other(format!(
            "{} is not this user's private file (uid {}, mode {:o}): not trusted",
            path.display(),
            m.uid(),
            m.mode() & 0o7777
        )));
    }
    let mut text = String::new();
    f.take(MAX_INDEX_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_INDEX_BYTES {
        return Err(io::Error::other(format!(
            "{} is larger than {} MiB",
            path.display(),
            MAX_INDEX_BYTES >> 20
        )));
    }
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut it = l.split(' ');
            let id = FileId {
                ino: it.next()?.parse().ok()?,
                ctime_ns: it.next()?.parse().ok()?,
            };
            let name = it.next()?.trim();
            (snapshot_name(name) && it.next().is_none()).then(|| Entry {
                id,
                name: name.to_owned(),
            })
        })
        .collect())
}

/// Replaces the index with `entries` (a new 0600 file renamed over it).
fn write_index(dir: &Path, entries: &[Entry]) -> io::Result<()> {
    let tmp = dir.join(format!(".gdt-snapshots.tmp-{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    let mut text = String::from(
        "# Snapshots gpudirect-trace wrote here (inode ctime_ns name): the disk budget \
         counts and deletes only these.\n",
    );
    for e in entries {
        text.push_str(&format!("{} {} {}\n", e.id.ino, e.id.ctime_ns, e.name));
    }
    let r = f.write_all(text.as_bytes()).and_then(|()| f.sync_data());
    match r.and_then(|()| fs::rename(&tmp, dir.join(INDEX))) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Enters a snapshot just written and renamed (`name` in `dir`).
pub fn remember(dir: &Path, name: &str, id: FileId) -> io::Result<()> {
    let _lock = lock_dir(dir)?;
    let mut entries = read_index(dir)?;
    entries.retain(|e| e.name != name);
    entries.push(Entry {
        id,
        name: name.to_owned(),
    });
    write_index(dir, &entries)
}

/// An index entry's file as it stands.
struct Kept {
    /// Blocks used, in bytes.
    bytes: u64,
    modified: std::time::SystemTime,
}

/// An index entry's file, if it is still the one we wrote: its bytes on
/// disk (blocks used) and when it was last written.
fn ours(dir: &Path, e: &Entry) -> Option<Kept> {
    let m = fs::symlink_metadata(dir.join(&e.name)).ok()?;
    (m.is_file() && m.uid() == euid() && FileId::of(&m) == e.id).then(|| Kept {
        bytes: m.blocks() * 512,
        modified: m.modified().unwrap_or(std::time::UNIX_EPOCH),
    })
}

/// How much of our snapshots a directory keeps (`serve --snapshot-max-*`):
/// the oldest go first, until every bound that is set holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Disk the snapshots use in all (blocks, so a sparse file counts what
    /// it takes).
    pub max_bytes: Option<u64>,
    /// Snapshots kept.
    pub max_count: Option<u64>,
    /// A snapshot older than this (since it was last written) is deleted.
    pub max_age: Option<std::time::Duration>,
}

impl Retention {
    pub fn is_set(&self) -> bool {
        self.max_bytes.is_some() || self.max_count.is_some() || self.max_age.is_some()
    }
}

/// A snapshot deleted, and the bound it was over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deleted {
    pub path: PathBuf,
    pub why: String,
}

/// Deletes the oldest of our snapshots in `dir` until those left hold to
/// `r`; returns the ones deleted. Files the index does not name (another
/// user's, an older version's) are neither counted nor touched; `keep`
/// (the snapshot just written) is never deleted.
pub fn enforce(
    dir: &Path,
    r: &Retention,
    keep: Option<&Path>,
    now: std::time::SystemTime,
) -> io::Result<Vec<Deleted>> {
    let _lock = lock_dir(dir)?;
    let mut files: Vec<(Entry, Kept)> = read_index(dir)?
        .into_iter()
        .filter_map(|e| ours(dir, &e).map(|b| (e, b)))
        .collect();
    // The names start with the UTC time: name order is age order.
    files.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    files.dedup_by(|a, b| a.0.name == b.0.name);
    let mut total: u64 = files.iter().map(|f| f.1.bytes).sum();
    let mut count = files.len() as u64;
    let keep_name = keep.and_then(|k| k.file_name()).and_then(|n| n.to_str());
    let mut deleted = Vec::new();
    let mut left = Vec::new();
    for (e, kept) in files {
        let age = now.duration_since(kept.modified).unwrap_or_default();
        let why = if r.max_bytes.is_some_and(|m| total > m) {
            Some(format!(
                "snapshots over {} in all",
                crate::output::bytes(r.max_bytes.unwrap_or(0))
            ))
        } else if r.max_count.is_some_and(|m| count > m) {
            Some(format!("more than {} snapshots", r.max_count.unwrap_or(0)))
        } else if r.max_age.is_some_and(|m| age > m) {
            Some(format!(
                "older than {}",
                humantime::format_duration(r.max_age.unwrap_or_default())
            ))
        } else {
            None
        };
        let path = dir.join(&e.name);
        match why {
            Some(why) if Some(e.name.as_str()) != keep_name && fs::remove_file(&path).is_ok() => {
                total -= kept.bytes;
                count -= 1;
                deleted.push(Deleted { path, why });
            }
            _ => left.push(e),
        }
    }
    write_index(dir, &left)?;
    Ok(deleted)
}

/// Deletes the oldest of our snapshots in `dir` until those left use at
/// most `max_bytes` of disk (`enforce` with the size bound alone).
#[cfg(test)]
pub fn enforce_budget(dir: &Path, max_bytes: u64, keep: &Path) -> io::Result<Vec<PathBuf>> {
    let r = Retention {
        max_bytes: Some(max_bytes),
        ..Retention::default()
    };
    Ok(enforce(dir, &r, Some(keep), std::time::SystemTime::now())?
        .into_iter()
        .map(|d| d.path)
        .collect())
}

#[cfg(test)]
#[path = "snapdir_tests.rs"]
mod tests;
