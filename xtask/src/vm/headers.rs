//! Debian's kernel headers for a guest kernel, to build test modules against
//! (kmod.rs): `linux-headers-<release>` and the packages it depends on
//! (`linux-headers-<release>-common`, `linux-kbuild-*`), fetched with
//! `apt-get download` through the same private apt configuration as the
//! kernels, unpacked with `dpkg-deb -x` under `.cache/vm/headers/<release>/`.
//!
//! Two things make an unpacked tree usable on this host, both measured on
//! Debian 12 (gcc 12.2, glibc 2.36) with trixie's 6.12.117 headers:
//! - Tools: trixie's prebuilt modpost, objtool and resolve_btfids need glibc
//!   2.38 (`__isoc23_strtoul`). Those that need a newer glibc than the host's
//!   are wrapped to run under the suite's own libc6, unpacked next to them
//!   and started through its dynamic loader.
//! - Compiler: 6.12 was configured with gcc 14, which this host lacks. The
//!   build falls back to the host's gcc, and the Kconfig answers that the
//!   kernel's own Kconfig gives differently for that gcc are rewritten in
//!   the tree's autoconf.h and auto.conf (headers_cc.rs).

use std::{
    fs,
    io::Write,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};

use super::{
    debian::{self, Dep},
    headers_cc,
    kernel::{suite_of, Kernel, PrivateApt},
};
use crate::host;

/// Bump when the unpack or its fix-ups change: older trees are redone.
const LAYOUT: u32 = 3;

/// An unpacked, fixed-up headers tree and how to build against it.
#[derive(Debug)]
pub struct Headers {
    /// The tree `make -C` is pointed at (`usr/src/linux-headers-<release>`).
    pub build_dir: PathBuf,
    /// The compiler to pass as `CC=`.
    pub cc: String,
    /// What was changed to build with `cc`, one line each (empty: nothing).
    pub notes: Vec<String>,
}

/// Returns the headers for `k`, fetching and fixing them up first if needed.
pub fn fetch(k: &Kernel) -> Result<Headers> {
    host::ensure_packages(&["make", "gcc", "libelf1", "binutils"])?;
    let base = host::vm_cache()?.join("headers");
    fs::create_dir_all(&base)?;
    // One canonical path, whichever worktree asks: it is written into the tree.
    let base = base.canonicalize()?;
    let dir = base.join(&k.release);
    let _lock = host::Lock::take(&base.join(format!("{}.lock", k.release)))?;
    let ready = dir.join(".ready");
    let stamp = format!("layout={LAYOUT} dir={}\n", dir.display());
    if fs::read_to_string(&ready).ok().as_deref() != Some(stamp.as_str()) {
        unpack(k, &dir)?;
        fs::write(&ready, &stamp)?;
    }
    let build_dir = dir
        .join("root/usr/src")
        .join(format!("linux-headers-{}", k.release));
    let notes = fs::read_to_string(dir.join("notes.txt")).unwrap_or_default();
    Ok(Headers {
        build_dir,
        cc: fs::read_to_string(dir.join("cc.txt"))?.trim().to_string(),
        notes: notes.lines().map(str::to_string).collect(),
    })
}

fn unpack(k: &Kernel, dir: &Path) -> Result<()> {
    let suite = suite_of(&k.series)?;
    let apt = PrivateApt::new(suite)?;
    if dir.exists() {
        fs::remove_dir_all(dir)?;
    }
    let root = dir.join("root");
    let dl = dir.join("deb");
    fs::create_dir_all(&dl)?;
    let top = format!("linux-headers-{}", k.release);
    if !apt.has_package(&top) {
        // The list may predate the kernel's upload: refresh once.
        host::run(apt.cmd("apt-get").arg("update"))?;
    }
    if apt.has_package(&top) {
        let show = host::output(
            apt.cmd("apt-cache")
                .args(["show", "--no-all-versions", &top]),
        )
        .with_context(|| format!("apt-cache show {top} (is the {suite} list current?)"))?;
        // Pinned versions (`(= V)`) are downloaded as such: the -common tree
        // must be the kernel's own, whatever else the suite (or the host) has.
        let mut pkgs = vec![top.clone()];
        pkgs.extend(
            header_deps(&debian::depends_field(&show))
                .iter()
                .map(debian::download_spec),
        );
        eprintln!(
            "xtask: downloading {} into {}",
            pkgs.join(" "),
            dir.display()
        );
        download(&apt, &pkgs, &dl)?;
    } else {
        // trixie-backports keeps older signed images but only the newest
        // kernel source's other packages, so an image can outlive its
        // headers in the lists (6.18.15 from 2026-12-02, backports at 7.3)
        // while the archive's pool still holds them.
        from_pool(&apt, k, &top, &dl).map_err(|e| {
            super::Missing(format!(
                "{top} is not in Debian {suite}'s package lists, nor in its pool \
                 ({e:#}): no test modules for {}",
                k.release
            ))
        })?;
    }
    for deb in debs(&dl)? {
        host::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
    }
    fs::remove_dir_all(&dl)?;
    let build_dir = root.join("usr/src").join(&top);
    let mk = build_dir.join("Makefile");
    let text = fs::read_to_string(&mk).with_context(|| format!("{top} has no Makefile"))?;
    fs::write(&mk, rebase_makefile(&text, &root.join("usr/src")))?;

    // A backports suite carries no libc6: its tools were built against the
    // release's (trixie-backports: trixie's).
    let base = suite.strip_suffix("-backports").unwrap_or(suite);
    let mut notes = wrap_new_glibc_tools(&PrivateApt::new(base)?, dir, &root)?;
    let config = fs::read_to_string(build_dir.join(".config"))?;
    let (cc, cc_notes) = headers_cc::pick_cc(&config, &build_dir)?;
    notes.extend(cc_notes);
    fs::write(dir.join("cc.txt"), format!("{cc}\n"))?;
    fs::write(dir.join("notes.txt"), notes.join("\n"))?;
    Ok(())
}

/// The arch tree's Makefile names the installed paths absolutely: the common
/// tree it includes (`include /usr/src/...-common/Makefile`) and, from 7.x,
/// itself as the build directory (`KBUILD_OUTPUT=/usr/src/...`, which the
/// common Makefile requires to exist). Both are pointed at the unpacked tree.
pub fn rebase_makefile(text: &str, src: &Path) -> String {
    let to = format!("{}/", src.display());
    text.replace(" /usr/src/", &format!(" {to}"))
        .replace("=/usr/src/", &format!("={to}"))
}

fn download(apt: &PrivateApt, pkgs: &[String], dl: &Path) -> Result<()> {
    let get = || {
        host::run(
            apt.cmd("apt-get")
                .arg("download")
                .args(pkgs)
                .current_dir(dl),
        )
    };
    if get().is_err() {
        // The suite's package list may be older than its archive: refresh once.
        host::run(apt.cmd("apt-get").arg("update"))?;
        get()?;
    }
    Ok(())
}

/// Where the archive keeps the `linux` source's binary packages, over
/// HTTPS: these files are not checked against a signed package list (the
/// lists no longer name them), so the transport is what vouches for them.
const POOL: &str = "https://deb.debian.org/debian/pool/main/l/linux";

/// Downloads `top` (the headers of `k`) and the header packages it pins
/// from the archive's pool, at the version of the kernel's image in the
/// lists: for an image the lists keep after its headers left them.
fn from_pool(apt: &PrivateApt, k: &Kernel, top: &str, dl: &Path) -> Result<()> {
    host::ensure_packages(&["curl"])?;
    let image = format!("linux-image-{}", k.release);
    let show = host::output(
        apt.cmd("apt-cache")
            .args(["show", "--no-all-versions", &image]),
    )?;
    let version = show
        .lines()
        .find_map(|l| l.strip_prefix("Version: "))
        .with_context(|| format!("{image} has no Version"))?
        .trim()
        .to_string();
    let get = |name: &str, version: &str| -> Result<PathBuf> {
        // Pool file names leave out the epoch (`1:2.3-4` is `_2.3-4_`).
        let v = version.split_once(':').map_or(version, |(_, v)| v);
        let mut tried = Vec::new();
        for arch in ["amd64", "all"] {
            let file = format!("{name}_{v}_{arch}.deb");
            let path = dl.join(&file);
            let url = format!("{POOL}/{file}");
            let ok = Command::new("curl")
                .args(["-fsL", "--proto", "=https", "--retry", "2", "-o"])
                .arg(&path)
                .arg(&url)
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return Ok(path);
            }
            let _ = fs::remove_file(&path);
            tried.push(url);
        }
        anyhow::bail!("not found: {}", tried.join(", "))
    };
    eprintln!("xtask: {top} from the archive's pool, version {version}");
    let deb = get(top, &version)?;
    let control = host::output(Command::new("dpkg-deb").arg("-f").arg(&deb).arg("Depends"))?;
    for dep in header_deps(&debian::depends_field(&format!("Depends: {control}"))) {
        let v = dep.exact.as_deref().unwrap_or(&version);
        get(&dep.name, v)?;
    }
    Ok(())
}

fn debs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    v.sort();
    Ok(v)
}

/// The `linux-headers-*` and `linux-kbuild-*` packages among a headers
/// package's dependencies (not the compiler, linux-base or the image).
pub fn header_deps(deps: &[Dep]) -> Vec<Dep> {
    let mut out: Vec<Dep> = deps
        .iter()
        .filter(|d| d.name.starts_with("linux-headers-") || d.name.starts_with("linux-kbuild-"))
        .cloned()
        .collect();
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// The highest `GLIBC_2.N` version an ELF file names (its symbol versions).
pub fn max_glibc_minor(data: &[u8]) -> Option<u32> {
    const TAG: &[u8] = b"GLIBC_2.";
    if !data.starts_with(b"\x7fELF") {
        return None;
    }
    let mut best = None;
    let mut i = 0;
    while let Some(pos) = data[i..].windows(TAG.len()).position(|w| w == TAG) {
        let start = i + pos + TAG.len();
        let digits: String = data[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .map(|&b| b as char)
            .collect();
        if let Ok(n) = digits.parse::<u32>() {
            best = best.max(Some(n));
        }
        i = start;
    }
    best
}

fn host_glibc_minor() -> Result<u32> {
    let v = host::output(Command::new("getconf").arg("GNU_LIBC_VERSION"))?;
    v.trim()
        .rsplit_once("2.")
        .and_then(|(_, m)| m.parse().ok())
        .with_context(|| format!("unexpected GNU_LIBC_VERSION {v:?}"))
}

fn elf_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let ft = e.file_type()?;
        if ft.is_dir() {
            elf_files(&e.path(), out)?;
        } else if ft.is_file() && e.metadata()?.permissions().mode() & 0o111 != 0 {
            out.push(e.path());
        }
    }
    Ok(())
}

/// Wraps the kbuild tools that need a newer glibc than the host's so they run
/// under the suite's libc6 (its loader, then the host's other libraries).
fn wrap_new_glibc_tools(apt: &PrivateApt, dir: &Path, root: &Path) -> Result<Vec<String>> {
    let have = host_glibc_minor()?;
    let mut tools = Vec::new();
    elf_files(&root.join("usr/lib"), &mut tools)?;
    let mut newer = Vec::new();
    for t in tools {
        if let Some(need) = max_glibc_minor(&fs::read(&t)?).filter(|&n| n > have) {
            newer.push((t, need));
        }
    }
    if newer.is_empty() {
        return Ok(Vec::new());
    }
    let libc = dir.join("libc6");
    let dl = dir.join("deb-libc6");
    fs::create_dir_all(&dl)?;
    download(apt, &["libc6".to_string()], &dl)?;
    for deb in debs(&dl)? {
        host::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&libc))?;
    }
    fs::remove_dir_all(&dl)?;
    let libdir = ["usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu"]
        .iter()
        .map(|d| libc.join(d))
        .find(|d| d.join("ld-linux-x86-64.so.2").exists())
        .context("the suite's libc6 has no ld-linux-x86-64.so.2")?;
    let mut names = Vec::new();
    for (t, need) in &newer {
        let real = t.with_file_name(format!(
            "{}.glibc-2.{need}",
            t.file_name().context("name")?.to_string_lossy()
        ));
        fs::rename(t, &real)?;
        let mut f = fs::File::create(t)?;
        writeln!(
            f,
            "#!/bin/sh\n# Needs glibc 2.{need}; the host has 2.{have} (xtask/src/vm/headers.rs).\n\
             exec {ld} --library-path {lib}:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu {real} \"$@\"",
            ld = libdir.join("ld-linux-x86-64.so.2").display(),
            lib = libdir.display(),
            real = real.display()
        )?;
        fs::set_permissions(t, fs::Permissions::from_mode(0o755))?;
        names.push(
            t.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
        );
    }
    Ok(vec![format!(
        "{} run under the suite's glibc (they need up to 2.{}, the host has 2.{have})",
        names.join(", "),
        newer.iter().map(|n| n.1).max().unwrap_or(0)
    )])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depends_keep_headers_and_kbuild_only() {
        let names = |show: &str| -> Vec<String> {
            header_deps(&debian::depends_field(show))
                .iter()
                .map(debian::download_spec)
                .collect()
        };
        let trixie =
            "Depends: linux-base (>= 4.12~), linux-headers-6.12.117+deb13-common (= 6.12.117-1), \
            linux-image-6.12.117+deb13-amd64 | linux-image-6.12.117+deb13-amd64-unsigned, \
            linux-kbuild-6.12.117+deb13 (= 6.12.117-1), gcc-14\n";
        assert_eq!(
            names(trixie),
            [
                "linux-headers-6.12.117+deb13-common=6.12.117-1",
                "linux-kbuild-6.12.117+deb13=6.12.117-1"
            ]
        );
        // 6.1's kbuild is shared by every 6.1.0-N: not pinned, so the private
        // list's own candidate (never the host's installed one) is fetched.
        let old = "Depends: linux-headers-6.1.0-50-common (= 6.1.176-1), linux-kbuild-6.1 (>= 6.1.176-1), \
            linux-compiler-gcc-12-x86 (>= 6.1.176-1)\n";
        assert_eq!(
            names(old),
            [
                "linux-headers-6.1.0-50-common=6.1.176-1",
                "linux-kbuild-6.1"
            ]
        );
        // sid's 7.2: linux-base-R and the gcc-16 metapackage are not headers.
        let sid = "Depends: gcc-16-for-host, linux-base (>= 4.12~), linux-base-7.2.13+deb14-amd64 (= 7.2.13-1), \
            linux-headers-7.2.13+deb14-common (= 7.2.13-1), linux-kbuild-7.2.13+deb14\n";
        assert_eq!(
            names(sid),
            [
                "linux-headers-7.2.13+deb14-common=7.2.13-1",
                "linux-kbuild-7.2.13+deb14"
            ]
        );
    }

    #[test]
    fn makefile_paths_point_into_the_unpacked_tree() {
        let sid = "KBUILD_OUTPUT=/usr/src/linux-headers-7.2.13+deb14-amd64\n\
            include /usr/src/linux-headers-7.2.13+deb14-common/Makefile\n";
        let out = rebase_makefile(sid, Path::new("/c/h/root/usr/src"));
        assert_eq!(
            out,
            "KBUILD_OUTPUT=/c/h/root/usr/src/linux-headers-7.2.13+deb14-amd64\n\
             include /c/h/root/usr/src/linux-headers-7.2.13+deb14-common/Makefile\n"
        );
        assert!(!out.contains(" /usr/src") && !out.contains("=/usr/src"));
    }

    #[test]
    fn glibc_needs_come_from_elf_version_strings() {
        let mut elf = b"\x7fELF....GLIBC_2.2.5\0GLIBC_2.38\0GLIBC_2.4\0".to_vec();
        assert_eq!(max_glibc_minor(&elf), Some(38));
        elf[0] = b'#';
        assert_eq!(max_glibc_minor(&elf), None, "a script is not an ELF file");
        assert_eq!(max_glibc_minor(b"\x7fELF static"), None);
    }
}
