//! The release tarball: one top directory named after the release, with
//! bin/gpudirect-trace, deploy/, docs/, README.md, the licences and a
//! SHA256SUMS of everything else in it (`sha256sum -c SHA256SUMS` inside).

use std::path::PathBuf;

use anyhow::Result;

use super::{archive, doc_files, Release, PACKAGE};

pub const LICENCES: &[&str] = &["LICENSE-MIT", "LICENSE-APACHE"];

pub fn build(rel: &Release) -> Result<PathBuf> {
    let top = format!("{PACKAGE}-{}-{}", rel.version, rel.triple);
    let path = rel.out.join(format!("{top}.tar.gz"));
    let mut files: Vec<(String, PathBuf, u32)> =
        vec![(format!("bin/{PACKAGE}"), rel.binary.clone(), 0o755)];
    for l in LICENCES {
        files.push((l.to_string(), rel.root.join(l), 0o644));
    }
    files.push((super::NOTICES.to_string(), rel.notices.clone(), 0o644));
    for (name, src) in doc_files(&rel.root)? {
        files.push((name, src, 0o644));
    }
    files.sort();
    let listed: Vec<(String, PathBuf)> = files
        .iter()
        .map(|(n, p, _)| (n.clone(), p.clone()))
        .collect();
    let sums = archive::sha256sums(&listed)?;

    let mut tar = archive::Tar::new(archive::gzip(archive::create(&path)?), rel.epoch);
    tar.dir(&top, 0o755)?;
    let mut dirs_done: Vec<String> = Vec::new();
    for (name, src, mode) in &files {
        // Parent directories first, once each, so that tar -x gives them 0755.
        let mut parent = String::new();
        for part in name
            .split('/')
            .collect::<Vec<_>>()
            .split_last()
            .map_or(&[][..], |p| p.1)
        {
            parent = if parent.is_empty() {
                part.to_string()
            } else {
                format!("{parent}/{part}")
            };
            if !dirs_done.contains(&parent) {
                tar.dir(&format!("{top}/{parent}"), 0o755)?;
                dirs_done.push(parent.clone());
            }
        }
        tar.file(&format!("{top}/{name}"), *mode, src)?;
    }
    tar.bytes(&format!("{top}/SHA256SUMS"), 0o644, sums.as_bytes())?;
    tar.finish()?.finish()?.into_inner()?.sync_all()?;
    Ok(path)
}
