//! Reading inside a directory someone else wrote (a capture), and never
//! outside it.
//!
//! A capture is untrusted input (issue 30): a `proc/driver/nvidia/version`
//! that is a symlink to `/etc/shadow` made `doctor --root` print a line of
//! it as evidence, and `--capture` from that root copied the whole file. So
//! every path under the root is resolved by the kernel with `openat2(2)`
//! `RESOLVE_BENEATH` (Linux 5.6+): a symlink may point anywhere inside the
//! root, but an absolute one, a `..` above the root and a magic link fail
//! with EXDEV. Where the kernel has no openat2 (or a seccomp filter hides
//! it), a component walk does the same: each name opened `O_PATH|O_NOFOLLOW`
//! below the directory before it, links read and resolved against a stack
//! of directories this walk opened (so a `..` never leaves the root), at
//! most [`MAX_LINKS`] of them.
//!
//! The file found is opened `O_PATH` first and checked: only a regular
//! file (or, for listings, a directory) is then opened for reading, through
//! its own descriptor. A FIFO, a socket or a device node (a capture
//! unpacked by root may hold any; opening some, a watchdog, has effects)
//! is never opened at all.

use std::{
    ffi::{OsStr, OsString},
    fmt, fs, io,
    os::{
        fd::{AsFd as _, AsRawFd as _, OwnedFd},
        unix::ffi::{OsStrExt as _, OsStringExt as _},
    },
    path::{Component, Path},
    sync::atomic::{AtomicU8, Ordering},
};

use rustix::fs::{self as rfs, FileType, Mode, OFlags, ResolveFlags};

/// Symbolic links followed while resolving one path, as the kernel's
/// MAXSYMLINKS: a longer chain (or a loop) is refused.
pub const MAX_LINKS: u32 = 40;

/// Why a path of a capture was not read: said to the user as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A symlink (or `..`) on the way leads out of the capture.
    Escapes,
    /// More than [`MAX_LINKS`] links, or a loop.
    LinkChain,
    /// A FIFO, device node or socket (or a directory where a file was
    /// wanted).
    NotRegular(&'static str),
    /// Larger than the limit for one file.
    TooLarge { limit: u64 },
    /// The whole capture's read budget is spent.
    Budget { limit: u64 },
    /// A directory with more entries than a listing keeps.
    TooManyEntries { limit: usize },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Escapes => f.write_str(
                "a symbolic link (or ..) on its path leads outside the capture: not followed",
            ),
            Refusal::LinkChain => write!(
                f,
                "more than {MAX_LINKS} symbolic links on its path (a loop?): not followed"
            ),
            Refusal::NotRegular(what) => write!(f, "{what}, not a regular file: not opened"),
            Refusal::TooLarge { limit } => write!(
                f,
                "larger than {} MiB, the limit for one file: not read",
                limit >> 20
            ),
            Refusal::Budget { limit } => write!(
                f,
                "the {} MiB read from this capture already are its limit: not read",
                limit >> 20
            ),
            Refusal::TooManyEntries { limit } => {
                write!(f, "more than {limit} entries: not listed")
            }
        }
    }
}

impl std::error::Error for Refusal {}

impl Refusal {
    pub fn into_io(self) -> io::Error {
        let kind = match self {
            Refusal::TooLarge { .. } | Refusal::Budget { .. } | Refusal::TooManyEntries { .. } => {
                io::ErrorKind::FileTooLarge
            }
            _ => io::ErrorKind::PermissionDenied,
        };
        io::Error::new(kind, self)
    }

    /// The refusal inside an error this module returned, if it is one.
    pub fn of(e: &io::Error) -> Option<&Refusal> {
        e.get_ref().and_then(|r| r.downcast_ref::<Refusal>())
    }
}

pub fn describe(ft: FileType) -> &'static str {
    match ft {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "a file of unknown type",
    }
}

/// How paths are resolved: decided once per process by the first try.
const UNKNOWN: u8 = 0;
const OPENAT2: u8 = 1;
const WALK: u8 = 2;
static METHOD: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The way to resolve a path beneath the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The kernel's openat2 RESOLVE_BENEATH.
    Openat2,
    /// A component walk in user space (kernels before 5.6).
    Walk,
}

/// A directory whose paths are resolved inside it.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
}

impl Root {
    /// The directory at `path` (the user's own argument: followed if it is
    /// a link; only what is below it is confined).
    pub fn open(path: &Path) -> io::Result<Self> {
        let dir = rfs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self { dir })
    }

    /// An `O_PATH` descriptor of `rel` (relative to the root), links
    /// followed only while they stay inside; with `nofollow` a link as the
    /// last component is the link itself.
    pub fn resolve(&self, rel: &Path, nofollow: bool) -> io::Result<OwnedFd> {
        match METHOD.load(Ordering::Relaxed) {
            OPENAT2 => self.resolve_with(Method::Openat2, rel, nofollow),
            WALK => self.resolve_with(Method::Walk, rel, nofollow),
            _ => match self.resolve_with(Method::Openat2, rel, nofollow) {
                Err(e) if openat2_missing(&e) => {
                    METHOD.store(WALK, Ordering::Relaxed);
                    self.resolve_with(Method::Walk, rel, nofollow)
                }
                r => {
                    METHOD.store(OPENAT2, Ordering::Relaxed);
                    r
                }
            },
        }
    }

    /// `resolve` with the given method (the tests try both).
    pub fn resolve_with(&self, m: Method, rel: &Path, nofollow: bool) -> io::Result<OwnedFd> {
        match m {
            Method::Openat2 => {
                let mut flags = OFlags::PATH | OFlags::CLOEXEC;
                if nofollow {
                    flags |= OFlags::NOFOLLOW;
                }
                let rel: &Path = if rel.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    rel
                };
                rfs::openat2(
                    &self.dir,
                    rel,
                    flags,
                    Mode::empty(),
                    ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
                )
                .map_err(|e| match e {
                    rustix::io::Errno::XDEV => Refusal::Escapes.into_io(),
                    rustix::io::Errno::LOOP => Refusal::LinkChain.into_io(),
                    e => e.into(),
                })
            }
            Method::Walk => self.walk(rel, nofollow),
        }
    }

    /// The component walk: every name opened below a directory this walk
    /// holds, never through a path the file system resolves for us.
    fn walk(&self, rel: &Path, nofollow: bool) -> io::Result<OwnedFd> {
        // Components still to resolve, the next one last.
        let mut todo: Vec<OsString> = Vec::new();
        push_components(&mut todo, rel)?;
        // The directories below the root we are in; the root is implied.
        let mut stack: Vec<OwnedFd> = Vec::new();
        let mut links = 0;
        while let Some(name) = todo.pop() {
            if name == ".." {
                if stack.pop().is_none() {
                    return Err(Refusal::Escapes.into_io());
                }
                continue;
            }
            let last = todo.is_empty();
            let fd = {
                let parent = stack.last().map_or(self.dir.as_fd(), |d| d.as_fd());
                rfs::openat(
                    parent,
                    name.as_os_str(),
                    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?
            };
            let ft = FileType::from_raw_mode(rfs::fstat(&fd)?.st_mode);
            if ft == FileType::Symlink && !(last && nofollow) {
                links += 1;
                if links > MAX_LINKS {
                    return Err(Refusal::LinkChain.into_io());
                }
                let target = rfs::readlinkat(&fd, "", Vec::new())?;
                let target = OsString::from_vec(target.into_bytes());
                if Path::new(&target).is_absolute() {
                    return Err(Refusal::Escapes.into_io());
                }
                push_components(&mut todo, Path::new(&target))?;
                continue;
            }
            if last {
                return Ok(fd);
            }
            if ft != FileType::Directory {
                return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
            }
            stack.push(fd);
        }
        // Nothing left to resolve: the directory we are in.
        match stack.pop() {
            Some(d) => Ok(d),
            None => self.dir.try_clone(),
        }
    }

    /// The regular file at `rel`, open for reading. Anything else is
    /// refused before it is opened.
    pub fn open_file(&self, rel: &Path) -> io::Result<(fs::File, u64)> {
        let fd = self.resolve(rel, false)?;
        let st = rfs::fstat(&fd)?;
        let ft = FileType::from_raw_mode(st.st_mode);
        if ft != FileType::RegularFile {
            return Err(Refusal::NotRegular(describe(ft)).into_io());
        }
        let file = reopen(&fd, OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)?;
        Ok((fs::File::from(file), u64::try_from(st.st_size).unwrap_or(0)))
    }

    /// The names in the directory at `rel` (unsorted; `.` and `..` left
    /// out), at most `limit` of them.
    pub fn list(&self, rel: &Path, limit: usize) -> io::Result<Vec<OsString>> {
        let fd = self.resolve(rel, false)?;
        let ft = FileType::from_raw_mode(rfs::fstat(&fd)?.st_mode);
        if ft != FileType::Directory {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        let dir = rfs::Dir::new(reopen(&fd, OFlags::RDONLY | OFlags::DIRECTORY)?)?;
        let mut names = Vec::new();
        for entry in dir {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if names.len() >= limit {
                return Err(Refusal::TooManyEntries { limit }.into_io());
            }
            names.push(OsStr::from_bytes(name).to_owned());
        }
        Ok(names)
    }

    /// The target of the symlink at `rel` (its text, not followed);
    /// `Ok(None)` when `rel` is not a link.
    pub fn read_link(&self, rel: &Path) -> io::Result<Option<OsString>> {
        let fd = self.resolve(rel, true)?;
        if FileType::from_raw_mode(rfs::fstat(&fd)?.st_mode) != FileType::Symlink {
            return Ok(None);
        }
        let t = rfs::readlinkat(&fd, "", Vec::new())?;
        Ok(Some(OsString::from_vec(t.into_bytes())))
    }

    /// Whether `rel` names anything (a link counts, wherever it points).
    pub fn exists(&self, rel: &Path) -> bool {
        self.resolve(rel, true).is_ok()
    }
}

/// Whether an openat2 failure means the kernel (or a seccomp filter) has
/// no openat2 at all: then the walk is used.
fn openat2_missing(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::EOPNOTSUPP)
    ) && Refusal::of(e).is_none()
}

/// `path`'s components pushed onto `todo` so that its first is popped
/// first. `.` and the root are dropped (a link's target was checked to be
/// relative).
fn push_components(todo: &mut Vec<OsString>, path: &Path) -> io::Result<()> {
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => parts.push(n.to_owned()),
            Component::ParentDir => parts.push("..".into()),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err(Refusal::Escapes.into_io());
            }
        }
    }
    todo.extend(parts.into_iter().rev());
    Ok(())
}

/// A readable descriptor of what the `O_PATH` descriptor `fd` names,
/// reopened through its /proc/self/fd entry: the same inode, whatever
/// happened to the path since.
fn reopen(fd: &OwnedFd, flags: OFlags) -> io::Result<OwnedFd> {
    let proc = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rfs::open(proc.as_str(), flags | OFlags::CLOEXEC, Mode::empty()).map_err(|e| {
        io::Error::new(
            io::Error::from(e).kind(),
            format!("cannot reopen a capture's file through {proc} ({e}): is /proc mounted?"),
        )
    })
}

#[cfg(test)]
#[path = "confined_tests.rs"]
mod tests;
