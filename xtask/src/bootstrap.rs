//! Bringing a bare machine to the point where the project builds: the
//! nightly's rust-src (for -Z build-std=core on bpfel-unknown-none), a
//! bpf-linker whose LLVM matches the nightly's (0.10.1 links rustc's own
//! libLLVM; 0.11+ needs a system LLVM 21+ that Debian 12 does not ship), and
//! the Debian packages the VM harness uses. Every step checks first and says
//! what it does.

use std::process::Command;

use anyhow::{bail, Context as _};

pub const BPF_LINKER_VERSION: &str = "0.10.1";
/// Debian packages: qemu and busybox for the VM harness, cpio/xz/zstd for
/// kernel packages and initramfs images, prometheus for promtool and the
/// server the `serve` host test scrapes with, prometheus-alertmanager for the
/// fleet scenario (vm/fleet.rs: Prometheus sends the rules' alerts to it),
/// bpftrace for `bench --vm` (run in the guests from the host's root over 9p).
/// Both servers run only as the tests' children on loopback ports: see
/// apt_packages on keeping their packaged services from starting.
pub const APT_PACKAGES: &[(&str, &str)] = &[
    ("qemu-system-x86", "/usr/bin/qemu-system-x86_64"),
    ("busybox-static", "/bin/busybox"),
    ("cpio", "/usr/bin/cpio"),
    ("xz-utils", "/usr/bin/xz"),
    ("zstd", "/usr/bin/zstd"),
    ("kmod", "/usr/sbin/depmod"),
    (
        "debian-archive-keyring",
        "/usr/share/keyrings/debian-archive-keyring.gpg",
    ),
    ("prometheus", "/usr/bin/promtool"),
    (
        "prometheus-alertmanager",
        "/usr/bin/prometheus-alertmanager",
    ),
    // `report --html` is checked in headless Chromium (report::html::browser_tests).
    ("chromium", "/usr/bin/chromium"),
    ("bpftrace", "/usr/bin/bpftrace"),
];

/// What `cargo xtask dist` and its checks need on top: binutils (strip,
/// readelf), lintian, systemd-analyze (works without systemd running),
/// podman and skopeo to load and run the image, runc for machines where crun
/// refuses (hybrid cgroup hierarchies), python3-venv for the validator.
pub const DIST_APT_PACKAGES: &[(&str, &str)] = &[
    ("binutils", "/usr/bin/readelf"),
    ("lintian", "/usr/bin/lintian"),
    ("systemd", "/usr/bin/systemd-analyze"),
    ("podman", "/usr/bin/podman"),
    ("skopeo", "/usr/bin/skopeo"),
    ("runc", "/usr/sbin/runc"),
];

/// kubernetes-validate from PyPI: it bundles the JSON schemas of every
/// Kubernetes release it knows (1.25 to 1.37 in this version), so it works
/// offline once installed (measured: `unshare -n` validates the same).
pub const KUBERNETES_VALIDATE: &str = "1.37.0";
/// The oldest and the newest schema versions that release bundles.
pub const KUBERNETES_VERSIONS: &[&str] = &["1.25.0", "1.37.0"];

pub fn run() -> anyhow::Result<()> {
    rust_src()?;
    bpf_linker()?;
    apt_packages(APT_PACKAGES)?;
    Ok(())
}

/// The release tools (see DIST_APT_PACKAGES), for `dist` and its checks.
pub fn dist_tools() -> anyhow::Result<()> {
    apt_packages(DIST_APT_PACKAGES)
}

/// A virtualenv with kubernetes-validate under .cache/tools; its executable.
pub fn kubernetes_validate() -> anyhow::Result<std::path::PathBuf> {
    let venv = crate::host::repo_root()
        .join(".cache/tools")
        .join(format!("kubernetes-validate-{KUBERNETES_VALIDATE}"));
    let tool = venv.join("bin/kubernetes-validate");
    let tool_s = tool.to_string_lossy().into_owned();
    if output(&tool_s, &["--version"]).is_some_and(|v| v.trim() == KUBERNETES_VALIDATE) {
        eprintln!("xtask: kubernetes-validate {KUBERNETES_VALIDATE}: present");
        return Ok(tool);
    }
    eprintln!(
        "xtask: installing kubernetes-validate {KUBERNETES_VALIDATE} (pip, in {})",
        venv.display()
    );
    let _ = std::fs::remove_dir_all(&venv);
    let venv_ok = |py: &str| {
        Command::new(py)
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .is_ok_and(|s| s.success())
    };
    if !venv_ok("python3") {
        // Debian's python3 has venv without ensurepip until python3-venv.
        let _ = std::fs::remove_dir_all(&venv);
        apt_packages(&[("python3-venv", "/usr/share/doc/python3-venv")])?;
        if !venv_ok("/usr/bin/python3") {
            bail!("python3 -m venv {} failed", venv.display());
        }
    }
    status(
        Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "--disable-pip-version-check"])
            .arg(format!("kubernetes-validate=={KUBERNETES_VALIDATE}")),
    )?;
    Ok(tool)
}

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn status(cmd: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{cmd:?}");
    let st = cmd.status().with_context(|| format!("running {shown}"))?;
    if !st.success() {
        bail!("{shown} failed ({st})");
    }
    Ok(())
}

fn rust_src() -> anyhow::Result<()> {
    let installed = output(
        "rustup",
        &["component", "list", "--installed", "--toolchain", "nightly"],
    )
    .context("rustup with a nightly toolchain is required (`rustup toolchain install nightly`)")?;
    if installed.lines().any(|l| l.starts_with("rust-src")) {
        eprintln!("xtask: nightly rust-src: present");
        return Ok(());
    }
    eprintln!("xtask: installing the nightly's rust-src (rustup component add)");
    status(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
}

fn bpf_linker() -> anyhow::Result<()> {
    if let Some(v) = output("bpf-linker", &["--version"]) {
        if v.contains(BPF_LINKER_VERSION) {
            eprintln!("xtask: bpf-linker {BPF_LINKER_VERSION}: present");
            return Ok(());
        }
        eprintln!(
            "xtask: bpf-linker is {}, need {BPF_LINKER_VERSION}: reinstalling",
            v.trim()
        );
    } else {
        eprintln!("xtask: installing bpf-linker {BPF_LINKER_VERSION} (cargo install, ~2-3 min)");
    }
    status(Command::new("cargo").args([
        "+nightly",
        "install",
        &format!("bpf-linker@{BPF_LINKER_VERSION}"),
        "--locked",
        "--force",
    ]))
}

/// cargo-fuzz, for the short fuzz run `cargo xtask test` makes.
pub fn cargo_fuzz() -> anyhow::Result<()> {
    if output("cargo", &["fuzz", "--version"]).is_some() {
        eprintln!("xtask: cargo-fuzz: present");
        return Ok(());
    }
    eprintln!("xtask: installing cargo-fuzz (cargo install, ~1-2 min)");
    status(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
}

fn apt_packages(list: &[(&str, &str)]) -> anyhow::Result<()> {
    let missing: Vec<&str> = list
        .iter()
        .filter(|(_, probe)| !std::path::Path::new(probe).exists())
        .map(|(pkg, _)| *pkg)
        .collect();
    if missing.is_empty() {
        eprintln!("xtask: Debian packages: present");
        return Ok(());
    }
    eprintln!("xtask: installing Debian packages: {}", missing.join(" "));
    status(Command::new("apt-get").args(["update", "-qq"]))?;
    // Packages such as prometheus and prometheus-alertmanager would start
    // their service (listening on all interfaces; Alertmanager's cluster port
    // too) where systemd runs; we only want their binaries. A
    // policy-rc.d answering 101 tells invoke-rc.d not to start anything.
    let policy = std::path::Path::new("/usr/sbin/policy-rc.d");
    let placed = !policy.exists()
        && std::fs::write(
            policy,
            "#!/bin/sh\n# placed by cargo xtask bootstrap\nexit 101\n",
        )
        .is_ok()
        && std::fs::set_permissions(policy, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .is_ok();
    let result = status(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing),
    );
    if placed {
        let _ = std::fs::remove_file(policy);
    }
    result
}
