//! Deterministic archives for the release artifacts: entries in the order
//! given, owned by root:root, every timestamp SOURCE_DATE_EPOCH, gzip with no
//! name and no time in its header. The same commit gives the same bytes, so
//! SHA256SUMS can be compared across builds.

use std::{
    fs::File,
    io::{BufWriter, Read as _, Write},
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use flate2::{write::GzEncoder, Compression};
use sha2::{Digest as _, Sha256};

pub struct Tar<W: Write> {
    inner: tar::Builder<W>,
    mtime: u64,
}

impl<W: Write> Tar<W> {
    pub fn new(w: W, mtime: u64) -> Self {
        let mut inner = tar::Builder::new(w);
        inner.mode(tar::HeaderMode::Deterministic);
        Self { inner, mtime }
    }

    fn header(&self, kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_mtime(self.mtime);
        h.set_uid(0);
        h.set_gid(0);
        // Best effort: names longer than the field are only cosmetic.
        let _ = h.set_username("root");
        let _ = h.set_groupname("root");
        h
    }

    pub fn dir(&mut self, path: &str, mode: u32) -> Result<()> {
        let mut h = self.header(tar::EntryType::Directory, mode, 0);
        let path = format!("{}/", path.trim_end_matches('/'));
        self.inner
            .append_data(&mut h, &path, std::io::empty())
            .with_context(|| format!("tar: {path}"))
    }

    pub fn bytes(&mut self, path: &str, mode: u32, data: &[u8]) -> Result<()> {
        let mut h = self.header(tar::EntryType::Regular, mode, data.len() as u64);
        self.inner
            .append_data(&mut h, path, data)
            .with_context(|| format!("tar: {path}"))
    }

    pub fn file(&mut self, path: &str, mode: u32, src: &Path) -> Result<()> {
        let data = std::fs::read(src).with_context(|| format!("reading {}", src.display()))?;
        self.bytes(path, mode, &data)
    }

    pub fn finish(self) -> Result<W> {
        self.inner.into_inner().context("finishing tar")
    }
}

/// A gzip stream with an empty header (no file name, mtime 0).
pub fn gzip<W: Write>(w: W) -> GzEncoder<W> {
    flate2::GzBuilder::new()
        .mtime(0)
        .write(w, Compression::best())
}

pub fn gzip_bytes(data: &[u8]) -> Result<Vec<u8>> {
    let mut gz = gzip(Vec::new());
    gz.write_all(data)?;
    Ok(gz.finish()?)
}

pub fn create(path: &Path) -> Result<BufWriter<File>> {
    Ok(BufWriter::new(
        File::create(path).with_context(|| format!("creating {}", path.display()))?,
    ))
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `sha256sum` format (`HEX  NAME`), which `sha256sum -c` checks.
pub fn sha256sums(files: &[(String, PathBuf)]) -> Result<String> {
    let mut out = String::new();
    for (name, path) in files {
        out.push_str(&format!("{}  {name}\n", sha256_file(path)?));
    }
    Ok(out)
}

/// Every regular file under `dir`, sorted, as (path relative to dir, path).
pub fn walk(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    fn rec(base: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("listing {}", dir.display()))?
            .collect::<std::io::Result<_>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            if e.file_type()?.is_dir() {
                rec(base, &path, out)?;
            } else if e.file_type()?.is_file() {
                let rel = path.strip_prefix(base).unwrap_or(&path);
                out.push((rel.to_string_lossy().into_owned(), path));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    rec(dir, dir, &mut out)?;
    Ok(out)
}
