//! Read-only view of a host's `/sys` and `/proc`, either the live ones or a
//! captured tree (`--root DIR`).
//!
//! A capture cannot hold sysfs symlinks or directories of symlinks as they are,
//! so it stores them as text (the layout of `shared/fixtures/gpu-host-h200x2`):
//! - a symlink `NAME` is a file `NAME.link` holding the link target;
//! - a directory listing that matters (e.g. `msi_irqs/`) is `NAME.list`, one entry
//!   a line;
//! - `pci-device-paths.txt` maps each BDF to its real path under `/sys/devices`.
//!
//! Every path handed to this module is the absolute path as it is on the host
//! (`/sys/bus/pci/devices/...`), so evidence strings read the same for a live host
//! and a capture.

mod confined;

use std::{
    fs, io,
    io::Read as _,
    os::unix::fs::OpenOptionsExt as _,
    path::{Component, Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use self::confined::Root;
pub use self::confined::{Method, Refusal, MAX_LINKS};

/// The most one file of a host tree may hold. sysfs attributes are at most
/// a page (a config space 4 KiB); the largest files a capture holds are
/// the kernel log (`log_buf_len` is 128 KiB to a few MiB on the hosts
/// seen) and `/proc/interrupts` (~6 MiB on 256 CPUs and 2000 vectors).
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// The most read from one capture in all: a capture of the 2x H200 host is
/// 1.1 MiB, one of a large host a few tens of MiB at most.
pub const CAPTURE_READ_BUDGET: u64 = 64 << 20;
/// The most entries one directory listing keeps (a host has a few hundred
/// PCI functions and IOMMU groups).
pub const MAX_LIST_ENTRIES: usize = 1 << 16;
/// Refused paths kept for the report; more are counted.
const MAX_REFUSALS_KEPT: usize = 64;

/// Where files are read from.
#[derive(Debug, Clone)]
pub struct Tree {
    root: PathBuf,
    /// A capture: every path resolved inside it (None: the live host).
    confined: Option<Arc<Root>>,
    reads: Arc<Reads>,
}

/// What has been read from a tree, and what was refused.
#[derive(Debug, Default)]
struct Reads {
    bytes: AtomicU64,
    refused: Mutex<Refused>,
}

/// Paths not read, each with why.
#[derive(Debug, Default)]
struct Refused {
    list: Vec<String>,
    more: u64,
}

impl Tree {
    /// The running host (`/`).
    pub fn live() -> Self {
        Self {
            root: PathBuf::from("/"),
            confined: None,
            reads: Arc::default(),
        }
    }

    /// A captured tree. Fails with one clear message when `root` is not a
    /// directory. Nothing outside `root` is ever read through it.
    pub fn captured(root: &Path) -> anyhow::Result<Self> {
        match fs::metadata(root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => anyhow::bail!("--root {}: not a directory", root.display()),
            Err(e) => anyhow::bail!("--root {}: {e}", root.display()),
        }
        let dir =
            Root::open(root).map_err(|e| anyhow::anyhow!("--root {}: {e}", root.display()))?;
        Ok(Self {
            root: root.to_path_buf(),
            confined: Some(Arc::new(dir)),
            reads: Arc::default(),
        })
    }

    /// The same tree, named `shown` in what it reports (an archive that
    /// was unpacked into a directory of its own to be read).
    pub fn shown_as(mut self, shown: &Path) -> Self {
        self.root = shown.to_path_buf();
        self
    }

    pub fn is_live(&self) -> bool {
        self.confined.is_none()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Host path -> path on this machine (for messages: reads go through
    /// the methods below).
    pub fn host(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    /// A text file, trailing whitespace trimmed.
    pub fn read(&self, abs: &str) -> io::Result<String> {
        let b = self.read_bytes(abs)?;
        let s = String::from_utf8(b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok(s.trim_end().to_string())
    }

    /// A file's bytes: a regular file only, at most [`MAX_FILE_BYTES`], and
    /// from a capture at most [`CAPTURE_READ_BUDGET`] in all.
    pub fn read_bytes(&self, abs: &str) -> io::Result<Vec<u8>> {
        let r = self
            .open(abs)
            .and_then(|(f, size)| self.reads.bounded(f, size, self.budget()));
        self.noted(abs, r)
    }

    /// A file the capture holds beside the host's trees (`dmesg.txt`,
    /// `nvml.json`); a live host has none.
    pub fn read_capture_file(&self, name: &str) -> io::Result<String> {
        if self.is_live() {
            return Err(io::ErrorKind::NotFound.into());
        }
        self.read(&format!("/{name}"))
    }

    /// [`Tree::read_capture_file`], as bytes.
    pub fn read_capture_bytes(&self, name: &str) -> io::Result<Vec<u8>> {
        if self.is_live() {
            return Err(io::ErrorKind::NotFound.into());
        }
        self.read_bytes(&format!("/{name}"))
    }

    pub fn exists(&self, abs: &str) -> bool {
        let p = self.host(abs);
        match &self.confined {
            Some(root) => {
                let r = rel(abs);
                root.exists(&r)
                    || root.exists(&with_suffix(&r, ".link"))
                    || root.exists(&with_suffix(&r, ".list"))
            }
            None => {
                fs::symlink_metadata(&p).is_ok()
                    || fs::metadata(with_suffix(&p, ".link")).is_ok()
                    || fs::metadata(with_suffix(&p, ".list")).is_ok()
            }
        }
    }

    /// Target of a symlink, raw (as `readlink` gives it): a real symlink or a
    /// `NAME.link` file.
    pub fn link(&self, abs: &str) -> Option<String> {
        let real = match &self.confined {
            Some(root) => {
                let r = root.read_link(&rel(abs));
                self.noted(abs, r)
                    .ok()
                    .flatten()
                    .map(std::path::PathBuf::from)
            }
            None => fs::read_link(self.host(abs)).ok(),
        };
        if let Some(t) = real {
            return Some(t.to_string_lossy().into_owned());
        }
        let text = self.read(&format!("{abs}.link")).ok()?;
        let t = text.lines().next().unwrap_or("").trim();
        // A link target is at most PATH_MAX.
        (!t.is_empty() && t.len() < 4096).then(|| t.to_string())
    }

    /// Symlink target resolved to an absolute host path (lexically, so it works
    /// inside a capture).
    pub fn resolve_link(&self, abs: &str) -> Option<String> {
        let target = self.link(abs)?;
        let base = Path::new(abs).parent().unwrap_or(Path::new("/"));
        Some(normalize(&base.join(target)))
    }

    /// Entries of a directory (sorted): a real directory or a `NAME.list`
    /// file, at most [`MAX_LIST_ENTRIES`].
    pub fn list(&self, abs: &str) -> io::Result<Vec<String>> {
        let dir = match &self.confined {
            Some(root) => {
                let r = root.list(&rel(abs), MAX_LIST_ENTRIES);
                self.noted(abs, r).map(|v| {
                    v.into_iter()
                        .map(|n| n.to_string_lossy().into_owned())
                        .collect::<Vec<_>>()
                })
            }
            None => list_live(&self.host(abs)),
        };
        let mut names: Vec<String> = match dir {
            Ok(v) => v,
            Err(dir_err) => match self.read(&format!("{abs}.list")) {
                Ok(s) => s
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .take(MAX_LIST_ENTRIES)
                    .map(String::from)
                    .collect(),
                Err(_) => return Err(dir_err),
            },
        };
        names.sort();
        Ok(names)
    }

    /// Real path of `/sys/bus/pci/devices/BDF` (e.g.
    /// `/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0`).
    pub fn pci_device_path(&self, bdf: &str) -> Option<String> {
        if let Some(p) = self.resolve_link(&format!("/sys/bus/pci/devices/{bdf}")) {
            return Some(p);
        }
        let map = self.read_capture_file("pci-device-paths.txt").ok()?;
        map.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == bdf).then(|| it.next().map(String::from))?
        })
    }

    /// The paths of the capture that were not read and why (a link out of
    /// it, a FIFO, a file over the limit), and how many more there were.
    pub fn refused(&self) -> (Vec<String>, u64) {
        let r = self.reads.refused.lock().unwrap_or_else(|e| e.into_inner());
        (r.list.clone(), r.more)
    }

    /// Bytes read through this tree so far.
    pub fn bytes_read(&self) -> u64 {
        self.reads.bytes.load(Ordering::Relaxed)
    }

    fn budget(&self) -> Option<u64> {
        self.confined.as_ref().map(|_| CAPTURE_READ_BUDGET)
    }

    fn open(&self, abs: &str) -> io::Result<(fs::File, u64)> {
        match &self.confined {
            Some(root) => root.open_file(&rel(abs)),
            None => open_live(&self.host(abs)),
        }
    }

    /// Keeps a refusal for the report; passes the result on.
    fn noted<T>(&self, abs: &str, r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r {
            if let Some(why) = Refusal::of(e) {
                let mut refused = self.reads.refused.lock().unwrap_or_else(|e| e.into_inner());
                let line = format!("{abs}: {why}");
                if refused.list.contains(&line) {
                } else if refused.list.len() < MAX_REFUSALS_KEPT {
                    refused.list.push(line);
                } else {
                    refused.more += 1;
                }
            }
        }
        r
    }
}

impl Reads {
    /// At most [`MAX_FILE_BYTES`] of `file` (and within `budget` in all).
    fn bounded(&self, file: fs::File, size: u64, budget: Option<u64>) -> io::Result<Vec<u8>> {
        if size > MAX_FILE_BYTES {
            return Err(Refusal::TooLarge {
                limit: MAX_FILE_BYTES,
            }
            .into_io());
        }
        let left = budget.map_or(u64::MAX, |b| {
            b.saturating_sub(self.bytes.load(Ordering::Relaxed))
        });
        let cap = MAX_FILE_BYTES.min(left);
        let mut v = Vec::with_capacity(size.min(cap) as usize);
        file.take(cap + 1).read_to_end(&mut v)?;
        if v.len() as u64 > cap {
            return Err(match budget {
                Some(limit) if cap < MAX_FILE_BYTES => Refusal::Budget { limit },
                _ => Refusal::TooLarge {
                    limit: MAX_FILE_BYTES,
                },
            }
            .into_io());
        }
        self.bytes.fetch_add(v.len() as u64, Ordering::Relaxed);
        Ok(v)
    }
}

/// `abs` as a path relative to a capture's root.
fn rel(abs: &str) -> PathBuf {
    PathBuf::from(abs.trim_start_matches('/'))
}

/// A live host's file: a regular file only (O_NONBLOCK: a FIFO put in its
/// place never blocks the open).
fn open_live(p: &Path) -> io::Result<(fs::File, u64)> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(p)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(Refusal::NotRegular(describe_type(&m)).into_io());
    }
    Ok((f, m.len()))
}

/// What a file is, in words (`a FIFO`), from its metadata.
pub fn describe_type(m: &fs::Metadata) -> &'static str {
    confined::describe(rustix::fs::FileType::from_raw_mode(
        std::os::unix::fs::MetadataExt::mode(m),
    ))
}

fn list_live(p: &Path) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for e in fs::read_dir(p)? {
        let Ok(e) = e else { continue };
        if names.len() >= MAX_LIST_ENTRIES {
            return Err(Refusal::TooManyEntries {
                limit: MAX_LIST_ENTRIES,
            }
            .into_io());
        }
        names.push(e.file_name().to_string_lossy().into_owned());
    }
    Ok(names)
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Lexical normalisation of an absolute path (`..` and `.` removed).
pub fn normalize(p: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                parts.pop();
            }
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    format!("/{}", parts.join("/"))
}

/// Parse a kernel cpulist (`0-3,8,10-11`). `None` when malformed.
pub fn parse_cpulist(s: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_resolves_sysfs_relative_link() {
        let p = Path::new("/sys/bus/pci/devices").join("../../../devices/pci0000:00/0000:00:06.0");
        assert_eq!(normalize(&p), "/sys/devices/pci0000:00/0000:00:06.0");
    }

    #[test]
    fn cpulist_ranges_and_singles() {
        assert_eq!(parse_cpulist("0-2,5,7-8"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpulist("0-31").map(|v| v.len()), Some(32));
        assert_eq!(parse_cpulist("x"), None);
        assert_eq!(parse_cpulist("3-1"), None);
    }

    /// A sparse file of `len` bytes (cheap to make, read as zeros).
    fn sparse(p: &Path, len: u64) {
        fs::File::create(p)
            .expect("create")
            .set_len(len)
            .expect("len");
    }

    #[test]
    fn reads_are_bounded_per_file_and_per_capture() {
        let dir = tempfile::tempdir().expect("tempdir");
        sparse(&dir.path().join("big"), MAX_FILE_BYTES + 1);
        let n = CAPTURE_READ_BUDGET / MAX_FILE_BYTES + 1;
        for i in 0..n {
            sparse(&dir.path().join(format!("f{i}")), MAX_FILE_BYTES);
        }
        let tree = Tree::captured(dir.path()).expect("tree");
        let e = tree.read_bytes("/big").expect_err("over the limit");
        assert!(
            matches!(Refusal::of(&e), Some(Refusal::TooLarge { .. })),
            "{e}"
        );
        assert_eq!(tree.bytes_read(), 0, "refused before reading");
        for i in 0..n - 1 {
            assert_eq!(
                tree.read_bytes(&format!("/f{i}")).expect("within").len() as u64,
                MAX_FILE_BYTES
            );
        }
        let e = tree
            .read_bytes(&format!("/f{}", n - 1))
            .expect_err("budget");
        assert!(e.to_string().contains("MiB read from this capture"), "{e}");
        assert_eq!(tree.bytes_read(), CAPTURE_READ_BUDGET);
        let (refused, more) = tree.refused();
        assert_eq!((refused.len(), more), (2, 0), "{refused:?}");
        assert!(
            refused[0].starts_with("/big: larger than 16 MiB"),
            "{refused:?}"
        );
    }

    #[test]
    fn a_capture_file_out_of_the_root_is_refused_and_noted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cap = dir.path().join("cap");
        fs::create_dir_all(cap.join("proc")).expect("mkdir");
        fs::write(dir.path().join("secret"), "SECRET").expect("write");
        std::os::unix::fs::symlink("../../secret", cap.join("proc/cmdline")).expect("link");
        std::os::unix::fs::symlink("../secret", cap.join("dmesg.txt")).expect("link");
        std::os::unix::fs::symlink("../../secret", cap.join("proc/x.list")).expect("link");
        let tree = Tree::captured(&cap).expect("tree");
        assert!(tree.read("/proc/cmdline").is_err());
        assert!(tree.read_capture_file("dmesg.txt").is_err());
        assert!(tree.list("/proc/x").is_err());
        // The link's own text may be read: it is in the capture.
        assert_eq!(tree.link("/proc/cmdline").as_deref(), Some("../../secret"));
        let (refused, _) = tree.refused();
        assert_eq!(refused.len(), 3, "{refused:?}");
        assert!(refused.iter().all(|r| r.contains("outside the capture")));
        assert!(!refused.iter().any(|r| r.contains("SECRET")));
        // Live reads stay as they were.
        assert!(Tree::live().read("/proc/self/status").is_ok());
        assert!(Tree::live().read_capture_file("dmesg.txt").is_err());
    }

    #[test]
    fn missing_root_is_one_clear_error() {
        let err = Tree::captured(Path::new("/nonexistent/doctor-root"))
            .expect_err("must fail")
            .to_string();
        assert!(err.contains("/nonexistent/doctor-root"), "{err}");
        assert!(!err.contains('\n'));
    }
}
