//! The image archive: skopeo reads it both as an OCI archive and as a Docker
//! archive, `podman load` loads it under the name daemonset.yaml uses, and
//! `probes` runs in it with the DaemonSet's privileges (no --privileged:
//! CAP_BPF, CAP_PERFMON and CAP_SYSLOG, seccomp unconfined, the same
//! read-only host mounts, a read-only root) and sees what the host sees.
//!
//! Whether this machine can run containers at all is found out first with a
//! one-file busybox image: if no way works, running is SKIPPED with podman's
//! answers. Measured on the project's machines (Firecracker VM, root without
//! CAP_SYS_RESOURCE, cgroup v1 plus a v2 hierarchy holding hugetlb): podman's
//! defaults fail (it raises RLIMIT_NOFILE, which needs CAP_SYS_RESOURCE; crun
//! refuses "hybrid" cgroups), runc with lowered limits works.

use std::{path::Path, process::Command};

use anyhow::{bail, Result};

use super::{
    check::{capture, stdout, Outcome, Report},
    Artifacts, PACKAGE,
};

const PROBE_IMAGE: &str = "localhost/gpudirect-trace-runtime-probe:1";

/// Ways of running a container, tried in order: podman's defaults, then
/// lowered limits (lowering needs no capability), then runc.
const WAYS: &[(&str, &[&str], &[&str])] = &[
    ("podman defaults", &[], &[]),
    (
        "crun, lowered RLIMIT_NOFILE/NPROC",
        &[],
        &[
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=8192:8192",
        ],
    ),
    (
        "runc, lowered RLIMIT_NOFILE/NPROC",
        &["--runtime", "runc"],
        &[
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=8192:8192",
        ],
    ),
];

pub fn run(a: &Artifacts, scratch: &Path, r: &mut Report) {
    r.check("skopeo inspect oci-archive and docker-archive", skopeo(a));
    let loaded = load(a);
    let ok = loaded.is_ok();
    r.check("podman load", loaded);
    if !ok {
        r.record(
            "probes in the image (podman)",
            Outcome::Failed("the image did not load".into()),
        );
        return;
    }
    match runtime(scratch) {
        Err(why) => r.record("probes in the image (podman)", Outcome::Skipped(why)),
        Ok(way) => r.check("probes in the image (podman)", probes(a, way)),
    }
    let _ = Command::new("podman")
        .args(["rmi", "-f", &a.image, PROBE_IMAGE])
        .output();
}

fn skopeo(a: &Artifacts) -> Result<String> {
    let mut seen = Vec::new();
    for transport in ["oci-archive", "docker-archive"] {
        let out = stdout(
            Command::new("skopeo")
                .args(["inspect", "--config"])
                .arg(format!("{transport}:{}", a.oci.display())),
        )?;
        let v: serde_json::Value = serde_json::from_str(&out)?;
        let entry = &v["config"]["Entrypoint"][0];
        if entry != &format!("/usr/bin/{PACKAGE}") {
            bail!("{transport}: entrypoint {entry}");
        }
        seen.push(format!("{transport}: {} {}", v["os"], v["architecture"]));
    }
    Ok(seen.join(", "))
}

fn load(a: &Artifacts) -> Result<String> {
    let _ = Command::new("podman")
        .args(["rmi", "-f", &a.image])
        .output();
    let out = capture(Command::new("podman").args(["load", "-i"]).arg(&a.oci))?;
    capture(Command::new("podman").args(["image", "exists", &a.image]))
        .map_err(|_| anyhow::anyhow!("loaded, but not as {}:\n{out}", a.image))?;
    Ok(format!("as {}", a.image))
}

/// The first way of running a trivial container that works here, or why none does.
fn runtime(
    scratch: &Path,
) -> std::result::Result<
    &'static (
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
    ),
    String,
> {
    let root = scratch.join("probe-rootfs");
    let prepared = (|| -> Result<()> {
        std::fs::create_dir_all(root.join("bin"))?;
        std::fs::copy("/bin/busybox", root.join("bin/busybox"))?;
        let tar = scratch.join("probe-rootfs.tar");
        capture(
            Command::new("tar")
                .arg("-cf")
                .arg(&tar)
                .arg("-C")
                .arg(&root)
                .arg("."),
        )?;
        capture(
            Command::new("podman")
                .args(["import", "-q"])
                .arg(&tar)
                .arg(PROBE_IMAGE),
        )?;
        Ok(())
    })();
    if let Err(e) = prepared {
        return Err(format!(
            "could not make a busybox image to try the runtime with: {e:#}"
        ));
    }
    let mut answers = Vec::new();
    for way in WAYS {
        let (name, global, run) = way;
        let out = Command::new("podman")
            .args(*global)
            .args(["run", "--rm", "--network=none"])
            .args(*run)
            .args([PROBE_IMAGE, "/bin/busybox", "echo", "container-ok"])
            .output();
        match out {
            Ok(o) if String::from_utf8_lossy(&o.stdout).trim() == "container-ok" => {
                eprintln!("xtask: dist: containers run here with: {name}");
                return Ok(way);
            }
            Ok(o) => answers.push(format!(
                "{name}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => answers.push(format!("{name}: {e}")),
        }
    }
    Err(format!(
        "podman cannot run any container on this machine: {}",
        answers.join("; ")
    ))
}

fn probes(a: &Artifacts, way: &(&str, &[&str], &[&str])) -> Result<String> {
    // The host's view first (this also mounts tracefs where it is missing).
    let host = stdout(Command::new(&a.binary).args(["probes", "--json"]))?;
    let host: serde_json::Value = serde_json::from_str(&host)?;
    let (_, global, run) = way;
    let out = stdout(
        Command::new("podman")
            .args(*global)
            .args(["run", "--rm", "--network=none", "--read-only"])
            .args(*run)
            .args(["--cap-drop=all", "--cap-add=BPF,PERFMON,SYSLOG"])
            .args(["--security-opt", "seccomp=unconfined"])
            .args(["-v", "/sys/kernel/btf:/sys/kernel/btf:ro"])
            .args(["-v", "/sys/kernel/tracing:/sys/kernel/tracing:ro"])
            .args(["-v", "/sys/fs/bpf:/sys/fs/bpf:ro"])
            .args(["--device", "/dev/kmsg:/dev/kmsg:r"])
            .arg(&a.image)
            .args(["probes", "--json", "--strict"]),
    )?;
    let inside: serde_json::Value = serde_json::from_str(&out)
        .map_err(|e| anyhow::anyhow!("probes --json in the container: {e}:\n{out}"))?;
    let statuses = |v: &serde_json::Value| -> Vec<(String, String)> {
        v["probes"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| (p["name"].to_string(), p["status"].to_string()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (h, i) = (statuses(&host), statuses(&inside));
    let attached = i.iter().filter(|(_, s)| s == "\"attached\"").count();
    if h != i || attached == 0 {
        bail!("probe statuses differ from the host's (or none attached):\nhost: {h:?}\ncontainer: {i:?}");
    }
    Ok(format!(
        "{attached} probes attached in the container, as on the host ({})",
        way.0
    ))
}
