//! Builds the eBPF programs (gpudirect-trace-ebpf, bpfel-unknown-none) with
//! aya-build so that the object is embedded in the one executable.

use std::{path::PathBuf, process::Command};

use anyhow::{anyhow, bail, Context as _};

fn main() -> anyhow::Result<()> {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
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
    .context("building the eBPF programs (gpudirect-trace-ebpf)")
}
