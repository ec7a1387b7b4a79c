//! Builds the guest's initramfs: static busybox, the project's binaries with their
//! shared libraries, the kernel modules in load order, the scenarios, and an init
//! that runs one command and reports it with a sentinel line.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

use super::{cpio::Writer, kernel::Kernel};
use crate::host;

/// The guest's /init. `/etc/gdt-modules` lists modules to insmod, in order;
/// `/etc/gdt-env` exports the scenario environment; `/gdt/cmd.sh` is the command.
const INIT: &str = r#"#!/bin/sh
export PATH=/usr/bin:/usr/sbin:/bin:/sbin
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
for m in $(cat /etc/gdt-modules); do
    insmod "/lib/modules/$m" || echo "gdt-vm: warning: insmod $m failed"
done
. /etc/gdt-env
echo "gdt-vm: booted kernel $(uname -r) in $(cut -d' ' -f1 /proc/uptime)s"
cd /
sh /gdt/cmd.sh
rc=$?
echo "gdt-vm: exit=$rc"
if [ "$rc" -eq 0 ]; then echo "gdt-vm: success"; else echo "gdt-vm: failure"; fi
sync
poweroff -f
"#;

/// What goes into one initramfs.
pub struct Spec<'a> {
    pub kernel: &'a Kernel,
    /// Module names wanted (dependencies are added); missing optional ones are skipped.
    pub modules: Vec<String>,
    pub optional_modules: Vec<String>,
    /// Test modules built by kmod.rs: /lib/modules/extra/<file name>, not loaded.
    pub kmods: Vec<PathBuf>,
    /// Host executables installed as /usr/bin/<file name>.
    pub binaries: Vec<PathBuf>,
    /// Directory whose *.sh files (scenarios) and *.lib files (their shared
    /// helpers) go to /scenarios.
    pub scenarios: Option<PathBuf>,
    /// `KEY=value` exported before the command runs.
    pub env: Vec<(String, String)>,
    pub command: Vec<String>,
}

/// POSIX-shell single-quoting.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

struct Tree {
    w: Writer,
    dirs: BTreeSet<String>,
}

impl Tree {
    fn mkdirs(&mut self, path: &str) {
        let mut cur = String::new();
        for part in path.trim_matches('/').split('/').filter(|p| !p.is_empty()) {
            cur.push('/');
            cur.push_str(part);
            if self.dirs.insert(cur.clone()) {
                self.w.dir(&cur, 0o755);
            }
        }
    }

    fn parent(&mut self, path: &str) {
        if let Some((dir, _)) = path.rsplit_once('/') {
            self.mkdirs(dir);
        }
    }

    fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        self.parent(path);
        self.w.file(path, mode, data);
    }

    fn symlink(&mut self, path: &str, target: &str) {
        self.parent(path);
        self.w.symlink(path, target);
    }
}

/// Shared libraries (and the dynamic loader) an executable needs, from `ldd`.
fn shared_libs(exe: &Path) -> Result<Vec<String>> {
    let out = Command::new("ldd")
        .arg(exe)
        .output()
        .context("running ldd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(parse_ldd(&text))
}

pub fn parse_ldd(text: &str) -> Vec<String> {
    let mut libs = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((_, rhs)) => rhs.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            libs.push(p.to_string());
        }
    }
    libs
}

fn module_bytes(path: &Path) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        Some("xz")
    } else if name.ends_with(".zst") {
        Some("zstd")
    } else if name.ends_with(".gz") {
        Some("gzip")
    } else {
        None
    };
    match tool {
        None => fs::read(path).with_context(|| format!("reading {name}")),
        Some(t) => {
            let out = Command::new(t).arg("-dc").arg(path).output()?;
            if !out.status.success() {
                bail!("{t} -dc {name} failed");
            }
            Ok(out.stdout)
        }
    }
}

/// Writes the initramfs to `out`.
pub fn build(spec: &Spec, out: &Path) -> Result<()> {
    let mut t = Tree {
        w: Writer::new(),
        dirs: BTreeSet::new(),
    };
    for d in [
        "/dev",
        "/proc",
        "/sys",
        "/tmp",
        "/run",
        "/etc",
        "/gdt",
        "/usr/bin",
        "/usr/sbin",
        "/bin",
        "/sbin",
        "/lib/modules",
        "/scenarios",
        "/mnt",
        "/root",
    ] {
        t.mkdirs(d);
    }
    t.w.chardev("/dev/console", 0o600, 5, 1);
    t.w.chardev("/dev/null", 0o666, 1, 3);

    // busybox and its applets.
    let bb = fs::read("/bin/busybox").context("reading /bin/busybox (busybox-static)")?;
    t.file("/bin/busybox", 0o755, &bb);
    let list = host::output(Command::new("/bin/busybox").arg("--list-full"))?;
    for applet in list.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let path = format!("/{applet}");
        if path != "/bin/busybox" && t.dirs.contains(path.rsplit_once('/').map_or("", |p| p.0)) {
            t.symlink(&path, "/bin/busybox");
        }
    }

    // Project binaries and their libraries (busybox's too, should it be dynamic).
    let mut libs: BTreeSet<String> = shared_libs(Path::new("/bin/busybox"))?
        .into_iter()
        .collect();
    for bin in &spec.binaries {
        let name = bin.file_name().context("binary name")?.to_string_lossy();
        let data = fs::read(bin).with_context(|| format!("reading {}", bin.display()))?;
        t.file(&format!("/usr/bin/{name}"), 0o755, &data);
        libs.extend(shared_libs(bin)?);
    }
    for lib in libs {
        let data = fs::read(&lib).with_context(|| format!("reading {lib}"))?;
        t.file(&lib, 0o755, &data);
    }

    // Modules, dependencies first.
    let deps = spec.kernel.moddeps()?;
    let mut wanted: Vec<&str> = spec.modules.iter().map(String::as_str).collect();
    for m in &spec.optional_modules {
        if deps.contains(m) || deps.is_builtin(m) {
            wanted.push(m);
        } else {
            eprintln!(
                "xtask: kernel {} has no module {m}; skipping",
                spec.kernel.release
            );
        }
    }
    let mut order = String::new();
    for rel in deps.load_order(&wanted)? {
        let data = module_bytes(&spec.kernel.modules_dir().join(&rel))?;
        let base = rel.rsplit('/').next().unwrap_or(&rel);
        let base = base.split(".ko").next().unwrap_or(base).to_string() + ".ko";
        t.file(&format!("/lib/modules/{base}"), 0o644, &data);
        order.push_str(&base);
        order.push('\n');
    }
    t.file("/etc/gdt-modules", 0o644, order.as_bytes());
    for ko in &spec.kmods {
        let name = ko.file_name().context("module name")?.to_string_lossy();
        let data = fs::read(ko).with_context(|| format!("reading {}", ko.display()))?;
        t.file(&format!("/lib/modules/extra/{name}"), 0o644, &data);
    }

    if let Some(dir) = &spec.scenarios {
        let mut entries: Vec<PathBuf> = fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "sh" || x == "lib"))
            .collect();
        entries.sort();
        for p in entries {
            let name = p
                .file_name()
                .context("name")?
                .to_string_lossy()
                .into_owned();
            t.file(&format!("/scenarios/{name}"), 0o755, &fs::read(&p)?);
        }
    }

    let env: String = spec
        .env
        .iter()
        .map(|(k, v)| format!("export {k}={}\n", shell_quote(v)))
        .collect();
    t.file("/etc/gdt-env", 0o644, env.as_bytes());
    let cmd: Vec<String> = spec.command.iter().map(|a| shell_quote(a)).collect();
    t.file(
        "/gdt/cmd.sh",
        0o755,
        format!("{}\n", cmd.join(" ")).as_bytes(),
    );
    t.file("/init", 0o755, INIT.as_bytes());

    let mut f = fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    t.w.finish(&mut f)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_libs_and_loader() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
            \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
            \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
            \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(text),
            vec![
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
        assert!(parse_ldd("\tnot a dynamic executable\n").is_empty());
    }

    #[test]
    fn quoting_survives_the_shell() {
        assert_eq!(shell_quote("dd"), "dd");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
