//! `cargo xtask dist`: release artifacts in target/dist/ for users without
//! Rust, a nightly or bpf-linker:
//! - `gpudirect-trace-VERSION-ARCH-linux-gnu.tar.gz`: the binary, deploy/
//!   (systemd unit, Kubernetes, Grafana), docs/, the licences, SHA256SUMS;
//! - `gpudirect-trace_VERSION-1_DEBARCH.deb` (dpkg-deb; the service is not
//!   enabled or started on install unless asked);
//! - `gpudirect-trace-VERSION-ARCH-oci.tar`: an OCI image written here
//!   directly (no registry, no container engine), loadable by podman, skopeo,
//!   docker and containerd;
//! - `SHA256SUMS` over those three.
//!
//! The archives are deterministic (SOURCE_DATE_EPOCH, default: the commit's
//! time). `check` (run by `cargo xtask test`) installs and runs them.

mod archive;
pub mod check;
mod check_deb;
mod check_oci;
mod deb;
mod manpage;
mod notices;
mod oci;
mod tarball;

use std::{
    path::{Path, PathBuf},
    process::{Command, ExitCode},
};

use anyhow::{bail, Context as _, Result};
use clap::Args;

use crate::host;

#[derive(Args, Debug)]
pub struct DistArgs {
    /// Use target/release/gpudirect-trace as it is (no `cargo build`).
    #[arg(long)]
    pub no_build: bool,
    /// Then check the artifacts as `cargo xtask test` does (root: installs
    /// and purges the .deb, runs the image in podman).
    #[arg(long)]
    pub check: bool,
}

/// What the packaging steps share.
pub struct Release {
    pub version: String,
    /// The GNU triple without the vendor: x86_64-linux-gnu.
    pub triple: String,
    pub deb_arch: String,
    pub oci_arch: String,
    pub epoch: u64,
    /// Full commit id, when built from a git checkout.
    pub commit: Option<String>,
    /// The stripped binary (symbols only; the eBPF object stays embedded).
    pub binary: PathBuf,
    /// THIRD-PARTY-LICENSES: the notices of everything linked into the binary.
    pub notices: PathBuf,
    pub root: PathBuf,
    pub out: PathBuf,
    pub work: PathBuf,
}

pub struct Artifacts {
    pub tarball: PathBuf,
    pub deb: PathBuf,
    pub oci: PathBuf,
    pub sums: PathBuf,
    /// The name the image loads as, and deploy/kubernetes/daemonset.yaml uses.
    pub image: String,
    pub binary: PathBuf,
}

pub const PACKAGE: &str = "gpudirect-trace";
pub const NOTICES: &str = "THIRD-PARTY-LICENSES";

/// Where `podman load`, `docker load` and `ctr images import` put the image:
/// `localhost/` is what podman and CRI-O give images that come from no
/// registry, and spelling it out makes containerd and docker agree.
pub fn image_name(version: &str) -> String {
    format!("localhost/{PACKAGE}:{version}")
}

pub fn main(args: DistArgs) -> Result<ExitCode> {
    let started = std::time::Instant::now();
    let a = build(args.no_build)?;
    eprintln!(
        "xtask: dist: wrote {} in {:.0}s:",
        a.sums.parent().unwrap_or(Path::new(".")).display(),
        started.elapsed().as_secs_f64()
    );
    print!("{}", std::fs::read_to_string(&a.sums)?);
    if args.check {
        check::run(&a)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The release binary, target/release/gpudirect-trace (`cargo xtask build`,
/// and the first step of `build`).
pub fn build_release() -> Result<()> {
    crate::bootstrap::status(Command::new("cargo").args(["build", "--release", "-p", PACKAGE]))
}

pub fn build(no_build: bool) -> Result<Artifacts> {
    let root = host::repo_root();
    if !no_build {
        build_release()?;
    }
    let built = host::target_dir().join("release").join(PACKAGE);
    if !built.exists() {
        bail!("{} missing: build it or drop --no-build", built.display());
    }
    let out = host::target_dir().join("dist");
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    let work = out.join(".work");
    std::fs::create_dir_all(&work)?;
    let binary = work.join(PACKAGE);
    std::fs::copy(&built, &binary)?;
    // lintian refuses unstripped binaries (and notes .comment); panics still
    // name the file and line.
    host::run(
        Command::new("strip")
            .args(["--strip-all", "--remove-section=.comment"])
            .arg(&binary),
    )?;

    let (triple, deb_arch, oci_arch) = match std::env::consts::ARCH {
        "x86_64" => ("x86_64-linux-gnu", "amd64", "amd64"),
        "aarch64" => ("aarch64-linux-gnu", "arm64", "arm64"),
        other => bail!("no package architecture known for {other}"),
    };
    let notices = work.join(NOTICES);
    std::fs::write(
        &notices,
        notices::render(
            &root,
            &format!("{}-unknown-linux-gnu", std::env::consts::ARCH),
        )?,
    )?;
    let commit = git(&root, &["rev-parse", "HEAD"]);
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v.parse().context("SOURCE_DATE_EPOCH is not a number")?,
        Err(_) => git(&root, &["log", "-1", "--format=%ct"])
            .and_then(|t| t.parse().ok())
            .unwrap_or(0),
    };
    let rel = Release {
        version: env!("CARGO_PKG_VERSION").to_string(),
        triple: triple.into(),
        deb_arch: deb_arch.into(),
        oci_arch: oci_arch.into(),
        epoch,
        commit,
        binary,
        notices,
        root,
        out: out.clone(),
        work,
    };
    let tarball = tarball::build(&rel)?;
    let deb = deb::build(&rel)?;
    let oci = oci::build(&rel)?;
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let files: Vec<(String, PathBuf)> = [&tarball, &deb, &oci]
        .iter()
        .filter_map(|p| Some((name(p)?, p.to_path_buf())))
        .collect();
    let sums = out.join("SHA256SUMS");
    std::fs::write(&sums, archive::sha256sums(&files)?)?;
    Ok(Artifacts {
        image: image_name(&rel.version),
        tarball,
        deb,
        oci,
        sums,
        binary: rel.binary,
    })
}

pub fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The files every artifact carries as documentation: (name in the
/// artifact, source). deploy/ and docs/ as they are in the repository.
pub fn doc_files(root: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut files = vec![("README.md".to_string(), root.join("README.md"))];
    for dir in ["docs", "deploy"] {
        for (rel, path) in archive::walk(&root.join(dir))? {
            files.push((format!("{dir}/{rel}"), path));
        }
    }
    Ok(files)
}
