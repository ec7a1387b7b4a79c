//! Reading Debian's package metadata for the kernel fetch (kernel.rs) and the
//! headers fetch (headers.rs): which image package is the newest of a series,
//! which series is the newest of a suite, and what a package's `Depends` names.
//! Pure functions over `apt-cache` output, so they are unit-tested here.

/// Natural-order key: digit runs compare as numbers (`6.12.117` > `6.12.99`).
pub fn natural_key(s: &str) -> Vec<(u64, String)> {
    let mut key = Vec::new();
    let mut num = String::new();
    let mut text = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            if !text.is_empty() {
                key.push((0, std::mem::take(&mut text)));
            }
            num.push(c);
        } else {
            if !num.is_empty() {
                key.push((num.parse().unwrap_or(u64::MAX), String::new()));
                num.clear();
            }
            text.push(c);
        }
    }
    if !num.is_empty() {
        key.push((num.parse().unwrap_or(u64::MAX), String::new()));
    }
    if !text.is_empty() {
        key.push((0, text));
    }
    key
}

/// `linux-image-<version>-amd64` of the generic flavour: not cloud, rt, the
/// unsigned twin, a -dbg package or a metapackage (`linux-image-amd64`).
/// Returns the version part (`6.12.117+deb13`, `6.1.0-41`).
fn generic_image_version(name: &str) -> Option<&str> {
    let mid = name.strip_prefix("linux-image-")?.strip_suffix("-amd64")?;
    let generic = !mid.contains("cloud") && !mid.contains("-rt") && !mid.contains("unsigned");
    (generic && mid.starts_with(|c: char| c.is_ascii_digit())).then_some(mid)
}

/// `6.12.117+deb13` → `6.12`: the first two numeric components.
pub fn series_of_version(version: &str) -> Option<String> {
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let (a, b) = (parts.next()?, parts.next()?);
    (!a.is_empty() && !b.is_empty()).then(|| format!("{a}.{b}"))
}

/// `"7.2"` → `(7, 2)`; `None` for anything that is not `MAJOR.MINOR`.
pub fn parse_series(series: &str) -> Option<(u32, u32)> {
    let (a, b) = series.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Picks the newest generic amd64 image package of `series` from `names`.
pub fn pick_package<'a>(series: &str, names: impl Iterator<Item = &'a str>) -> Option<String> {
    names
        .filter(|n| {
            generic_image_version(n)
                .and_then(series_of_version)
                .as_deref()
                == Some(series)
        })
        .max_by_key(|n| natural_key(n))
        .map(str::to_string)
}

/// The newest kernel series with a generic amd64 image among `names`
/// (`apt-cache pkgnames linux-image-` of one suite), read from the names only.
pub fn newest_series<'a>(names: impl Iterator<Item = &'a str>) -> Option<String> {
    names
        .filter_map(generic_image_version)
        .filter_map(series_of_version)
        .max_by_key(|s| parse_series(s))
}

/// One item of a `Depends:` field: the package and, for `(= V)`, the exact
/// version it must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dep {
    pub name: String,
    pub exact: Option<String>,
}

/// The hard dependencies in `apt-cache show` output (its first `Depends:`
/// line; `Pre-Depends:` is not read). An alternative (`a | b`) is one
/// choice the harness never needs (initramfs tools): every alternative is
/// kept, and the callers filter by name.
pub fn depends_field(show: &str) -> Vec<Dep> {
    let Some(field) = show.lines().find_map(|l| l.strip_prefix("Depends:")) else {
        return Vec::new();
    };
    field
        .split([',', '|'])
        .filter_map(|item| {
            let item = item.trim();
            let (name, rest) = item.split_once(' ').unwrap_or((item, ""));
            let name = name.split(':').next().unwrap_or(name).trim();
            if name.is_empty() {
                return None;
            }
            let exact = rest
                .trim()
                .strip_prefix("(=")
                .and_then(|v| v.strip_suffix(')'))
                .map(|v| v.trim().to_string());
            Some(Dep {
                name: name.to_string(),
                exact,
            })
        })
        .collect()
}

/// The packages of a kernel image split into parts: those dependencies named
/// after the same release (`linux-binary-R`, `linux-modules-R`,
/// `linux-base-R` for `linux-image-R`), found by name, never by version. A
/// single-package image (5.10 .. 6.18) gives its `linux-base-R` only, which
/// carries no image or modules (and is not always in the suite's lists).
pub fn image_parts(release: &str, deps: &[Dep]) -> Vec<Dep> {
    let suffix = format!("-{release}");
    let mut out: Vec<Dep> = deps
        .iter()
        .filter(|d| d.name.starts_with("linux-") && d.name.ends_with(&suffix))
        .cloned()
        .collect();
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// `name=version` for `apt-get download` where the version is pinned.
pub fn download_spec(d: &Dep) -> String {
    match &d.exact {
        Some(v) => format!("{}={v}", d.name),
        None => d.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_newest_generic_image() {
        let names = [
            "linux-image-6.12.107+deb13-amd64",
            "linux-image-6.12.117+deb13-cloud-amd64",
            "linux-image-6.12.99+deb13-amd64",
            "linux-image-6.12.117+deb13-amd64",
            "linux-image-6.12.117+deb13-rt-amd64",
            "linux-image-6.12.118+deb13-amd64-dbg",
            "linux-image-amd64",
        ];
        assert_eq!(
            pick_package("6.12", names.iter().copied()).as_deref(),
            Some("linux-image-6.12.117+deb13-amd64")
        );
        let old = ["linux-image-5.10.0-30-amd64", "linux-image-5.10.0-32-amd64"];
        assert_eq!(
            pick_package("5.10", old.iter().copied()).as_deref(),
            Some("linux-image-5.10.0-32-amd64")
        );
        // 6.1 must not match 6.12 packages.
        assert_eq!(pick_package("6.1", names.iter().copied()), None);
    }

    #[test]
    fn newest_series_compares_numbers_not_text() {
        // trixie-backports' list as seen on 2026-12-02 (abridged).
        let names = [
            "linux-image-6.18.15+deb13-amd64",
            "linux-image-6.19.14+deb13-amd64",
            "linux-image-7.2.12+deb13-amd64",
            "linux-image-7.3.4+deb13-cloud-amd64",
            "linux-image-7.10.1+deb14-rt-amd64",
            "linux-image-7.3.4+deb13-amd64",
            "linux-image-amd64",
        ];
        assert_eq!(newest_series(names.iter().copied()).as_deref(), Some("7.3"));
        let sid = ["linux-image-7.2.13+deb14-amd64", "linux-image-amd64"];
        assert_eq!(newest_series(sid.iter().copied()).as_deref(), Some("7.2"));
        assert_eq!(newest_series(["linux-image-amd64"].into_iter()), None);
        assert_eq!(parse_series("7.2"), Some((7, 2)));
        assert_eq!(parse_series("newest"), None);
        assert_eq!(series_of_version("6.1.0-41").as_deref(), Some("6.1"));
    }

    #[test]
    fn split_image_depends_on_its_parts() {
        // sid's linux-image-7.2.13+deb14-amd64 (a 2 KB package).
        let show = "Package: linux-image-7.2.13+deb14-amd64\nVersion: 7.2.13-1\n\
            Depends: dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, \
            linux-base-7.2.13+deb14-amd64 (= 7.2.13-1), linux-binary-7.2.13+deb14-amd64 (= 7.2.13-1), \
            linux-modules-7.2.13+deb14-amd64 (= 7.2.13-1)\nPre-Depends: linux-base (>= 4.12~)\n";
        let parts = image_parts("7.2.13+deb14-amd64", &depends_field(show));
        let specs: Vec<String> = parts.iter().map(download_spec).collect();
        assert_eq!(
            specs,
            [
                "linux-base-7.2.13+deb14-amd64=7.2.13-1",
                "linux-binary-7.2.13+deb14-amd64=7.2.13-1",
                "linux-modules-7.2.13+deb14-amd64=7.2.13-1"
            ]
        );
        // trixie-backports' 6.18: one package carrying image and modules.
        let one =
            "Depends: dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, kmod, \
            linux-base-6.18.15+deb13-amd64 (= 6.18.15-1~bpo13+1)\n";
        let parts = image_parts("6.18.15+deb13-amd64", &depends_field(one));
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].name, "linux-base-6.18.15+deb13-amd64");
        // 6.1: no release-named dependency at all.
        let old = "Depends: kmod, linux-base (>= 4.3~), initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool\n";
        assert!(image_parts("6.1.0-41-amd64", &depends_field(old)).is_empty());
    }

    #[test]
    fn headers_depends_keep_their_pinned_versions() {
        let show = "Depends: linux-headers-6.1.0-50-common (= 6.1.176-1), linux-kbuild-6.1 (>= 6.1.176-1), \
            linux-compiler-gcc-12-x86 (>= 6.1.176-1)\n";
        let d = depends_field(show);
        assert_eq!(d[0].exact.as_deref(), Some("6.1.176-1"));
        assert_eq!(d[1].name, "linux-kbuild-6.1");
        assert_eq!(d[1].exact, None, ">= is not a pin");
        assert_eq!(
            download_spec(&d[0]),
            "linux-headers-6.1.0-50-common=6.1.176-1"
        );
        assert!(depends_field("Package: x\n").is_empty());
    }
}
