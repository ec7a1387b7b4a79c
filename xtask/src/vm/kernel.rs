//! Debian kernels for the VM: resolved and fetched with `apt-get download` through
//! a private apt configuration (the machine's own apt setup is never touched),
//! unpacked with `dpkg-deb -x`, indexed with `depmod`, cached by version under
//! `.cache/vm/kernels/<version>/`.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

use super::{debian, moddep::ModDeps};
use crate::host;

const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
const MIRROR: &str = "http://deb.debian.org/debian";

/// The symbolic series: the newest kernel series in [`NEWEST_SUITE`],
/// resolved from its package names (`newest = 7.2`), never written down.
pub const NEWEST: &str = "newest";
/// Debian's unstable suite: where the newest series is looked for, and where a
/// concrete series the table below does not name (`--kernel 7.2`) is fetched.
pub const NEWEST_SUITE: &str = "sid";

/// A kernel series the harness knows, with the Debian suite that ships it.
/// 6.18 is in trixie-backports only; a later series is taken from sid.
pub fn suite_of(series: &str) -> Result<&'static str> {
    Ok(match series {
        "5.10" => "bullseye",
        "6.1" => "bookworm",
        "6.12" => "trixie",
        "6.18" => "trixie-backports",
        NEWEST => NEWEST_SUITE,
        s if debian::parse_series(s).is_some() => NEWEST_SUITE,
        other => bail!(
            "unknown kernel series {other} (known: 5.10, 6.1, 6.12, 6.18, {NEWEST} or a \
             series in Debian {NEWEST_SUITE} such as 7.2)"
        ),
    })
}

/// The concrete series `series` stands for: itself, or for [`NEWEST`] the
/// newest series in sid (looked up once, then read from
/// `.cache/vm/apt/resolved-newest`; delete it to look again).
pub fn resolve_series(series: &str) -> Result<String> {
    if series != NEWEST {
        suite_of(series)?;
        return Ok(series.to_string());
    }
    let cached = host::vm_cache()?
        .join("apt")
        .join(format!("resolved-{NEWEST}"));
    if let Some(s) = fs::read_to_string(&cached)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| debian::parse_series(s).is_some())
    {
        return Ok(s);
    }
    let apt = PrivateApt::new(NEWEST_SUITE)?;
    eprintln!("xtask: resolving the newest kernel series in Debian {NEWEST_SUITE}");
    host::run(apt.cmd("apt-get").arg("update"))?;
    let names = host::output(apt.cmd("apt-cache").args(["pkgnames", "linux-image-"]))?;
    let s = debian::newest_series(names.lines())
        .with_context(|| format!("no generic linux-image-*-amd64 package in {NEWEST_SUITE}"))?;
    eprintln!("xtask: {NEWEST} = {s}");
    fs::write(&cached, &s)?;
    Ok(s)
}

/// An unpacked kernel: the image and its module tree.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub series: String,
    /// `uname -r`, e.g. `6.1.0-41-amd64`.
    pub release: String,
    pub root: PathBuf,
}

impl Kernel {
    /// The image: `boot/vmlinuz-R` (one-package images up to 6.x), or
    /// `usr/lib/modules/R/vmlinuz` where Debian's split packaging (7.x's
    /// `linux-binary-R`) puts it. The first that exists; the /boot path when
    /// neither does (for the error message).
    pub fn vmlinuz(&self) -> PathBuf {
        let boot = self
            .root
            .join("boot")
            .join(format!("vmlinuz-{}", self.release));
        [
            self.root
                .join("usr/lib/modules")
                .join(&self.release)
                .join("vmlinuz"),
            self.root
                .join("lib/modules")
                .join(&self.release)
                .join("vmlinuz"),
        ]
        .into_iter()
        .find(|p| p.is_file())
        .filter(|_| !boot.is_file())
        .unwrap_or(boot)
    }

    pub fn modules_dir(&self) -> PathBuf {
        self.root.join("lib/modules").join(&self.release)
    }

    pub fn moddeps(&self) -> Result<ModDeps> {
        let dir = self.modules_dir();
        let dep = fs::read_to_string(dir.join("modules.dep"))
            .with_context(|| format!("reading {}/modules.dep", dir.display()))?;
        let builtin = fs::read_to_string(dir.join("modules.builtin")).unwrap_or_default();
        Ok(ModDeps::parse(&dep, &builtin))
    }
}

/// apt-get/apt-cache with their own sources list and state under
/// `.cache/vm/apt/<suite>/`; shared with the headers fetch (headers.rs).
/// The dpkg status is an empty file of its own too: with the host's, a
/// package installed on the host from another suite (linux-kbuild-6.1 from
/// bookworm-security) became the candidate, and `apt-get download` asked for
/// a version the private lists do not have.
pub(super) struct PrivateApt {
    dir: PathBuf,
}

impl PrivateApt {
    pub(super) fn new(suite: &str) -> Result<Self> {
        let dir = host::vm_cache()?.join("apt").join(suite);
        fs::create_dir_all(dir.join("lists/partial"))?;
        fs::create_dir_all(dir.join("cache/archives/partial"))?;
        // Kept empty: nothing is ever installed through this configuration.
        fs::write(dir.join("status"), "")?;
        fs::write(
            dir.join("sources.list"),
            format!("deb [signed-by={KEYRING}] {MIRROR} {suite} main\n"),
        )?;
        Ok(Self { dir })
    }

    /// Whether the suite's lists hold a real package of that name (not a
    /// virtual one, which `apt-cache depends` shows as `<name>`).
    pub(super) fn has_package(&self, name: &str) -> bool {
        self.cmd("apt-cache")
            .args(["show", "--no-all-versions", name])
            .stderr(std::process::Stdio::null())
            .output()
            .is_ok_and(|o| o.status.success() && o.stdout.starts_with(b"Package:"))
    }

    pub(super) fn cmd(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        let d = self.dir.display();
        c.arg(format!("-oDir::Etc::SourceList={d}/sources.list"))
            .arg("-oDir::Etc::SourceParts=/dev/null")
            .arg(format!("-oDir::State::Lists={d}/lists"))
            .arg(format!("-oDir::Cache={d}/cache"))
            .arg(format!("-oDir::State::status={d}/status"))
            .arg("-oAPT::Sandbox::User=root")
            .arg("-q");
        c
    }
}

/// Returns the cached kernel of `series`, fetching it first if needed.
/// `series` may be [`NEWEST`]: the kernel's `series` is then the concrete one.
pub fn fetch(series: &str) -> Result<Kernel> {
    let series = &resolve_series(series)?;
    let suite = suite_of(series)?;
    let cache = host::vm_cache()?;
    let resolved = cache.join("apt").join(format!("resolved-{series}"));
    if let Ok(pkg) = fs::read_to_string(&resolved) {
        let k = kernel_for(series, pkg.trim(), &cache);
        if k.root.parent().map(|p| p.join(".ready").exists()) == Some(true) {
            return Ok(k);
        }
    }
    let apt = PrivateApt::new(suite)?;
    eprintln!("xtask: resolving the newest {series} kernel in Debian {suite}");
    host::run(apt.cmd("apt-get").arg("update"))?;
    let names = host::output(apt.cmd("apt-cache").args(["pkgnames", "linux-image-"]))?;
    // A series the suite no longer carries (backports move on) is a missing
    // environment: vm-test counts its scenarios as skipped, with this reason.
    let pkg = debian::pick_package(series, names.lines()).ok_or_else(|| {
        super::Missing(format!(
            "no linux-image-{series}.*-amd64 package in Debian {suite}"
        ))
    })?;
    let k = kernel_for(series, &pkg, &cache);
    let kdir = k.root.parent().context("kernel dir")?.to_path_buf();
    if !kdir.join(".ready").exists() {
        unpack(&apt, &pkg, &kdir, &k)?;
    }
    fs::write(&resolved, &pkg)?;
    Ok(k)
}

fn kernel_for(series: &str, pkg: &str, cache: &Path) -> Kernel {
    let release = pkg.trim_start_matches("linux-image-").to_string();
    let root = cache.join("kernels").join(&release).join("root");
    Kernel {
        series: series.to_string(),
        release,
        root,
    }
}

/// Downloads and unpacks `pkg` and the packages named after its release
/// that it depends on (Debian 7.x: `linux-binary-R` with the image,
/// `linux-modules-R`, `linux-base-R` with modules.builtin), all into one root.
fn unpack(apt: &PrivateApt, pkg: &str, kdir: &Path, k: &Kernel) -> Result<()> {
    if kdir.exists() {
        fs::remove_dir_all(kdir)?;
    }
    let dl = kdir.join("deb");
    fs::create_dir_all(&dl)?;
    let show = host::output(
        apt.cmd("apt-cache")
            .args(["show", "--no-all-versions", pkg]),
    )?;
    let mut specs = vec![pkg.to_string()];
    for part in debian::image_parts(&k.release, &debian::depends_field(&show)) {
        // A one-package image's linux-base-R (config, System.map) may be
        // missing from a suite that keeps only the newest kernel source's
        // packages (trixie-backports and 6.18): it carries neither image nor
        // modules, so the image is still usable without it.
        if apt.has_package(&part.name) {
            specs.push(debian::download_spec(&part));
        } else {
            eprintln!(
                "xtask: {pkg} depends on {}, which the suite's lists lack; going on without it",
                part.name
            );
        }
    }
    eprintln!(
        "xtask: downloading {} into {}",
        specs.join(" "),
        kdir.display()
    );
    host::run(
        apt.cmd("apt-get")
            .arg("download")
            .args(&specs)
            .current_dir(&dl),
    )?;
    let mut debs: Vec<PathBuf> = fs::read_dir(&dl)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    if debs.len() != specs.len() {
        bail!(
            "apt-get download gave {} .deb files for {specs:?}",
            debs.len()
        );
    }
    debs.sort();
    for deb in &debs {
        host::run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&k.root))?;
    }
    fs::remove_dir_all(&dl)?;
    // Newer Debian kernels install modules under usr/lib (merged /usr); depmod -b
    // looks under ROOT/lib/modules.
    let lib = k.root.join("lib");
    if !lib.exists() && k.root.join("usr/lib/modules").exists() {
        std::os::unix::fs::symlink("usr/lib", &lib)?;
    }
    if !k.vmlinuz().exists() {
        bail!(
            "{} has no {} (nor usr/lib/modules/{}/vmlinuz)",
            specs.join(" + "),
            k.vmlinuz().display(),
            k.release
        );
    }
    if !k.modules_dir().join("kernel").is_dir() {
        bail!(
            "{} has no modules under {}",
            specs.join(" + "),
            k.modules_dir().display()
        );
    }
    host::run(
        Command::new("depmod")
            .arg("-b")
            .arg(&k.root)
            .arg(&k.release),
    )?;
    fs::write(kdir.join(".ready"), specs.join("\n"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_map_to_suites() {
        assert_eq!(suite_of("6.18").expect("6.18"), "trixie-backports");
        assert_eq!(suite_of(NEWEST).expect("newest"), NEWEST_SUITE);
        // A concrete series beyond the table is looked for in sid.
        assert_eq!(suite_of("7.2").expect("7.2"), NEWEST_SUITE);
        assert!(suite_of("bogus").is_err());
        assert_eq!(resolve_series("6.12").expect("6.12"), "6.12");
    }

    #[test]
    fn private_apt_ignores_the_hosts_dpkg_status() {
        let apt = PrivateApt::new("bookworm").expect("apt");
        let c = apt.cmd("apt-get");
        let args: Vec<String> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let status = args
            .iter()
            .find_map(|a| a.strip_prefix("-oDir::State::status="))
            .expect("Dir::State::status is set");
        assert_ne!(status, "/var/lib/dpkg/status");
        assert_eq!(fs::read_to_string(status).expect("status file"), "");
        assert!(args
            .iter()
            .any(|a| a == "-oDir::Etc::SourceParts=/dev/null"));
    }

    #[test]
    fn vmlinuz_is_found_in_either_layout() {
        let dir = std::env::temp_dir().join(format!("gdt-vmlinuz-{}", std::process::id()));
        let k = Kernel {
            series: "7.2".into(),
            release: "7.2.13+deb14-amd64".into(),
            root: dir.clone(),
        };
        assert_eq!(k.vmlinuz(), dir.join("boot/vmlinuz-7.2.13+deb14-amd64"));
        let split = dir.join("usr/lib/modules/7.2.13+deb14-amd64");
        fs::create_dir_all(&split).expect("dir");
        fs::write(split.join("vmlinuz"), "x").expect("write");
        assert_eq!(k.vmlinuz(), split.join("vmlinuz"));
        fs::create_dir_all(dir.join("boot")).expect("dir");
        fs::write(dir.join("boot/vmlinuz-7.2.13+deb14-amd64"), "x").expect("write");
        assert_eq!(k.vmlinuz(), dir.join("boot/vmlinuz-7.2.13+deb14-amd64"));
        fs::remove_dir_all(&dir).expect("cleanup");
    }
}
