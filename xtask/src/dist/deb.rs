//! The .deb, built by dpkg-deb from a staging tree: the binary in /usr/bin,
//! the unit in /lib/systemd/system (ExecStart pointed at /usr/bin), docs and
//! the deploy/ examples in /usr/share/doc/gpudirect-trace, a manual page, a
//! machine-readable copyright file, and maintainer scripts (debian/) that
//! never enable or start the service unless asked (GPUDIRECT_TRACE_ENABLE=1).
//! Depends come from the binary's own ELF version needs, as dpkg-shlibdeps
//! would compute them.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _, Result};

use super::{archive, doc_files, manpage, Release, NOTICES, PACKAGE};
use crate::host;

/// Who answers for the package (Debian requires a name and an address).
pub const MAINTAINER: &str =
    "gpudirect-trace developers <gpudirect-trace@users.noreply.github.com>";
const HOMEPAGE: &str = "https://github.com/gpudirect-trace/gpudirect-trace";
pub const DEBIAN_REVISION: &str = "1";

const POSTINST: &str = include_str!("debian/postinst");
const PRERM: &str = include_str!("debian/prerm");
const POSTRM: &str = include_str!("debian/postrm");
const LINTIAN_OVERRIDES: &str = include_str!("debian/lintian-overrides");

pub const UNIT_PATH: &str = "lib/systemd/system/gpudirect-trace.service";

pub fn file_name(rel: &Release) -> String {
    format!(
        "{PACKAGE}_{}-{DEBIAN_REVISION}_{}.deb",
        rel.version, rel.deb_arch
    )
}

pub fn build(rel: &Release) -> Result<PathBuf> {
    let stage = rel.work.join("deb");
    let doc = format!("usr/share/doc/{PACKAGE}");
    let mut files: Vec<(String, Vec<u8>, u32)> = Vec::new();
    files.push((
        format!("usr/bin/{PACKAGE}"),
        std::fs::read(&rel.binary)?,
        0o755,
    ));
    files.push((UNIT_PATH.into(), unit(&rel.root)?.into_bytes(), 0o644));
    for (name, src) in doc_files(&rel.root)? {
        // deploy/ is examples in Debian's terms.
        let name = match name.strip_prefix("deploy/") {
            Some(rest) => format!("examples/{rest}"),
            None => name,
        };
        files.push((format!("{doc}/{name}"), std::fs::read(&src)?, 0o644));
    }
    files.push((
        format!("{doc}/copyright"),
        copyright(&rel.root)?.into_bytes(),
        0o644,
    ));
    files.push((
        format!("{doc}/{}.gz", super::NOTICES),
        archive::gzip_bytes(&std::fs::read(&rel.notices)?)?,
        0o644,
    ));
    files.push((
        format!("{doc}/changelog.Debian.gz"),
        archive::gzip_bytes(changelog(rel).as_bytes())?,
        0o644,
    ));
    files.push((
        format!("usr/share/lintian/overrides/{PACKAGE}"),
        LINTIAN_OVERRIDES.as_bytes().to_vec(),
        0o644,
    ));
    let page = manpage::render(&rel.binary, &rel.version, &date(rel.epoch).0)?;
    files.push((
        format!("usr/share/man/man1/{PACKAGE}.1.gz"),
        archive::gzip_bytes(page.as_bytes())?,
        0o644,
    ));

    if stage.exists() {
        std::fs::remove_dir_all(&stage)?;
    }
    let mut md5 = Vec::new();
    let mut installed_kib = 0u64;
    for (name, data, mode) in &files {
        let path = stage.join(name);
        write(&path, data, *mode)?;
        installed_kib += (data.len() as u64).div_ceil(1024);
        md5.push(name.clone());
    }
    let control = control(rel, installed_kib)?;
    let debian = stage.join("DEBIAN");
    write(&debian.join("control"), control.as_bytes(), 0o644)?;
    write(&debian.join("postinst"), POSTINST.as_bytes(), 0o755)?;
    write(&debian.join("prerm"), PRERM.as_bytes(), 0o755)?;
    write(&debian.join("postrm"), POSTRM.as_bytes(), 0o755)?;
    let sums = host::output(Command::new("md5sum").current_dir(&stage).args(&md5))?;
    write(&debian.join("md5sums"), sums.as_bytes(), 0o644)?;
    set_mtimes(&stage, rel.epoch)?;

    let out = rel.out.join(file_name(rel));
    host::run(
        Command::new("dpkg-deb")
            .env("SOURCE_DATE_EPOCH", rel.epoch.to_string())
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&stage)
            .arg(&out),
    )
    .context("dpkg-deb --build")?;
    Ok(out)
}

fn write(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, data).with_context(|| format!("writing {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// Staged files and directories get the release's time (and 0755 for
/// directories, whatever the umask), so that data.tar is the same every build.
fn set_mtimes(dir: &Path, epoch: u64) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(epoch);
    let times = std::fs::FileTimes::new().set_modified(t).set_accessed(t);
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            set_mtimes(&p, epoch)?;
        } else {
            std::fs::File::options()
                .write(true)
                .open(&p)?
                .set_times(times)?;
        }
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    std::fs::File::open(dir)?.set_times(times)?;
    Ok(())
}

/// deploy/'s unit, with ExecStart where the package puts the binary.
pub fn unit(root: &Path) -> Result<String> {
    let text = std::fs::read_to_string(root.join("deploy/systemd/gpudirect-trace.service"))?;
    // One active ExecStart; the commented flight-recorder variant names the
    // same path and moves with it.
    let from = "ExecStart=/usr/local/bin/gpudirect-trace ";
    let active = text.lines().filter(|l| l.starts_with(from)).count();
    if active != 1 {
        bail!("deploy/systemd/gpudirect-trace.service: expected one `{from}` line, found {active}");
    }
    Ok(text
        .replace(
            "/usr/local/bin/gpudirect-trace ",
            "/usr/bin/gpudirect-trace ",
        )
        .replace(
            "# Install: copy target/release/gpudirect-trace to /usr/local/bin, this file to\n\
             # /etc/systemd/system/, then `systemctl daemon-reload && systemctl enable --now\n\
             # gpudirect-trace`.",
            "# Installed by the gpudirect-trace package, which does not enable it: start it\n\
             # with `systemctl enable --now gpudirect-trace`.",
        ))
}

fn control(rel: &Release, installed_kib: u64) -> Result<String> {
    let depends = depends(&rel.binary)?;
    Ok(format!(
        "Package: {PACKAGE}\n\
         Version: {}-{DEBIAN_REVISION}\n\
         Architecture: {}\n\
         Maintainer: {MAINTAINER}\n\
         Installed-Size: {installed_kib}\n\
         Depends: {depends}\n\
         Section: admin\n\
         Priority: optional\n\
         Homepage: {HOMEPAGE}\n\
         Description: eBPF tracer for DMA, IOMMU and GPUDirect paths\n \
         Attaches eBPF programs to the kernel's iommu, dma and swiotlb tracepoints\n \
         and the NVIDIA driver's Xid tracepoint, and aggregates per PCI device:\n \
         mappings, bytes by direction, mapped sizes, outstanding mappings, bounce\n \
         buffering, IOMMU faults and Xids. Every lost event is counted.\n \
         .\n \
         Includes a Prometheus exporter as a systemd service, which is not\n \
         enabled on install.\n",
        rel.version, rel.deb_arch
    ))
}

/// `libc6 (>= 2.34), libgcc-s1 (>= 4.2)`: for each library the binary
/// needs, the package that ships it here and the newest symbol version the
/// binary asks of it (GLIBC_2.34 -> 2.34), as Debian's symbols files map them.
fn depends(binary: &Path) -> Result<String> {
    let ldd = host::output(Command::new("ldd").arg(binary))?;
    let versions = host::output(Command::new("readelf").args(["-V", "--wide"]).arg(binary))?;
    let mut need: BTreeMap<String, Option<Vec<u32>>> = BTreeMap::new();
    let mut file = String::new();
    for line in versions.lines() {
        if let Some(rest) = line.split("File: ").nth(1) {
            file = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
        } else if let Some(rest) = line.split("Name: ").nth(1) {
            let tag = rest.split_whitespace().next().unwrap_or_default();
            let v: Option<Vec<u32>> = tag
                .rsplit('_')
                .next()
                .and_then(|v| v.split('.').map(|n| n.parse().ok()).collect());
            let entry = need.entry(file.clone()).or_default();
            if v > *entry {
                *entry = v;
            }
        }
    }
    let mut pkgs: BTreeMap<String, Option<Vec<u32>>> = BTreeMap::new();
    for line in ldd.lines() {
        let Some((lib, path)) = line.trim().split_once(" => ") else {
            continue;
        };
        let path = path.split(" (").next().unwrap_or_default();
        let pkg = host::output(Command::new("dpkg-query").args(["-S", path]))
            .with_context(|| format!("which package ships {path} ({lib})"))?;
        let pkg = pkg.split(':').next().unwrap_or_default().trim().to_string();
        let v = need.get(lib).cloned().flatten();
        let entry = pkgs.entry(pkg).or_default();
        if v > *entry {
            *entry = v;
        }
    }
    if pkgs.is_empty() {
        bail!("ldd found no libraries for {}", binary.display());
    }
    Ok(pkgs
        .into_iter()
        .map(|(p, v)| match v {
            Some(mut v) => {
                while v.len() > 2 && v.last() == Some(&0) {
                    v.pop();
                }
                let v: Vec<String> = v.iter().map(u32::to_string).collect();
                format!("{p} (>= {})", v.join("."))
            }
            None => p,
        })
        .collect::<Vec<_>>()
        .join(", "))
}

/// DEP-5: the project's licence (MIT or Apache-2.0), the MIT text inline,
/// Apache-2.0 by reference to the copy every Debian system has.
fn copyright(root: &Path) -> Result<String> {
    let mit = std::fs::read_to_string(root.join("LICENSE-MIT"))?;
    let mut body = String::new();
    // The licence text after the title and copyright lines.
    for line in mit.lines().skip_while(|l| !l.starts_with("Permission")) {
        body.push_str(if line.is_empty() { " ." } else { " " });
        body.push_str(line);
        body.push('\n');
    }
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: {PACKAGE}\n\
         Source: {HOMEPAGE}\n\
         Comment: The binary also contains the Rust crates it depends on, under\n \
         their own licences: see /usr/share/doc/{PACKAGE}/{NOTICES}.gz.\n\
         \n\
         Files: *\n\
         Copyright: 2026 The gpudirect-trace developers\n\
         License: MIT or Apache-2.0\n\
         \n\
         License: MIT\n{body}\
         \n\
         License: Apache-2.0\n \
         On Debian systems, the complete text of the Apache License, Version 2.0\n \
         can be found in \"/usr/share/common-licenses/Apache-2.0\".\n"
    ))
}

fn changelog(rel: &Release) -> String {
    let commit = rel
        .commit
        .as_deref()
        .map(|c| format!(" from commit {}", &c[..c.len().min(12)]))
        .unwrap_or_default();
    format!(
        "{PACKAGE} ({}-{DEBIAN_REVISION}) unstable; urgency=medium\n\n  \
         * Release {}, built{commit}.\n\n -- {MAINTAINER}  {}\n",
        rel.version,
        rel.version,
        date(rel.epoch).1
    )
}

/// (YYYY-MM-DD, RFC 2822 date) of a Unix time, UTC.
pub fn date(epoch: u64) -> (String, String) {
    let (d, rfc2822, _) = date_time(epoch);
    (d, rfc2822)
}

/// (YYYY-MM-DD, RFC 2822, RFC 3339) of a Unix time, UTC.
pub fn date_time(epoch: u64) -> (String, String, String) {
    let days = (epoch / 86_400) as i64;
    let secs = epoch % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    let wd = DAYS[days.rem_euclid(7) as usize];
    let (hh, mm, ss) = (secs / 3600, secs / 60 % 60, secs % 60);
    (
        format!("{y:04}-{m:02}-{d:02}"),
        format!(
            "{wd}, {d:02} {} {y:04} {hh:02}:{mm:02}:{ss:02} +0000",
            MONTHS[(m - 1) as usize]
        ),
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The package's unit runs the packaged binary, in its one ExecStart
    /// and in the commented flight-recorder variant alike.
    #[test]
    fn the_packaged_unit_names_usr_bin_everywhere() {
        let u = unit(&crate::host::repo_root()).expect("unit");
        let active: Vec<_> = u.lines().filter(|l| l.starts_with("ExecStart=")).collect();
        assert_eq!(active.len(), 1, "{active:?}");
        assert!(active[0].starts_with("ExecStart=/usr/bin/gpudirect-trace "));
        assert!(!u.contains("/usr/local/bin/gpudirect-trace "), "{u}");
    }

    #[test]
    fn dates_are_utc_civil_dates() {
        assert_eq!(date(0).1, "Thu, 01 Jan 1970 00:00:00 +0000");
        // `date -u -d @1796113800 -R`
        assert_eq!(date(1_796_113_800).0, "2026-12-01");
        assert_eq!(date(1_796_113_800).1, "Tue, 01 Dec 2026 08:30:00 +0000");
        assert_eq!(date(951_782_400).0, "2000-02-29");
        assert_eq!(date_time(1_796_113_800).2, "2026-12-01T08:30:00Z");
    }
}
