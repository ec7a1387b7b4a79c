//! THIRD-PARTY-LICENSES: the binary links its Rust dependencies statically
//! (73 crates from crates.io on x86_64 when written, the eBPF object's
//! included; zstd-sys vendors the C zstd library), and their MIT, BSD and
//! Apache-2.0 licences ask that their notices travel with the binary. Read from `cargo metadata` (normal
//! dependencies of the shipped crates, proc-macros and build scripts left
//! out: their code is not in the binary) and the licence files each crate
//! ships; identical texts are printed once, under every crate that uses them.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};
use serde_json::Value;

use crate::host;

struct Crate {
    name: String,
    version: String,
    license: String,
    dir: PathBuf,
}

/// The crates `root` (a package name) links, from `cargo metadata` of `manifest`.
fn linked(manifest: &Path, root: &str, platform: &str) -> Result<Vec<Crate>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = host::output(
        Command::new(cargo)
            .args([
                "metadata",
                "--format-version",
                "1",
                "--locked",
                "--filter-platform",
                platform,
            ])
            .arg("--manifest-path")
            .arg(manifest),
    )?;
    let meta: Value = serde_json::from_str(&out).context("cargo metadata")?;
    let packages: BTreeMap<&str, &Value> = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let nodes: BTreeMap<&str, &Value> = meta["resolve"]["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let is_proc_macro = |p: &Value| {
        p["targets"].as_array().into_iter().flatten().any(|t| {
            t["kind"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k == "proc-macro")
        })
    };
    let start = packages
        .iter()
        .find(|(_, p)| p["name"] == root)
        .map(|(id, _)| *id)
        .with_context(|| format!("{root} not in cargo metadata of {}", manifest.display()))?;
    let mut seen = BTreeSet::new();
    let mut stack = vec![start];
    while let Some(id) = stack.pop() {
        if !seen.insert(id) {
            continue;
        }
        for dep in nodes
            .get(id)
            .and_then(|n| n["deps"].as_array())
            .into_iter()
            .flatten()
        {
            let normal = dep["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].is_null());
            let Some(pkg) = dep["pkg"].as_str() else {
                continue;
            };
            if normal && packages.get(pkg).is_some_and(|p| !is_proc_macro(p)) {
                stack.push(pkg);
            }
        }
    }
    Ok(seen
        .into_iter()
        .filter_map(|id| packages.get(id))
        .filter(|p| p["source"].is_string()) // not the workspace's own crates
        .map(|p| Crate {
            name: p["name"].as_str().unwrap_or_default().into(),
            version: p["version"].as_str().unwrap_or_default().into(),
            license: p["license"].as_str().unwrap_or("(none declared)").into(),
            dir: PathBuf::from(p["manifest_path"].as_str().unwrap_or_default())
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        })
        .collect())
}

fn is_licence_file(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    [
        "LICENSE",
        "LICENCE",
        "COPYING",
        "COPYRIGHT",
        "NOTICE",
        "UNLICENSE",
    ]
    .iter()
    .any(|p| n.starts_with(p))
        // yaml-rust2 ships MIT-LICENSE and Apache-LICENSE.
        || n.ends_with("-LICENSE")
        || n.ends_with("-LICENCE")
}

/// Licence files at the crate's top, and one level down for -sys crates
/// (where the vendored C library keeps its own).
fn licence_texts(c: &Crate) -> Vec<(String, String)> {
    let mut dirs = vec![(String::new(), c.dir.clone())];
    if c.name.ends_with("-sys") {
        if let Ok(rd) = std::fs::read_dir(&c.dir) {
            for e in rd.flatten().filter(|e| e.path().is_dir()) {
                dirs.push((format!("{}/", e.file_name().to_string_lossy()), e.path()));
            }
        }
    }
    let mut out = Vec::new();
    for (prefix, dir) in dirs {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<_> = rd
            .flatten()
            .filter(|e| e.path().is_file() && is_licence_file(&e.file_name().to_string_lossy()))
            .collect();
        files.sort_by_key(|e| e.file_name());
        for f in files {
            if let Ok(text) = std::fs::read_to_string(f.path()) {
                out.push((format!("{prefix}{}", f.file_name().to_string_lossy()), text));
            }
        }
    }
    out
}

pub fn render(root: &Path, host_triple: &str) -> Result<String> {
    let mut crates = linked(&root.join("Cargo.toml"), "gpudirect-trace", host_triple)?;
    let ebpf = linked(
        &root.join("gpudirect-trace-ebpf/Cargo.toml"),
        "gpudirect-trace-ebpf",
        "bpfel-unknown-none",
    )?;
    let mut ebpf_names = BTreeSet::new();
    for c in ebpf {
        ebpf_names.insert(format!("{} {}", c.name, c.version));
        if !crates
            .iter()
            .any(|h| h.name == c.name && h.version == c.version)
        {
            crates.push(c);
        }
    }
    crates.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
    // text -> the crates (and file names) that ship it
    let mut texts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut index = String::new();
    for c in &crates {
        let id = format!("{} {}", c.name, c.version);
        let mark = if ebpf_names.contains(&id) {
            " [in the eBPF object]"
        } else {
            ""
        };
        let files = licence_texts(c);
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        index.push_str(&format!(
            "  {id}: {}{mark}{}\n",
            c.license,
            if names.is_empty() {
                " (the crate ships no licence file)".to_string()
            } else {
                format!(" ({})", names.join(", "))
            }
        ));
        for (name, text) in files {
            texts.entry(text).or_default().push(format!("{id} {name}"));
        }
    }
    let mut out = format!(
        "gpudirect-trace is MIT OR Apache-2.0 (LICENSE-MIT, LICENSE-APACHE). Its\n\
         binary also contains the Rust standard library (MIT OR Apache-2.0) and\n\
         the {} crates below, each under the licence it declares; their licence\n\
         files follow, each text once with the crates that ship it.\n\n",
        crates.len()
    );
    out.push_str(&index);
    let mut by_first: Vec<(Vec<String>, String)> =
        texts.into_iter().map(|(t, users)| (users, t)).collect();
    by_first.sort();
    for (users, text) in by_first {
        out.push_str(&format!(
            "\n{}\n{}\n{}\n\n",
            "=".repeat(78),
            users.join("\n"),
            "-".repeat(78)
        ));
        out.push_str(text.trim_end());
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn licence_file_names() {
        for n in [
            "LICENSE",
            "LICENSE-MIT",
            "license.txt",
            "COPYING",
            "NOTICE",
            "LICENCE.BSD-3-Clause",
            "MIT-LICENSE",
            "Apache-LICENSE",
        ] {
            assert!(is_licence_file(n), "{n}");
        }
        for n in ["README.md", "Cargo.toml", "src"] {
            assert!(!is_licence_file(n), "{n}");
        }
    }
}
