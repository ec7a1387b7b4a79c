//! Test kernel modules: tests/vm/<name>/ (a Kbuild directory) built against
//! Debian's headers for the guest kernel (headers.rs), cached as
//! `.cache/vm/kmod/<name>/<release>/<hash>/<name>.ko`, where the hash covers
//! the module's sources, the headers' layout version and the compiler. The
//! initramfs carries them as /lib/modules/extra/<name>.ko for the scenario
//! to insmod (scenario header `kmods=<name>`).
//!
//! Measured on this host (Debian 12, gcc 12.2): 6.1 builds with its own
//! gcc-12; 6.12 (configured with gcc 14) builds with gcc 12 after the
//! fix-ups in headers.rs, and loads and runs in the 6.12 guest.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

use super::{headers, kernel::Kernel};
use crate::host;

/// FNV-1a, 64 bits: stable across Rust versions (std's hasher is not promised
/// to be), enough to key a cache.
pub fn fnv1a(data: &[u8], mut h: u64) -> u64 {
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// The module's source directory.
pub fn source_dir(name: &str) -> PathBuf {
    host::repo_root().join("tests/vm").join(name)
}

/// Hash of every regular file in `dir` (names and contents, sorted by name).
pub fn source_hash(dir: &Path, salt: &str) -> Result<u64> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut h = fnv1a(salt.as_bytes(), FNV_OFFSET);
    for f in files {
        h = fnv1a(f.file_name().unwrap_or_default().as_encoded_bytes(), h);
        h = fnv1a(&[0], h);
        h = fnv1a(&fs::read(&f)?, h);
        h = fnv1a(&[0], h);
    }
    Ok(h)
}

/// Builds (or finds in the cache) module `name` for kernel `k`; returns the .ko.
pub fn build(k: &Kernel, name: &str) -> Result<PathBuf> {
    let src = source_dir(name);
    if !src.join("Kbuild").exists() {
        bail!("no test module {name}: {} has no Kbuild", src.display());
    }
    let hdr = headers::fetch(k)?;
    let cc_version = host::output(Command::new(&hdr.cc).arg("-dumpfullversion"))?;
    let salt = format!("{} {} {}", k.release, hdr.cc, cc_version.trim());
    let hash = source_hash(&src, &salt)?;
    let cache = host::vm_cache()?.join("kmod").join(name).join(&k.release);
    fs::create_dir_all(&cache)?;
    let out = cache
        .join(format!("{hash:016x}"))
        .join(format!("{name}.ko"));
    if out.exists() {
        return Ok(out);
    }
    let _lock = host::Lock::take(&cache.join(".lock"))?;
    if out.exists() {
        return Ok(out);
    }
    for n in &hdr.notes {
        eprintln!("xtask: kmod: {}: {n}", k.release);
    }
    let work = cache.join(format!("build-{hash:016x}"));
    if work.exists() {
        fs::remove_dir_all(&work)?;
    }
    fs::create_dir_all(&work)?;
    for e in fs::read_dir(&src)? {
        let p = e?.path();
        if p.is_file() {
            fs::copy(&p, work.join(p.file_name().context("name")?))?;
        }
    }
    eprintln!(
        "xtask: kmod: building {name} for {} with {}",
        k.release, hdr.cc
    );
    let log = work.join("build.log");
    let status = Command::new("make")
        .arg("-C")
        .arg(&hdr.build_dir)
        .arg(format!("M={}", work.display()))
        .arg(format!("CC={}", hdr.cc))
        // Module BTF needs pahole and the kernel's vmlinux (6.12 ships it, 6.1
        // does not); nothing here loads BPF programs by this module's BTF.
        .arg("CONFIG_DEBUG_INFO_BTF_MODULES=")
        .arg("modules")
        .stdout(fs::File::create(&log)?)
        .stderr(fs::File::create(work.join("build.err"))?)
        .status()
        .context("running make")?;
    let err = fs::read_to_string(work.join("build.err")).unwrap_or_default();
    if !status.success() {
        bail!(
            "building {name} for {} failed ({status}); {}:\n{err}",
            k.release,
            log.display()
        );
    }
    if !err.trim().is_empty() {
        eprintln!("xtask: kmod: {name} build warnings:\n{err}");
    }
    let ko = work.join(format!("{name}.ko"));
    let data = fs::read(&ko).with_context(|| format!("make produced no {}", ko.display()))?;
    let want = format!("vermagic={} ", k.release);
    if !data.windows(want.len()).any(|w| w == want.as_bytes()) {
        bail!("{} does not carry {want:?}", ko.display());
    }
    let dir = out.parent().context("out dir")?;
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{name}.ko.tmp"));
    fs::write(&tmp, &data)?;
    fs::rename(&tmp, &out)?;
    fs::remove_dir_all(&work)?;
    eprintln!("xtask: kmod: {}", out.display());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_vectors() {
        assert_eq!(fnv1a(b"", FNV_OFFSET), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a", FNV_OFFSET), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar", FNV_OFFSET), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn source_hash_follows_contents_and_salt() {
        let dir = std::env::temp_dir().join(format!("gdt-kmod-hash-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("dir");
        fs::write(dir.join("a.c"), "int x;\n").expect("write");
        let h1 = source_hash(&dir, "6.1.0-50-amd64").expect("hash");
        assert_eq!(h1, source_hash(&dir, "6.1.0-50-amd64").expect("hash"));
        assert_ne!(h1, source_hash(&dir, "6.12.117+deb13-amd64").expect("hash"));
        fs::write(dir.join("a.c"), "int y;\n").expect("write");
        assert_ne!(h1, source_hash(&dir, "6.1.0-50-amd64").expect("hash"));
        fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn gdt_misuse_is_a_kbuild_directory() {
        let d = source_dir("gdt-misuse");
        for f in ["Kbuild", "Makefile", "main.c", "gdt-misuse.h"] {
            assert!(d.join(f).is_file(), "{f} missing in {}", d.display());
        }
        let main = fs::read_to_string(d.join("main.c")).expect("main.c");
        assert!(main.contains("MODULE_LICENSE(\"GPL\")"));
        assert!(main.contains("PCI_DEVICE(0x1234, 0x11e8)"));
    }
}
