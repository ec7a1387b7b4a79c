//! Builds the eBPF programs (gpudirect-trace-ebpf, bpfel-unknown-none) with
//! aya-build so that the object is embedded in the one executable, and
//! describes that build for `--version` (src/version.rs): the git commit, and
//! the sha256 of the embedded object's bytes.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{anyhow, bail, Context as _};
use sha2::{Digest as _, Sha256};

/// What goes into the binary, relative to the workspace root: "dirty" means
/// uncommitted changes to these, not to docs or xtask.
const SOURCES: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "gpudirect-trace/Cargo.toml",
    "gpudirect-trace/build.rs",
    "gpudirect-trace/src",
    "gpudirect-trace-common",
    "gpudirect-trace-ebpf/Cargo.toml",
    "gpudirect-trace-ebpf/build.rs",
    "gpudirect-trace-ebpf/src",
];

fn main() -> anyhow::Result<()> {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let workspace = here.join("..");
    println!(
        "cargo:rerun-if-changed={}",
        here.join("../gpudirect-trace-common/src").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        here.join("../gpudirect-trace-ebpf/src").display()
    );

    // A clear message instead of a linker failure deep inside the nested build.
    if Command::new("bpf-linker")
        .arg("--version")
        .output()
        .is_err()
    {
        bail!(
            "bpf-linker is not installed: run `cargo xtask bootstrap` \
             (installs the nightly's rust-src and bpf-linker@0.10.1)"
        );
    }
    let commit = git_commit(&workspace);
    let root_dir = here.join("../gpudirect-trace-ebpf");
    let root_dir = root_dir
        .to_str()
        .ok_or_else(|| anyhow!("non-UTF-8 path {}", root_dir.display()))?;
    // The eBPF crate is a workspace of its own (bpf target, build-std): the
    // nested `cargo build --package` that aya-build runs must start there.
    std::env::set_current_dir(root_dir).with_context(|| format!("cd {root_dir}"))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "gpudirect-trace-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::Nightly,
    )
    .context("building the eBPF programs (gpudirect-trace-ebpf)")?;

    // The object src/ebpf/mod.rs embeds (include_bytes_aligned!).
    let object = PathBuf::from(std::env::var("OUT_DIR")?).join("gpudirect-trace");
    let bytes = std::fs::read(&object).with_context(|| format!("{}", object.display()))?;
    let digest = Sha256::digest(&bytes);
    let short: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    // A file, not rustc-env: the text has several lines.
    let text = format!(
        "{}\ncommit: {commit}\neBPF object: sha256 {short}, {} bytes",
        std::env::var("CARGO_PKG_VERSION")?,
        bytes.len()
    );
    let out = object.with_file_name("long_version.txt");
    std::fs::write(&out, text).with_context(|| format!("{}", out.display()))
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
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

/// `0123456789ab (clean)`, `... (dirty)`, or `unknown` where the sources are
/// not a git checkout of this workspace (a source tarball, possibly unpacked
/// inside some other repository).
fn git_commit(workspace: &Path) -> String {
    let Some(top) = git(workspace, &["rev-parse", "--show-toplevel"]) else {
        return "unknown (not built from a git checkout)".into();
    };
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(Path::new(&top), workspace) {
        return "unknown (not built from a git checkout)".into();
    }
    let Some(sha) = git(workspace, &["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown (no commit yet)".into();
    };
    // Rerun when HEAD moves (commit, checkout) or a source changes (edits make
    // the tree dirty, commits and reverts make it clean). Not the index: `git
    // status` rewrites it, and a rerun rebuilds the binary.
    for (rev, file) in [("--git-dir", "HEAD"), ("--git-common-dir", "packed-refs")] {
        if let Some(dir) = git(workspace, &["rev-parse", rev]) {
            watch(&workspace.join(dir).join(file));
        }
    }
    if let (Some(common), Some(branch)) = (
        git(workspace, &["rev-parse", "--git-common-dir"]),
        git(workspace, &["symbolic-ref", "-q", "HEAD"]),
    ) {
        watch(&workspace.join(common).join(branch));
    }
    for s in SOURCES {
        watch(&workspace.join(s));
    }
    let mut args = vec!["status", "--porcelain", "--untracked-files=no", "--"];
    args.extend(SOURCES);
    match git(workspace, &args) {
        Some(changes) if changes.is_empty() => format!("{sha} (clean)"),
        Some(_) => format!("{sha} (dirty: uncommitted changes to the sources)"),
        None => format!("{sha} (cleanliness unknown)"),
    }
}

/// A path that does not exist would make cargo rerun the script every build.
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
