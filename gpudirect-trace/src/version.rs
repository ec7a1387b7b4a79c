//! What `gpudirect-trace --version` says: the release, the git commit the
//! binary was built from (and whether its sources had uncommitted changes),
//! and which eBPF object is embedded (the sha256 of its bytes), so that a bug
//! report names the exact build. Computed by build.rs.

/// The text after `gpudirect-trace ` in `--version`, one fact per line.
pub fn long_version() -> &'static str {
    include_str!(concat!(env!("OUT_DIR"), "/long_version.txt"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_release_commit_and_ebpf_object() {
        let v = long_version();
        let lines: Vec<&str> = v.lines().collect();
        assert_eq!(lines.first(), Some(&env!("CARGO_PKG_VERSION")), "{v}");
        let commit = lines
            .iter()
            .find_map(|l| l.strip_prefix("commit: "))
            .unwrap_or_else(|| panic!("no commit line: {v}"));
        let hex = commit.split(' ').next().unwrap_or_default();
        assert!(
            commit.starts_with("unknown")
                || (hex.len() == 12 && hex.bytes().all(|b| b.is_ascii_hexdigit())),
            "{commit}"
        );
        let object = lines
            .iter()
            .find_map(|l| l.strip_prefix("eBPF object: sha256 "))
            .unwrap_or_else(|| panic!("no eBPF object line: {v}"));
        let (sha, size) = object.split_once(", ").unwrap_or_default();
        assert_eq!(sha.len(), 12, "{object}");
        let bytes: usize = size
            .strip_suffix(" bytes")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{object}"));
        assert!(bytes > 1000, "{object}");
    }
}
