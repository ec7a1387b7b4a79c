//! The tree shows one way for data to flow: these tests read the sources
//! and check the layering the architecture promises (docs/architecture.md).
//!
//! - Only `main.rs` and `commands/` see the CLI (clap's types and the
//!   `commands` module).
//! - No import cycle among the top-level modules: an edge A -> B is a
//!   `crate::B` path in any file of A (or `super::B` from A's files one
//!   level down). The model is a leaf, the analysis is above the tables, the
//!   session above the analysis, the sinks above the session, the CLI on top.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

fn sources() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("read src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(&root).expect("under src").to_path_buf();
                out.push((rel, std::fs::read_to_string(&p).expect("read")));
            }
        }
    }
    out
}

/// The top-level module a source file belongs to (`aggregate/level.rs` ->
/// `aggregate`, `live.rs` -> `live`).
fn module_of(rel: &Path) -> String {
    let first = rel.components().next().expect("a path");
    let s = first.as_os_str().to_string_lossy();
    s.trim_end_matches(".rs").to_owned()
}

/// The code of a file without its `#[cfg(test)]` tail and comments (tests may
/// reach across layers; doc comments may mention any module).
fn code(text: &str) -> String {
    let end = text.find("#[cfg(test)]").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn test_file(rel: &Path) -> bool {
    let name = rel
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    name.contains("tests") || name.contains("testutil")
}

/// Module -> modules it uses.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let files = sources();
    let modules: BTreeSet<String> = files.iter().map(|(p, _)| module_of(p)).collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, text) in &files {
        if test_file(rel) {
            continue;
        }
        let from = module_of(rel);
        let code = code(text);
        let mut uses = BTreeSet::new();
        for m in &modules {
            if *m == from {
                continue;
            }
            let direct = format!("crate::{m}");
            let grouped = [format!("{{{m}::"), format!(" {m}::"), format!("\n    {m}")];
            let in_crate_use = code.contains(&direct)
                || code.split("crate::{").skip(1).any(|block| {
                    let block = block.split("};").next().unwrap_or("");
                    grouped.iter().any(|g| block.contains(g.as_str()))
                        || block.trim_start().starts_with(&format!("{m}::"))
                        || block.contains(&format!("{m},"))
                        || block.contains(&format!(" {m}}}"))
                });
            if in_crate_use {
                uses.insert(m.clone());
            }
        }
        g.entry(from).or_default().extend(uses);
    }
    g
}

#[test]
fn only_main_and_the_commands_see_the_cli() {
    for (rel, text) in sources() {
        let m = module_of(&rel);
        if m == "main" || m == "commands" || m == "lib" {
            continue;
        }
        let code = code(&text);
        assert!(
            !code.contains("crate::commands") && !code.contains("commands::"),
            "{} uses the CLI module",
            rel.display()
        );
        assert!(
            !code.contains("clap::") && !code.contains("use clap"),
            "{} sees clap's types",
            rel.display()
        );
    }
}

#[test]
fn no_import_cycles_between_the_top_level_modules() {
    let g = graph();
    // Depth-first search for a back edge.
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) {
        match state.get(n).copied() {
            Some(2) => return,
            Some(1) => {
                let start = path.iter().position(|p| p == n).unwrap_or(0);
                panic!("import cycle: {} -> {n}", path[start..].join(" -> "));
            }
            _ => {}
        }
        state.insert(n.to_owned(), 1);
        path.push(n.to_owned());
        for m in g.get(n).into_iter().flatten() {
            visit(m, g, state, path);
        }
        path.pop();
        state.insert(n.to_owned(), 2);
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        visit(n, &g, &mut state, &mut Vec::new());
    }
}

#[test]
fn the_layers_point_one_way() {
    let g = graph();
    let uses = |a: &str, b: &str| g.get(a).is_some_and(|s| s.contains(b));
    // The model is the leaf of the domain: it sees neither the tables nor
    // the session, the sinks or the renderers.
    for upper in [
        "aggregate",
        "analysis",
        "session",
        "live",
        "record",
        "serve",
        "report",
        "render",
        "commands",
        "ebpf",
    ] {
        assert!(!uses("model", upper), "model uses {upper}");
    }
    for sink in ["live", "record", "serve"] {
        assert!(!uses("session", sink), "session uses the sink {sink}");
        assert!(!uses("analysis", sink), "analysis uses the sink {sink}");
        assert!(!uses("aggregate", sink), "aggregate uses the sink {sink}");
    }
    for below in ["aggregate", "analysis", "model"] {
        assert!(!uses(below, "render"), "{below} uses the renderers");
        assert!(!uses(below, "session"), "{below} uses the session");
    }
    assert!(!uses("aggregate", "analysis"), "the tables use the ledger");
}
