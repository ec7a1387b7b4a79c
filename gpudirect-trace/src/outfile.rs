//! The one way the tool creates an output file (record, export, report
//! --html, doctor --capture, snapshots).
//!
//! Why: opening with `O_CREAT|O_TRUNC` and then `chmod 0600` (what the
//! writers did) destroyed a trace when `record --force` failed to start,
//! truncated the target of a symlink, and turned a copy of /dev/null into
//! `crw-------` (issue 19). The rules here:
//! - without `force`: a new file, `O_CREAT|O_EXCL|O_NOFOLLOW`, mode 0600; an
//!   existing name (a symlink included, dangling or not) is refused;
//! - with `force`: a new temporary file in the same directory (0600,
//!   `O_EXCL`), renamed over the old name only by [`Output::commit`]; until
//!   then the old file is untouched, and dropping an uncommitted output
//!   removes the temporary. A symlink is replaced itself, its target never
//!   written;
//! - never truncate or chmod anything that is not our own new regular file:
//!   directories are refused, device nodes/FIFOs/sockets too unless
//!   `allow_special` (then they are opened for writing as they are, e.g. a
//!   FIFO a consumer reads); a symlink to one of them is never replaced;
//! - `/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N` with
//!   `allow_special`: a duplicate of that descriptor of this process (the
//!   pipe, terminal or file the shell opened, with its offset and
//!   O_APPEND), never a reopened or replaced path;
//! - `-` is standard output, as Unix tools have it (issue 30: it wrote a
//!   file named `-`); a binary output is never written to a terminal;
//! - the file the command reads is never its output (`report f.gdt --html
//!   f.gdt --force` replaced its own input): compared by device and inode,
//!   through links, not by name;
//! - every file created here is locked (flock, exclusive) while it is
//!   written, and `--force` never replaces a file another writer holds
//!   locked (a second `record --force` on the same name unlinked the first
//!   recorder's file under it, and its data went nowhere).

use std::{
    ffi::OsString,
    fs::{self, File, OpenOptions},
    io::{self, Write},
    os::{
        fd::FromRawFd as _,
        unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _},
    },
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::{anyhow, bail};

/// How an output may be created (`commands::OutputFlags` is the
/// command-line form).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Replace an existing regular file (or symlink) at commit time.
    pub force: bool,
    /// Write into an existing device node, FIFO or socket as it is.
    pub allow_special: bool,
    /// The output is binary (a trace, an archive): never to a terminal.
    pub binary: bool,
    /// (st_dev, st_ino) of the file the command reads: never the output.
    pub input: Option<(u64, u64)>,
}

impl Options {
    /// A binary output: `-` is refused when standard output is a terminal.
    pub fn binary(mut self) -> Self {
        self.binary = true;
        self
    }

    /// The command reads `input`: the output may not be that file (by
    /// device and inode, links followed as the reader follows them).
    pub fn reading(mut self, input: &Path) -> Self {
        if let Ok(m) = fs::metadata(input) {
            self.input = Some((m.dev(), m.ino()));
        }
        self
    }
}

/// Whether `path` means standard output (`-`).
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// How messages name an output: `-` is "standard output".
pub fn display(path: &Path) -> String {
    if is_stdout(path) {
        "standard output".to_owned()
    } else {
        path.display().to_string()
    }
}

#[derive(Debug)]
enum Kind {
    /// We created `path`; an uncommitted drop removes it.
    New { path: PathBuf },
    /// We created `tmp`; commit renames it over `dest`.
    Replace { tmp: PathBuf, dest: PathBuf },
    /// An existing special file opened as it is.
    Special,
}

/// An output file being written. Write to it, then [`Output::commit`];
/// dropped without commit, it leaves the file system as it was.
#[derive(Debug)]
pub struct Output {
    file: Option<File>,
    kind: Kind,
    /// (st_dev, st_ino) of what we created, so cleanup removes only that.
    id: (u64, u64),
}

fn describe(ft: fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "a regular file"
    }
}

fn file_id(f: &File) -> io::Result<(u64, u64)> {
    let m = f.metadata()?;
    Ok((m.dev(), m.ino()))
}

/// A fresh file at `path`: never an existing name, never through a link;
/// locked for as long as any descriptor of it is open.
fn create_new(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    // Nobody else can hold a lock on a file this new; a file system
    // without flock (some network ones) only loses the second-writer check.
    let _ = rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive);
    Ok(f)
}

/// The regular file at `dest`, locked, if it is there: another writer
/// holding its lock (a recorder still writing it) makes this an error.
/// A link, a special file or a file system without locks gives None.
fn lock_existing(dest: &Path) -> anyhow::Result<Option<File>> {
    // Retried when the name changed hands between the open and the lock.
    for _ in 0..8 {
        let Ok(f) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(dest)
        else {
            return Ok(None);
        };
        let Ok(id) = file_id(&f) else {
            return Ok(None);
        };
        if !f.metadata().is_ok_and(|m| m.is_file()) {
            return Ok(None);
        }
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => bail!(
                "{} is being written by another process (it holds the file's lock, as a \
                 running `record` does): not replacing it",
                dest.display()
            ),
            Err(_) => return Ok(None),
        }
        match fs::symlink_metadata(dest) {
            Ok(m) if (m.dev(), m.ino()) == id => return Ok(Some(f)),
            _ => continue,
        }
    }
    bail!(
        "{} keeps being replaced by another process: not replacing it",
        dest.display()
    )
}

/// Refuses the input as output (`report f.gdt --html f.gdt --force`).
fn refuse_input(path: &Path, opts: Options) -> anyhow::Result<()> {
    let Some(input) = opts.input else {
        return Ok(());
    };
    if is_one_of(path, &[input]) {
        bail!(
            "{} is the file being read: refusing to write over it (give another output)",
            path.display()
        );
    }
    Ok(())
}

/// Refuses any of `inputs` as the output `path`, for a command that reads
/// many files (`report DIR --html`); `create` then applies the rest of
/// the rules. One file's commands say theirs through `Options::reading`.
pub fn refuse_inputs(path: &Path, inputs: &[PathBuf]) -> anyhow::Result<()> {
    let ids: Vec<(u64, u64)> = inputs
        .iter()
        .filter_map(|f| fs::metadata(f).ok())
        .map(|m| (m.dev(), m.ino()))
        .collect();
    if is_one_of(path, &ids) {
        bail!(
            "{} is one of the files being read: give --html another name",
            display(path)
        );
    }
    Ok(())
}

/// Whether `path`, or the file a link there leads to, is one of the files
/// `ids` names by device and inode (never by name: links and hard links
/// alike).
fn is_one_of(path: &Path, ids: &[(u64, u64)]) -> bool {
    [fs::symlink_metadata(path), fs::metadata(path)]
        .into_iter()
        .flatten()
        .any(|m| ids.contains(&(m.dev(), m.ino())))
}

/// Standard output (`-o -`), as it is: never a terminal for binary data.
fn stdout_output(opts: Options) -> anyhow::Result<Output> {
    use std::io::IsTerminal as _;
    if opts.binary && io::stdout().is_terminal() {
        bail!(
            "refusing to write binary data to a terminal: redirect standard output (> FILE, | \
             CMD) or give a file name"
        );
    }
    let file = dup_fd(1).map_err(|e| anyhow!("cannot write to standard output: {e}"))?;
    if let (Some(input), Ok(m)) = (opts.input, file.metadata()) {
        if (m.dev(), m.ino()) == input {
            bail!("standard output is the file being read: refusing to write over it");
        }
    }
    Ok(Output {
        file: Some(file),
        kind: Kind::Special,
        id: (0, 0),
    })
}

/// Opens an existing special file for writing as it is: no O_CREAT, no
/// O_TRUNC, no chmod; O_NOCTTY so a terminal never becomes ours.
fn open_special(path: &Path, what: &str) -> anyhow::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(path)
        .map_err(|e| anyhow!("cannot open {} ({what}): {e}", path.display()))?;
    let ft = f.metadata()?.file_type();
    if ft.is_file() || ft.is_dir() {
        // Swapped between the check and the open: not what was allowed.
        bail!(
            "{} changed while it was being opened; not writing to it",
            path.display()
        );
    }
    Ok(f)
}

/// The descriptor a path names when it is one of this process's own:
/// /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N.
fn own_fd(path: &Path) -> Option<i32> {
    let s = path.to_str()?;
    match s {
        "/dev/stdout" => Some(1),
        "/dev/stderr" => Some(2),
        _ => s
            .strip_prefix("/dev/fd/")
            .or_else(|| s.strip_prefix("/proc/self/fd/"))
            .and_then(|n| n.parse().ok()),
    }
}

/// A duplicate of descriptor `fd` (same open file: offset, O_APPEND).
fn dup_fd(fd: i32) -> io::Result<File> {
    // SAFETY: F_DUPFD_CLOEXEC only reads `fd`; a new descriptor we own, or -1.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` was just returned to us and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(new) })
}

static TMP_SEQ: AtomicU32 = AtomicU32::new(0);

/// `.NAME.gdt-tmp.PID.N` next to `dest`, created with O_EXCL.
fn create_temp(dest: &Path) -> anyhow::Result<(File, PathBuf)> {
    let name = dest
        .file_name()
        .ok_or_else(|| anyhow!("{} names no file", dest.display()))?;
    let dir = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut last = None;
    for _ in 0..16 {
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(
            ".gdt-tmp.{}.{}",
            std::process::id(),
            TMP_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = dir.join(tmp_name);
        match create_new(&tmp) {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                return Err(anyhow!(
                    "cannot create a temporary file in {} to replace {}: {e}",
                    dir.display(),
                    dest.display()
                ))
            }
        }
    }
    Err(anyhow!(
        "cannot create a temporary file in {}: {}",
        dir.display(),
        last.map_or_else(|| "name taken".to_owned(), |e| e.to_string())
    ))
}

/// Creates the output `path` under `opts` (see the module comment). The
/// errors are one line each and say what to do.
pub fn create(path: &Path, opts: Options) -> anyhow::Result<Output> {
    if is_stdout(path) {
        return stdout_output(opts);
    }
    refuse_input(path, opts)?;
    let p = path.display();
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => bail!("cannot create {p}: {e}"),
    };
    let Some(meta) = meta else {
        return match create_new(path) {
            Ok(file) => Ok(Output {
                id: file_id(&file)?,
                file: Some(file),
                kind: Kind::New {
                    path: path.to_owned(),
                },
            }),
            // Created by someone else since the check: same as existing.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && !opts.force => {
                bail!("{p} exists; pass --force to replace it")
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => create(path, opts),
            Err(e) => bail!("cannot create {p}: {e}"),
        };
    };
    let ft = meta.file_type();
    if ft.is_symlink() {
        // /dev/stdout, /dev/fd/N: this process's own descriptor, written as
        // it is (a pipe, a terminal, the file the shell opened), never the
        // link replaced (as root, --force would have renamed over
        // /dev/stdout itself).
        if let Some(fd) = own_fd(path) {
            if !opts.allow_special {
                bail!(
                    "{p} is this process's descriptor {fd}; pass --output-special to write to it"
                );
            }
            return Ok(Output {
                file: Some(dup_fd(fd).map_err(|e| anyhow!("cannot write to {p}: {e}"))?),
                kind: Kind::Special,
                id: (0, 0),
            });
        }
        match fs::metadata(path) {
            Ok(t) if t.is_dir() => {
                bail!("{p} is a symbolic link to a directory; give the path of a file to write")
            }
            // A link to a device, FIFO or socket: never replaced, and
            // written through only when allowed.
            Ok(t) if !t.is_file() => {
                if !opts.allow_special {
                    bail!(
                        "{p} is a symbolic link to {}; refusing to write to it (pass \
                         --output-special to write into it as it is)",
                        describe(t.file_type())
                    );
                }
                return Ok(Output {
                    file: Some(open_special(path, describe(t.file_type()))?),
                    kind: Kind::Special,
                    id: (0, 0),
                });
            }
            // A link to a regular file, or dangling: replaced with --force.
            _ if !opts.force => bail!(
                "{p} is a symbolic link; not following it (pass --force to replace the link \
                 itself with a new file)"
            ),
            _ => {}
        }
    } else if ft.is_dir() {
        bail!("{p} is a directory; give the path of a file to write");
    } else if !ft.is_file() {
        if !opts.allow_special {
            bail!(
                "{p} is {}, not a regular file; refusing to write to it (pass --output-special \
                 to write into it as it is)",
                describe(ft)
            );
        }
        return Ok(Output {
            file: Some(open_special(path, describe(ft))?),
            kind: Kind::Special,
            id: (0, 0),
        });
    } else if !opts.force {
        bail!("{p} exists; pass --force to replace it");
    }
    // Said now rather than after a whole recording; checked again at commit.
    drop(lock_existing(path)?);
    let (file, tmp) = create_temp(path)?;
    Ok(Output {
        id: file_id(&file)?,
        file: Some(file),
        kind: Kind::Replace {
            tmp,
            dest: path.to_owned(),
        },
    })
}

/// Removes `path` only if it is still the file we created.
fn remove_ours(path: &Path, id: (u64, u64)) {
    if let Ok(m) = fs::symlink_metadata(path) {
        if (m.dev(), m.ino()) == id {
            let _ = fs::remove_file(path);
        }
    }
}

impl Output {
    /// The file being written.
    pub fn file(&mut self) -> &mut File {
        self.file
            .as_mut()
            .expect("the file is present until commit")
    }

    /// Whether committing replaces a file that exists (`--force`).
    pub fn replaces_existing(&self) -> bool {
        matches!(self.kind, Kind::Replace { .. })
    }

    /// Whether the output is a special file opened as it is.
    pub fn is_special(&self) -> bool {
        matches!(self.kind, Kind::Special)
    }

    /// Makes the output final: a replacement is renamed over the old name
    /// (atomically: readers see the old file or the new one, never a mix).
    /// Returns the file to go on writing (record writes after commit).
    pub fn commit(mut self) -> anyhow::Result<File> {
        let file = self.file.take().expect("commit is called once");
        if let Kind::Replace { tmp, dest } = &self.kind {
            // Held across the rename: a writer that took the name after
            // our check holds its own file's lock, and is not replaced.
            let _old = lock_existing(dest)?;
            fs::rename(tmp, dest).map_err(|e| {
                anyhow!(
                    "cannot replace {} with {}: {e}",
                    dest.display(),
                    tmp.display()
                )
            })?;
        }
        // Committed: nothing to clean up on drop.
        self.kind = Kind::Special;
        Ok(file)
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file().write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file().flush()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        match &self.kind {
            Kind::New { path } => remove_ours(path, self.id),
            Kind::Replace { tmp, .. } => remove_ours(tmp, self.id),
            Kind::Special => {}
        }
    }
}

#[cfg(test)]
#[path = "outfile_tests.rs"]
mod tests;
