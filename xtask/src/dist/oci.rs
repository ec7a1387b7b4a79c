//! The container image, written as an OCI image layout by hand (no
//! registry, no container engine, no base image): one gzip'd layer with the
//! binary, the shared libraries `ldd` says it loads (at the paths it loads
//! them from), their Debian copyright files, a root-only /etc/passwd and
//! /etc/group, and /tmp. The archive is an OCI layout (oci-layout,
//! index.json, blobs/sha256/) that also carries Docker's manifest.json, as
//! `docker save` does since Docker 25, so that `podman load`, `skopeo copy
//! oci-archive:`/`docker-archive:`, `docker load` and `ctr images import`
//! all take it and all call it `localhost/gpudirect-trace:VERSION`.

use std::{path::PathBuf, process::Command};

use anyhow::{bail, Context as _, Result};
use serde_json::json;

use super::{archive, image_name, Release, PACKAGE};
use crate::host;

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

pub fn file_name(rel: &Release) -> String {
    format!(
        "{PACKAGE}-{}-{}-oci.tar",
        rel.version,
        rel.triple.split('-').next().unwrap_or("x86_64")
    )
}

/// (path in the image, path here) for every library the binary loads,
/// the dynamic loader included.
fn libraries(binary: &std::path::Path) -> Result<Vec<(String, PathBuf)>> {
    let ldd = host::output(Command::new("ldd").arg(binary))?;
    if let Some(missing) = ldd.lines().find(|l| l.contains("not found")) {
        bail!("ldd {}: {}", binary.display(), missing.trim());
    }
    let libs: Vec<(String, PathBuf)> = crate::vm::initramfs::parse_ldd(&ldd)
        .into_iter()
        .map(|p| (p.trim_start_matches('/').to_string(), PathBuf::from(p)))
        .collect();
    if libs.is_empty() {
        bail!("ldd found no libraries (a static binary needs no layer of them)");
    }
    Ok(libs)
}

/// The Debian package that ships `path` here, for its copyright file.
fn package_of(path: &std::path::Path) -> Option<String> {
    let out = host::output(Command::new("dpkg-query").arg("-S").arg(path)).ok()?;
    Some(out.split(':').next()?.trim().to_string())
}

fn layer(rel: &Release) -> Result<Vec<u8>> {
    let mut t = archive::Tar::new(Vec::new(), rel.epoch);
    let mut dirs: Vec<String> = Vec::new();
    let mut ensure = |t: &mut archive::Tar<Vec<u8>>, path: &str| -> Result<()> {
        let parts: Vec<&str> = path.split('/').collect();
        for i in 1..parts.len() {
            let d = parts[..i].join("/");
            if !dirs.contains(&d) {
                t.dir(&d, 0o755)?;
                dirs.push(d);
            }
        }
        Ok(())
    };
    for d in ["dev", "proc", "sys", "run"] {
        t.dir(d, 0o755)?;
    }
    t.dir("tmp", 0o1777)?;
    ensure(&mut t, "etc/x")?;
    t.bytes(
        "etc/passwd",
        0o644,
        b"root:x:0:0:root:/:/usr/sbin/nologin\n",
    )?;
    t.bytes("etc/group", 0o644, b"root:x:0:\n")?;
    t.bytes(
        "etc/nsswitch.conf",
        0o644,
        b"passwd: files\ngroup: files\nhosts: files dns\n",
    )?;
    let bin = format!("usr/bin/{PACKAGE}");
    ensure(&mut t, &bin)?;
    t.file(&bin, 0o755, &rel.binary)?;
    let doc = format!("usr/share/doc/{PACKAGE}");
    for l in super::tarball::LICENCES {
        let p = format!("{doc}/{l}");
        ensure(&mut t, &p)?;
        t.file(&p, 0o644, &rel.root.join(l))?;
    }
    let p = format!("{doc}/{}", super::NOTICES);
    t.file(&p, 0o644, &rel.notices)?;
    let mut packages = Vec::new();
    for (inside, here) in libraries(&rel.binary)? {
        ensure(&mut t, &inside)?;
        // The file itself, under the name the loader looks for.
        let real = here
            .canonicalize()
            .with_context(|| format!("{}", here.display()))?;
        t.file(&inside, 0o755, &real)?;
        if let Some(p) = package_of(&here).or_else(|| package_of(&real)) {
            if !packages.contains(&p) {
                packages.push(p);
            }
        }
    }
    packages.sort();
    for p in packages {
        let src = PathBuf::from(format!("/usr/share/doc/{p}/copyright"));
        if src.exists() {
            let inside = format!("usr/share/doc/{p}/copyright");
            ensure(&mut t, &inside)?;
            t.file(&inside, 0o644, &src)?;
        }
    }
    t.finish()
}

pub fn build(rel: &Release) -> Result<PathBuf> {
    let layer_tar = layer(rel)?;
    let diff_id = format!("sha256:{}", archive::sha256_hex(&layer_tar));
    let layer_gz = archive::gzip_bytes(&layer_tar)?;
    let layer_digest = archive::sha256_hex(&layer_gz);
    let (_, _, created) = super::deb::date_time(rel.epoch);
    let mut labels = json!({
        "org.opencontainers.image.title": PACKAGE,
        "org.opencontainers.image.description":
            "eBPF tracer for DMA, IOMMU and GPUDirect paths (Prometheus exporter: serve)",
        "org.opencontainers.image.version": rel.version,
        "org.opencontainers.image.licenses": "MIT OR Apache-2.0",
        "org.opencontainers.image.source": "https://github.com/gpudirect-trace/gpudirect-trace",
        "org.opencontainers.image.created": created,
    });
    if let Some(c) = &rel.commit {
        labels["org.opencontainers.image.revision"] = json!(c);
    }
    let config = json!({
        "architecture": rel.oci_arch,
        "os": "linux",
        "created": created,
        "config": {
            "Entrypoint": [format!("/usr/bin/{PACKAGE}")],
            // What the kernel offers; a DaemonSet passes `serve ...` instead.
            "Cmd": ["probes"],
            "Env": ["PATH=/usr/bin"],
            "WorkingDir": "/",
            "ExposedPorts": {"9435/tcp": {}},
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{
            "created": created,
            "created_by": "cargo xtask dist (the binary, the libraries it loads, /etc/passwd)",
        }],
    });
    let config = serde_json::to_vec(&config)?;
    let config_digest = archive::sha256_hex(&config);
    let name = image_name(&rel.version);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": format!("sha256:{config_digest}"), "size": config.len()},
        "layers": [{"mediaType": LAYER, "digest": format!("sha256:{layer_digest}"), "size": layer_gz.len()}],
        "annotations": labels,
    });
    let manifest = serde_json::to_vec(&manifest)?;
    let manifest_digest = archive::sha256_hex(&manifest);
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": MANIFEST,
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest.len(),
            "platform": {"architecture": rel.oci_arch, "os": "linux"},
            "annotations": {
                // containerd (ctr import) names the image after this one,
                "io.containerd.image.name": name,
                // OCI tools (skopeo oci-archive:FILE:TAG) after this one.
                "org.opencontainers.image.ref.name": rel.version,
            },
        }],
    });
    // docker load reads this one.
    let docker = json!([{
        "Config": format!("blobs/sha256/{config_digest}"),
        "RepoTags": [name],
        "Layers": [format!("blobs/sha256/{layer_digest}")],
    }]);

    let path = rel.out.join(file_name(rel));
    let mut t = archive::Tar::new(archive::create(&path)?, rel.epoch);
    t.bytes("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    t.bytes("index.json", 0o644, &serde_json::to_vec(&index)?)?;
    t.bytes("manifest.json", 0o644, &serde_json::to_vec(&docker)?)?;
    t.dir("blobs", 0o755)?;
    t.dir("blobs/sha256", 0o755)?;
    t.bytes(&format!("blobs/sha256/{config_digest}"), 0o644, &config)?;
    t.bytes(&format!("blobs/sha256/{manifest_digest}"), 0o644, &manifest)?;
    t.bytes(&format!("blobs/sha256/{layer_digest}"), 0o644, &layer_gz)?;
    t.finish()?.into_inner()?.sync_all()?;
    Ok(path)
}
