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

use super::moddep::ModDeps;
use crate::host;

const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
const MIRROR: &str = "http://deb.debian.org/debian";

/// A kernel series the harness knows, with the Debian suite that ships it.
pub fn suite_of(series: &str) -> Result<&'static str> {
    Ok(match series {
        "5.10" => "bullseye",
        "6.1" => "bookworm",
        "6.12" => "trixie",
        other => bail!("unknown kernel series {other} (known: 5.10, 6.1, 6.12)"),
    })
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
    pub fn vmlinuz(&self) -> PathBuf {
        self.root
            .join("boot")
            .join(format!("vmlinuz-{}", self.release))
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

/// Natural-order key: digit runs compare as numbers (`6.12.117` > `6.12.99`).
fn natural_key(s: &str) -> Vec<(u64, String)> {
    let mut key = Vec::new();
    let mut num = String::new();
    let mut text = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            if !text.is_empty() {
                key.push((0, std::mem::take(&mut text)));
            }
            num.push(c);
        } else {
            if !num.is_empty() {
                key.push((num.parse().unwrap_or(u64::MAX), String::new()));
                num.clear();
            }
            text.push(c);
        }
    }
    if !num.is_empty() {
        key.push((num.parse().unwrap_or(u64::MAX), String::new()));
    }
    if !text.is_empty() {
        key.push((0, text));
    }
    key
}

/// Picks the newest generic amd64 image package of `series` from `names`.
pub fn pick_package<'a>(series: &str, names: impl Iterator<Item = &'a str>) -> Option<String> {
    let prefix = format!("linux-image-{series}.");
    names
        .filter(|n| n.starts_with(&prefix) && n.ends_with("-amd64"))
        .filter(|n| {
            let mid = &n[prefix.len()..n.len() - "-amd64".len()];
            !mid.contains("cloud") && !mid.contains("-rt") && !mid.contains("unsigned")
        })
        .max_by_key(|n| natural_key(n))
        .map(str::to_string)
}

/// apt-get/apt-cache with their own sources list and state under
/// `.cache/vm/apt/<suite>/`; shared with the headers fetch (headers.rs).
pub(super) struct PrivateApt {
    dir: PathBuf,
}

impl PrivateApt {
    pub(super) fn new(suite: &str) -> Result<Self> {
        let dir = host::vm_cache()?.join("apt").join(suite);
        fs::create_dir_all(dir.join("lists/partial"))?;
        fs::create_dir_all(dir.join("cache/archives/partial"))?;
        fs::write(
            dir.join("sources.list"),
            format!("deb [signed-by={KEYRING}] {MIRROR} {suite} main\n"),
        )?;
        Ok(Self { dir })
    }

    pub(super) fn cmd(&self, tool: &str) -> Command {
        let mut c = Command::new(tool);
        let d = self.dir.display();
        c.arg(format!("-oDir::Etc::SourceList={d}/sources.list"))
            .arg("-oDir::Etc::SourceParts=/dev/null")
            .arg(format!("-oDir::State::Lists={d}/lists"))
            .arg(format!("-oDir::Cache={d}/cache"))
            .arg("-oAPT::Sandbox::User=root")
            .arg("-q");
        c
    }
}

/// Returns the cached kernel of `series`, fetching it first if needed.
pub fn fetch(series: &str) -> Result<Kernel> {
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
    let pkg = pick_package(series, names.lines())
        .with_context(|| format!("no linux-image-{series}.*-amd64 package in {suite}"))?;
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

fn unpack(apt: &PrivateApt, pkg: &str, kdir: &Path, k: &Kernel) -> Result<()> {
    eprintln!("xtask: downloading {pkg} into {}", kdir.display());
    if kdir.exists() {
        fs::remove_dir_all(kdir)?;
    }
    let dl = kdir.join("deb");
    fs::create_dir_all(&dl)?;
    host::run(apt.cmd("apt-get").arg("download").arg(pkg).current_dir(&dl))?;
    let deb = fs::read_dir(&dl)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .context("apt-get download produced no .deb")?;
    host::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&k.root))?;
    fs::remove_dir_all(&dl)?;
    // Newer Debian kernels install modules under usr/lib (merged /usr); depmod -b
    // looks under ROOT/lib/modules.
    let lib = k.root.join("lib");
    if !lib.exists() && k.root.join("usr/lib/modules").exists() {
        std::os::unix::fs::symlink("usr/lib", &lib)?;
    }
    if !k.vmlinuz().exists() {
        bail!("{} has no {}", pkg, k.vmlinuz().display());
    }
    host::run(
        Command::new("depmod")
            .arg("-b")
            .arg(&k.root)
            .arg(&k.release),
    )?;
    fs::write(kdir.join(".ready"), pkg)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_newest_generic_image() {
        let names = [
            "linux-image-6.12.107+deb13-amd64",
            "linux-image-6.12.117+deb13-cloud-amd64",
            "linux-image-6.12.99+deb13-amd64",
            "linux-image-6.12.117+deb13-amd64",
            "linux-image-6.12.117+deb13-rt-amd64",
            "linux-image-amd64",
        ];
        assert_eq!(
            pick_package("6.12", names.iter().copied()).as_deref(),
            Some("linux-image-6.12.117+deb13-amd64")
        );
        let old = ["linux-image-5.10.0-30-amd64", "linux-image-5.10.0-32-amd64"];
        assert_eq!(
            pick_package("5.10", old.iter().copied()).as_deref(),
            Some("linux-image-5.10.0-32-amd64")
        );
        // 6.1 must not match 6.12 packages.
        assert_eq!(pick_package("6.1", names.iter().copied()), None);
    }
}
