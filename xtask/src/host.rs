//! Host helpers shared by xtask subcommands: paths, the cache's file locks,
//! running tools, installing missing Debian packages.

use std::{
    fs,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};

/// The workspace root (xtask lives one level below it).
pub fn repo_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

/// Where cargo puts build outputs for this workspace.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d),
        None => repo_root().join("target"),
    }
}

/// `<repo>/.cache/vm`, created on demand.
pub fn vm_cache() -> Result<PathBuf> {
    let dir = repo_root().join(".cache").join("vm");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// An exclusive advisory lock on a file, held until dropped: two worktrees
/// share one `.cache` and may build the same thing at once.
pub struct Lock(#[allow(dead_code)] fs::File);

impl Lock {
    pub fn take(path: &Path) -> Result<Self> {
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: flock on a descriptor this function owns; it blocks until free.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            bail!(
                "flock {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
        Ok(Self(f))
    }
}

/// Runs a command to completion, failing on a non-zero status.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// Runs a command and returns its stdout; stderr passes through.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn is_installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

fn is_root() -> bool {
    output(Command::new("id").arg("-u"))
        .map(|s| s.trim() == "0")
        .unwrap_or(false)
}

/// Installs the Debian packages in `pkgs` that are missing, saying which.
pub fn ensure_packages(pkgs: &[&str]) -> Result<()> {
    let missing: Vec<&str> = pkgs.iter().copied().filter(|p| !is_installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!(
        "xtask: installing missing host packages: {}",
        missing.join(" ")
    );
    let apt = |args: &[&str]| -> Command {
        let mut c = if is_root() {
            Command::new("apt-get")
        } else {
            let mut c = Command::new("sudo");
            c.arg("apt-get");
            c
        };
        c.env("DEBIAN_FRONTEND", "noninteractive").args(args);
        c
    };
    run(&mut apt(&["update", "-q"]))?;
    let mut install = apt(&["install", "-y", "-q", "--no-install-recommends"]);
    install.args(&missing);
    run(&mut install)
}

/// Packages the VM harness needs on the host.
pub const VM_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "kmod",
    "xz-utils",
    "zstd",
    "debian-archive-keyring",
];
