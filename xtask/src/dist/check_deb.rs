//! The .deb on this machine, as root: it installs with dpkg, neither
//! enables nor starts the service unless asked (GPUDIRECT_TRACE_ENABLE=1
//! enables it), `gpudirect-trace probes` runs from /usr/bin, the installed
//! unit passes `systemd-analyze verify`, and `dpkg --purge` leaves no file,
//! symlink or dpkg/deb-systemd-helper state behind: the trees a package
//! touches are listed before the install and after the purge, and compared.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Result};

use super::{
    check::{capture, systemd_verify, Outcome, Report},
    deb::UNIT_PATH,
    Artifacts, PACKAGE,
};

/// Where installing and enabling the package writes (usr-merged or not).
const TREES: &[&str] = &[
    "/usr/bin",
    "/usr/share/doc",
    "/usr/share/man/man1",
    "/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/etc/systemd",
    "/var/lib/dpkg/info",
    "/var/lib/systemd",
];
const WANTS: &str = "/etc/systemd/system/multi-user.target.wants/gpudirect-trace.service";

fn snapshot() -> BTreeSet<String> {
    fn rec(p: &Path, out: &mut BTreeSet<String>) {
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            return;
        };
        let link = std::fs::read_link(p)
            .map(|t| format!(" -> {}", t.display()))
            .unwrap_or_default();
        out.insert(format!("{}{link}", p.display()));
        if meta.is_dir() {
            if let Ok(rd) = std::fs::read_dir(p) {
                for e in rd.flatten() {
                    rec(&e.path(), out);
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    for t in TREES {
        rec(Path::new(t), &mut out);
    }
    out
}

/// Whether dpkg knows the package in any state but "not-installed"
/// (installed, or removed with its configuration kept, or half-done).
fn installed() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Status}", PACKAGE])
        .output()
        .map(|o| {
            let s = String::from_utf8_lossy(&o.stdout);
            o.status.success() && !s.trim().is_empty() && s.trim() != "not-installed"
        })
        .unwrap_or(false)
}

fn purge() -> Result<String> {
    capture(Command::new("dpkg").args(["--purge", PACKAGE]))
}

pub fn run(a: &Artifacts, r: &mut Report) {
    if installed() {
        let why =
            format!("a {PACKAGE} package is installed on this machine already; not touching it");
        for name in [
            "deb install, probes, purge",
            "deb unit verify",
            "deb enable on request",
        ] {
            r.record(name, Outcome::Skipped(why.clone()));
        }
        return;
    }
    let before = snapshot();
    let first = install_run_purge(&a.deb, &before);
    if installed() {
        let _ = purge();
    }
    let (main, unit) = match first {
        Ok((m, u)) => (Ok(m), u),
        Err(e) => (
            Err(e),
            Err(anyhow::anyhow!("not reached: the install failed")),
        ),
    };
    r.check("deb install, probes, purge", main);
    r.check("deb unit verify", unit);
    let asked = enable_on_request(&a.deb, &before);
    if installed() {
        let _ = purge();
    }
    r.check("deb enable on request", asked);
}

/// (install/run/purge summary, systemd-analyze verdict on the installed unit).
fn install_run_purge(deb: &Path, before: &BTreeSet<String>) -> Result<(String, Result<String>)> {
    let mut cmd = Command::new("dpkg");
    cmd.arg("-i").arg(deb).env_remove("GPUDIRECT_TRACE_ENABLE");
    capture(&mut cmd)?;
    if Path::new(WANTS).exists() {
        bail!("installing enabled the service ({WANTS} exists) without being asked");
    }
    let bin = PathBuf::from(format!("/usr/bin/{PACKAGE}"));
    let probes = capture(Command::new(&bin).args(["probes", "--strict"]))?;
    let summary = probes
        .lines()
        .find(|l| l.contains(" attached, "))
        .unwrap_or("")
        .to_string();
    if summary.is_empty() || summary.starts_with("0 attached") {
        bail!("{bin:?} probes attached nothing:\n{probes}");
    }
    let unit = systemd_verify(&Path::new("/").join(UNIT_PATH));
    let files = capture(Command::new("dpkg-query").args(["-L", PACKAGE]))?;
    let purged = purge()?;
    if installed() {
        bail!("still installed after dpkg --purge:\n{purged}");
    }
    let after = snapshot();
    left_behind(before, &after)?;
    Ok((
        format!(
            "{} paths installed, `probes`: {summary}, purge left nothing in {}",
            files.lines().count(),
            TREES.join(" ")
        ),
        unit,
    ))
}

fn left_behind(before: &BTreeSet<String>, after: &BTreeSet<String>) -> Result<()> {
    let added: Vec<&String> = after.difference(before).collect();
    let removed: Vec<&String> = before.difference(after).collect();
    if !added.is_empty() || !removed.is_empty() {
        bail!(
            "after dpkg --purge, left behind: {added:?}; gone that was there before: {removed:?}"
        );
    }
    Ok(())
}

/// GPUDIRECT_TRACE_ENABLE=1 in dpkg's environment enables the unit (starting
/// needs a running systemd, which this machine may not have); purge then
/// removes the symlink too.
fn enable_on_request(deb: &Path, before: &BTreeSet<String>) -> Result<String> {
    capture(
        Command::new("dpkg")
            .arg("-i")
            .arg(deb)
            .env("GPUDIRECT_TRACE_ENABLE", "1"),
    )?;
    let link = std::fs::read_link(WANTS);
    purge()?;
    let target = link.map_err(|e| {
        anyhow::anyhow!("GPUDIRECT_TRACE_ENABLE=1 did not enable it ({WANTS}: {e})")
    })?;
    left_behind(before, &snapshot())?;
    Ok(format!("{WANTS} -> {}, removed by purge", target.display()))
}
