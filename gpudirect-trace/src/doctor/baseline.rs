//! `doctor --baseline CAPTURE`: the NVML answers of an earlier capture, from
//! its unpacked directory, its `nvml.json`, or the `.tar.gz` itself.
//!
//! A capture comes from elsewhere, so everything here is bounded (issue 30:
//! `--baseline /dev/zero` read forever, a FIFO blocked, a gzip bomb
//! expanded without end): only a regular file or a directory is opened,
//! `nvml.json` may hold at most [`MAX_FILE_BYTES`], an archive may expand
//! to at most [`MAX_EXPANDED_BYTES`], and an archive member that is a link,
//! a device or a path with `..` makes the whole archive refused.

use std::{
    fs,
    io::{self, BufReader, Read},
    os::unix::fs::OpenOptionsExt as _,
    path::{Component, Path, PathBuf},
};

use anyhow::{bail, Context as _};

use super::tree::{Tree, MAX_FILE_BYTES};
use crate::gpu::{facts::NVML_FILE, NvmlRecord};

/// What a capture archive may expand to: this tool's captures are a few
/// MiB (1.1 MiB for the 2x H200 host), a large host's tens.
pub const MAX_EXPANDED_BYTES: u64 = 256 << 20;

/// The NVML record of the capture at `path` (the user's own argument,
/// followed if it is a link).
pub fn read(path: &Path) -> anyhow::Result<NvmlRecord> {
    let name = path.display().to_string();
    let meta = fs::metadata(path).with_context(|| format!("cannot read {name}"))?;
    if meta.is_dir() {
        let tree = Tree::captured(path)?;
        let text = tree.read_capture_file(NVML_FILE).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                anyhow::anyhow!(
                    "{name} has no {NVML_FILE} (a capture taken without NVML, or by an older \
                     version)"
                )
            } else {
                anyhow::anyhow!("{name}/{NVML_FILE}: {e}")
            }
        })?;
        return NvmlRecord::from_json(&text).with_context(|| format!("{name}/{NVML_FILE}"));
    }
    let takes =
        format!("the .tar.gz that --capture wrote, its unpacked directory, or its {NVML_FILE}");
    let file = open_regular(path, &name, &takes)?;
    if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        return from_archive(file, &name, MAX_EXPANDED_BYTES);
    }
    let text = read_at_most(file, MAX_FILE_BYTES).with_context(|| format!("reading {name}"))?;
    NvmlRecord::from_json(&text).with_context(|| name.clone())
}

/// `path` opened for reading if it is a regular file; anything else is
/// refused before it is opened (a FIFO would block, a device may never end),
/// with `takes`, what the option takes instead, as the advice.
pub(super) fn open_regular(path: &Path, name: &str, takes: &str) -> anyhow::Result<fs::File> {
    let what = super::tree::describe_type;
    let meta = fs::metadata(path).with_context(|| format!("cannot read {name}"))?;
    if !meta.is_file() {
        bail!("{name} is {}, not a capture (give {takes})", what(&meta));
    }
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .with_context(|| format!("cannot read {name}"))?;
    let m = f.metadata()?;
    if !m.is_file() {
        bail!("{name} changed into {} while it was opened", what(&m));
    }
    Ok(f)
}

/// At most `limit` bytes of UTF-8 text, or an error saying the limit.
fn read_at_most(r: impl Read, limit: u64) -> io::Result<String> {
    let mut v = Vec::new();
    r.take(limit + 1).read_to_end(&mut v)?;
    if v.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("larger than {} MiB, the limit for one file", limit >> 20),
        ));
    }
    String::from_utf8(v).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// A reader that fails once more than `left` bytes came through it.
pub(super) struct Expanded<R> {
    inner: R,
    left: u64,
    limit: u64,
}

impl<R> Expanded<R> {
    /// `inner`, failing past `limit` bytes.
    pub(super) fn new(inner: R, limit: u64) -> Self {
        Self {
            inner,
            left: limit,
            limit,
        }
    }
}

impl<R: Read> Read for Expanded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // One byte more than allowed: the limit, not the end.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::new(
                    io::ErrorKind::FileTooLarge,
                    format!(
                        "it expands past {} MiB, more than any capture (a damaged or crafted \
                         archive)",
                        self.limit >> 20
                    ),
                )),
            };
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        Ok(n)
    }
}

/// Why an archive member is refused: a capture holds regular files (and,
/// repacked by hand, directories) under relative paths, nothing else.
pub fn refuse_member(path: &Path, kind: tar::EntryType) -> Option<String> {
    let p = path.display();
    if path.components().any(|c| {
        matches!(
            c,
            Component::ParentDir | Component::RootDir | Component::Prefix(_)
        )
    }) {
        return Some(format!(
            "member {p} leaves the archive's directory (.. or /)"
        ));
    }
    let what = match kind {
        tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::Directory => {
            return None
        }
        tar::EntryType::Symlink => "a symbolic link",
        tar::EntryType::Link => "a hard link",
        tar::EntryType::Char => "a character device",
        tar::EntryType::Block => "a block device",
        tar::EntryType::Fifo => "a FIFO",
        _ => "not a regular file",
    };
    Some(format!("member {p} is {what}"))
}

/// One member of a capture archive being read (`each_member`).
pub(super) type Member<'a> = tar::Entry<'a, Expanded<flate2::read::GzDecoder<BufReader<fs::File>>>>;

/// Calls `f` with each member of the capture archive `file` (named `name`
/// in errors), its path relative to the archive (`.` parts dropped) and
/// its type, as long as it expands to at most `limit` in all. A member
/// that `refuse_member` refuses ends the reading with an error.
pub(super) fn each_member(
    file: fs::File,
    name: &str,
    limit: u64,
    mut f: impl FnMut(PathBuf, tar::EntryType, &mut Member<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let gz = flate2::read::GzDecoder::new(BufReader::new(file));
    let mut ar = tar::Archive::new(Expanded::new(gz, limit));
    for e in ar.entries().with_context(|| format!("reading {name}"))? {
        let mut e = e.with_context(|| format!("reading {name}"))?;
        let path = e
            .path()
            .with_context(|| format!("reading {name}"))?
            .into_owned();
        let kind = e.header().entry_type();
        if let Some(why) = refuse_member(&path, kind) {
            bail!("{name}: {why}: refused (a capture holds only regular files)");
        }
        // Refused above: no `..`, root or prefix; only `.` is left to drop.
        let rel: PathBuf = path
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        f(rel, kind, &mut e)?;
    }
    Ok(())
}

/// The `nvml.json` of a capture archive that expands to at most `limit`.
fn from_archive(file: fs::File, name: &str, limit: u64) -> anyhow::Result<NvmlRecord> {
    let mut found = None;
    each_member(file, name, limit, |rel, _, e| {
        if rel == Path::new(NVML_FILE) && found.is_none() {
            let text =
                read_at_most(e, MAX_FILE_BYTES).with_context(|| format!("{name}: {NVML_FILE}"))?;
            found = Some(text);
        }
        Ok(())
    })?;
    let Some(text) = found else {
        bail!("{name} has no {NVML_FILE} (a capture taken without NVML, or by an older version)")
    };
    NvmlRecord::from_json(&text).with_context(|| format!("{name}: {NVML_FILE}"))
}

#[cfg(test)]
#[path = "baseline_tests.rs"]
mod tests;
