//! The release artifacts, checked as a user would use them (run by `cargo
//! xtask test` after the unit and host tests): SHA256SUMS verify, the tarball
//! unpacks and runs, `systemd-analyze verify` accepts the unit, lintian the
//! .deb, the .deb installs, runs and purges without a trace (check_deb), the
//! image loads and runs `probes` in podman (check_oci), and the Kubernetes
//! manifests pass kubernetes-validate. What this machine cannot do is
//! SKIPPED with the reason, never counted as passed.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Result};

use super::{check_deb, check_oci, Artifacts, PACKAGE};
use crate::host;

pub enum Outcome {
    Passed(String),
    Failed(String),
    Skipped(String),
}

#[derive(Default)]
pub struct Report {
    results: Vec<(String, Outcome)>,
}

impl Report {
    pub fn record(&mut self, name: &str, outcome: Outcome) {
        let (word, why) = match &outcome {
            Outcome::Passed(w) => ("passed", w),
            Outcome::Failed(w) => ("FAILED", w),
            Outcome::Skipped(w) => ("SKIPPED", w),
        };
        let sep = if why.is_empty() { "" } else { ": " };
        eprintln!("xtask: dist check {name}: {word}{sep}{why}");
        self.results.push((name.to_string(), outcome));
    }

    /// `Ok` turns into passed, `Err` into failed (with the whole chain).
    pub fn check(&mut self, name: &str, r: Result<String>) {
        self.record(
            name,
            match r {
                Ok(w) => Outcome::Passed(w),
                Err(e) => Outcome::Failed(format!("{e:#}")),
            },
        );
    }

    fn counts(&self) -> (usize, usize, usize) {
        let mut c = (0, 0, 0);
        for (_, o) in &self.results {
            match o {
                Outcome::Passed(_) => c.0 += 1,
                Outcome::Failed(_) => c.1 += 1,
                Outcome::Skipped(_) => c.2 += 1,
            }
        }
        c
    }
}

/// Runs a command; its stdout and stderr together, or an error that shows them.
pub fn capture(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| anyhow::anyhow!("running {shown}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("{shown} failed ({}):\n{}", out.status, text.trim_end());
    }
    Ok(text)
}

/// Like `capture`, but only stdout (for JSON), stderr shown on failure.
pub fn stdout(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .map_err(|e| anyhow::anyhow!("running {shown}: {e}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn run(a: &Artifacts) -> Result<()> {
    let started = std::time::Instant::now();
    let scratch = std::env::temp_dir().join(format!("gdt-dist-check-{}", std::process::id()));
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch)?;
    }
    std::fs::create_dir_all(&scratch)?;
    let mut r = Report::default();
    r.check("SHA256SUMS", sha256sums(a));
    let unpacked = tarball(a, &scratch);
    let binary = unpacked.as_ref().ok().cloned();
    r.check(
        "tarball",
        unpacked.map(|b| format!("unpacked, {} ran", b.display())),
    );
    match binary {
        Some(b) => r.check(
            "systemd-analyze verify (deploy/ unit)",
            verify_deploy_unit(&b, &scratch),
        ),
        None => r.record(
            "systemd-analyze verify (deploy/ unit)",
            Outcome::Failed("no binary from the tarball to point ExecStart at".into()),
        ),
    }
    r.check("lintian", lintian(&a.deb));
    check_deb::run(a, &mut r);
    check_oci::run(a, &scratch, &mut r);
    kubernetes(a, &mut r);
    let _ = std::fs::remove_dir_all(&scratch);

    let (passed, failed, skipped) = r.counts();
    eprintln!(
        "xtask: dist checks took {:.0}s",
        started.elapsed().as_secs_f64()
    );
    println!("dist: {passed} passed, {failed} failed, {skipped} skipped");
    if failed > 0 {
        bail!("{failed} dist check(s) failed");
    }
    Ok(())
}

fn sha256sums(a: &Artifacts) -> Result<String> {
    let dir = a.sums.parent().unwrap_or(Path::new("."));
    capture(
        Command::new("sha256sum")
            .arg("-c")
            .arg(&a.sums)
            .current_dir(dir),
    )
    .map(|o| o.lines().count().to_string() + " artifacts verify")
}

/// Unpacks the tarball, checks its own SHA256SUMS and its contents, and runs
/// its binary's --version: it must name this checkout's commit and the
/// embedded eBPF object.
fn tarball(a: &Artifacts, scratch: &Path) -> Result<PathBuf> {
    let dir = scratch.join("tarball");
    std::fs::create_dir_all(&dir)?;
    capture(
        Command::new("tar")
            .arg("-xzf")
            .arg(&a.tarball)
            .arg("-C")
            .arg(&dir),
    )?;
    let top = std::fs::read_dir(&dir)?
        .next()
        .ok_or_else(|| anyhow::anyhow!("the tarball is empty"))??
        .path();
    let stem = a.tarball.file_name().unwrap_or_default().to_string_lossy();
    if Some(stem.trim_end_matches(".tar.gz")) != top.file_name().and_then(|n| n.to_str()) {
        bail!(
            "top directory {} is not named after the tarball",
            top.display()
        );
    }
    capture(
        Command::new("sha256sum")
            .args(["-c", "--quiet", "SHA256SUMS"])
            .current_dir(&top),
    )?;
    for f in [
        "bin/gpudirect-trace",
        "deploy/systemd/gpudirect-trace.service",
        "deploy/kubernetes/daemonset.yaml",
        "docs/architecture.md",
        "README.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "THIRD-PARTY-LICENSES",
    ] {
        if !top.join(f).is_file() {
            bail!("{f} missing from the tarball");
        }
    }
    let binary = top.join("bin").join(PACKAGE);
    let version = capture(Command::new(&binary).arg("--version"))?;
    let head = super::git(&host::repo_root(), &["rev-parse", "--short=12", "HEAD"]);
    if let Some(head) = head {
        if !version.contains(&format!("commit: {head}")) {
            bail!("--version does not name HEAD ({head}):\n{version}");
        }
    }
    if !version.contains("eBPF object: sha256 ") {
        bail!("--version does not name the eBPF object:\n{version}");
    }
    Ok(binary)
}

/// deploy/'s unit as a tarball user installs it (ExecStart pointed at the
/// unpacked binary). systemd-analyze exits 0 on unknown keys and other
/// warnings, so any output is a failure.
fn verify_deploy_unit(binary: &Path, scratch: &Path) -> Result<String> {
    let text =
        std::fs::read_to_string(host::repo_root().join("deploy/systemd/gpudirect-trace.service"))?;
    let dir = scratch.join("unit");
    std::fs::create_dir_all(&dir)?;
    let unit = dir.join("gpudirect-trace.service");
    std::fs::write(
        &unit,
        text.replace(
            "/usr/local/bin/gpudirect-trace",
            &binary.display().to_string(),
        ),
    )?;
    systemd_verify(&unit)
}

pub fn systemd_verify(unit: &Path) -> Result<String> {
    let out = capture(Command::new("systemd-analyze").arg("verify").arg(unit))?;
    if !out.trim().is_empty() {
        bail!(
            "systemd-analyze verify {}:\n{}",
            unit.display(),
            out.trim_end()
        );
    }
    Ok("no diagnostics".into())
}

fn lintian(deb: &Path) -> Result<String> {
    let out = capture(
        Command::new("lintian")
            .args(["--fail-on", "error,warning", "--tag-display-limit", "0"])
            .arg(deb),
    )?;
    // Tag lines are `X: package: tag ...`; lintian also remarks on running as root.
    let tags: Vec<&str> = out
        .lines()
        .filter(|l| l.len() > 3 && l.as_bytes()[1] == b':' && l.as_bytes()[0].is_ascii_uppercase())
        .collect();
    Ok(if tags.is_empty() {
        "no errors or warnings".into()
    } else {
        format!(
            "no errors or warnings ({} other tags: {})",
            tags.len(),
            tags.join("; ")
        )
    })
}

/// kubernetes-validate (PyPI) bundles the Kubernetes JSON schemas, so it
/// works offline; the oldest and newest versions it has are checked. It has
/// no schema for custom resources (the Prometheus Operator's ServiceMonitor).
fn kubernetes(a: &Artifacts, r: &mut Report) {
    let dir = host::repo_root().join("deploy/kubernetes");
    let ds = dir.join("daemonset.yaml");
    r.check(
        "daemonset names the image",
        (|| {
            let text = std::fs::read_to_string(&ds)?;
            let images: Vec<&str> = text
                .lines()
                .filter_map(|l| l.trim().strip_prefix("image: "))
                .collect();
            if images != [a.image.as_str()] {
                bail!(
                    "daemonset.yaml's image is {images:?}, the archive loads as {}",
                    a.image
                );
            }
            Ok(a.image.clone())
        })(),
    );
    let tool = match crate::bootstrap::kubernetes_validate() {
        Ok(t) => t,
        Err(e) => {
            r.record("kubernetes-validate", Outcome::Failed(format!("{e:#}")));
            return;
        }
    };
    for k in crate::bootstrap::KUBERNETES_VERSIONS {
        r.check(
            &format!("kubernetes-validate {k} daemonset.yaml"),
            (|| {
                let out = capture(Command::new(&tool).args(["--strict", "-k", k]).arg(&ds))?;
                if out.contains("WARN") || out.contains("ERROR") {
                    bail!("{}", out.trim_end());
                }
                Ok(format!("{} resources", out.matches(" passed ").count()))
            })(),
        );
    }
    let sm = dir.join("servicemonitor.yaml");
    let out = capture(Command::new(&tool).arg("--strict").arg(&sm));
    match out {
        Ok(o) if o.contains("Couldn't find schema") => r.record(
            "kubernetes-validate servicemonitor.yaml",
            Outcome::Skipped(
                "kubernetes-validate has no schema for the Prometheus Operator's ServiceMonitor \
                 (a custom resource); only deploy.rs's own checks cover it"
                    .into(),
            ),
        ),
        other => r.check(
            "kubernetes-validate servicemonitor.yaml",
            other.map(|_| "valid".into()),
        ),
    }
}
