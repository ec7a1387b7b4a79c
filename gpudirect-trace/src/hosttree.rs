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

use std::{
    fs, io,
    path::{Component, Path, PathBuf},
};

/// Where files are read from.
#[derive(Debug, Clone)]
pub struct Tree {
    root: PathBuf,
    live: bool,
}

impl Tree {
    /// The running host (`/`).
    pub fn live() -> Self {
        Self {
            root: PathBuf::from("/"),
            live: true,
        }
    }

    /// A captured tree. Fails with one clear message when `root` is not a directory.
    pub fn captured(root: &Path) -> anyhow::Result<Self> {
        match fs::metadata(root) {
            Ok(m) if m.is_dir() => Ok(Self {
                root: root.to_path_buf(),
                live: false,
            }),
            Ok(_) => anyhow::bail!("--root {}: not a directory", root.display()),
            Err(e) => anyhow::bail!("--root {}: {e}", root.display()),
        }
    }

    pub fn is_live(&self) -> bool {
        self.live
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Host path -> path on this machine.
    pub fn host(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    /// A text file, trailing whitespace trimmed.
    pub fn read(&self, abs: &str) -> io::Result<String> {
        let s = fs::read_to_string(self.host(abs))?;
        Ok(s.trim_end().to_string())
    }

    pub fn read_bytes(&self, abs: &str) -> io::Result<Vec<u8>> {
        fs::read(self.host(abs))
    }

    pub fn exists(&self, abs: &str) -> bool {
        let p = self.host(abs);
        fs::symlink_metadata(&p).is_ok()
            || fs::metadata(with_suffix(&p, ".link")).is_ok()
            || fs::metadata(with_suffix(&p, ".list")).is_ok()
    }

    /// Target of a symlink, raw (as `readlink` gives it): a real symlink or a
    /// `NAME.link` file.
    pub fn link(&self, abs: &str) -> Option<String> {
        let p = self.host(abs);
        if let Ok(t) = fs::read_link(&p) {
            return Some(t.to_string_lossy().into_owned());
        }
        fs::read_to_string(with_suffix(&p, ".link"))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// Symlink target resolved to an absolute host path (lexically, so it works
    /// inside a capture).
    pub fn resolve_link(&self, abs: &str) -> Option<String> {
        let target = self.link(abs)?;
        let base = Path::new(abs).parent().unwrap_or(Path::new("/"));
        Some(normalize(&base.join(target)))
    }

    /// Entries of a directory (sorted): a real directory or a `NAME.list` file.
    pub fn list(&self, abs: &str) -> io::Result<Vec<String>> {
        let p = self.host(abs);
        let mut names: Vec<String> = match fs::read_dir(&p) {
            Ok(rd) => rd
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(dir_err) => match fs::read_to_string(with_suffix(&p, ".list")) {
                Ok(s) => s
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
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
        let map = fs::read_to_string(self.root.join("pci-device-paths.txt")).ok()?;
        map.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == bdf).then(|| it.next().map(String::from))?
        })
    }
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

    #[test]
    fn missing_root_is_one_clear_error() {
        let err = Tree::captured(Path::new("/nonexistent/doctor-root"))
            .expect_err("must fail")
            .to_string();
        assert!(err.contains("/nonexistent/doctor-root"), "{err}");
        assert!(!err.contains('\n'));
    }
}
