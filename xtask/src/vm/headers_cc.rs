//! The compiler a guest kernel's test modules are built with (headers.rs
//! step 3 in docs/vm-harness.md): the one the kernel was configured with
//! where the host has it, else the host's gcc, with the Kconfig answers the
//! kernel's own Kconfig gives for that gcc written into the headers tree.

use std::{fs, path::Path, process::Command};

use anyhow::{Context, Result};

use crate::host;

/// A gcc as `major.minor.patch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct GccVersion(pub u32, pub u32, pub u32);

impl GccVersion {
    pub fn parse(s: &str) -> Option<Self> {
        let mut it = s.trim().split('.').map(|p| p.parse::<u32>().ok());
        Some(Self(
            it.next()??,
            it.next().flatten().unwrap_or(0),
            it.next().flatten().unwrap_or(0),
        ))
    }

    /// From `CONFIG_GCC_VERSION=140200`.
    pub fn from_config(config: &str) -> Option<Self> {
        let n: u32 = config_value(config, "CONFIG_GCC_VERSION")?.parse().ok()?;
        Some(Self(n / 10000, n / 100 % 100, n % 100))
    }

    /// gcc PR 113921 (asm goto with outputs), by the kernel's own rule
    /// (init/Kconfig GCC_ASM_GOTO_OUTPUT_BROKEN in 6.12): fixed in 14, 13.3,
    /// 12.4 and 11.5.
    fn asm_goto_output_broken(self) -> bool {
        let v = (self.0, self.1);
        v < (11, 5) || ((12, 0)..(12, 4)).contains(&v) || ((13, 0)..(13, 3)).contains(&v)
    }
}

fn config_value<'a>(config: &'a str, key: &str) -> Option<&'a str> {
    config
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim_matches('"'))
}

/// Kconfig symbols to turn off and on so the configuration matches what the
/// kernel's Kconfig answers for the host compiler `host` (configured with
/// `built`; `min_align`: the host gcc takes -fmin-function-alignment).
pub fn cc_fixes(
    config: &str,
    built: GccVersion,
    host: GccVersion,
    min_align: bool,
) -> (Vec<&'static str>, Vec<&'static str>, Vec<String>) {
    let on = |k: &str| config_value(config, k) == Some("y");
    let (mut off, mut set, mut notes) = (Vec::new(), Vec::new(), Vec::new());
    if on("CONFIG_CC_HAS_MIN_FUNCTION_ALIGNMENT") && !min_align {
        // Makefile falls back to -falign-functions; compiler_types.h then
        // drops __cold, as it would have for this gcc.
        off.extend([
            "CONFIG_CC_HAS_MIN_FUNCTION_ALIGNMENT",
            "CONFIG_CC_HAS_SANE_FUNCTION_ALIGNMENT",
        ]);
        notes.push("no -fmin-function-alignment: -falign-functions, no __cold".to_string());
    }
    if on("CONFIG_CC_HAS_ASM_GOTO_OUTPUT")
        && host.asm_goto_output_broken()
        && !built.asm_goto_output_broken()
    {
        off.extend([
            "CONFIG_CC_HAS_ASM_GOTO_OUTPUT",
            "CONFIG_CC_HAS_ASM_GOTO_TIED_OUTPUT",
        ]);
        set.push("CONFIG_GCC_ASM_GOTO_OUTPUT_BROKEN");
        notes.push("gcc PR 113921: GCC_ASM_GOTO_OUTPUT_BROKEN, no asm goto outputs".to_string());
    }
    (off, set, notes)
}

/// Rewrites autoconf.h (`#define CONFIG_X 1`) and auto.conf (`CONFIG_X=y`).
pub fn rewrite_config(
    autoconf: &str,
    autoconf_mk: &str,
    off: &[&str],
    on: &[&str],
) -> (String, String) {
    let keep_h = |l: &&str| {
        !off.iter().any(|k| {
            l.strip_prefix("#define ")
                .and_then(|r| r.strip_prefix(k))
                .is_some_and(|r| r.starts_with(' '))
        })
    };
    let keep_mk = |l: &&str| {
        !off.iter()
            .any(|k| l.strip_prefix(k).is_some_and(|r| r.starts_with('=')))
    };
    let mut h: String = autoconf
        .lines()
        .filter(keep_h)
        .map(|l| format!("{l}\n"))
        .collect();
    let mut mk: String = autoconf_mk
        .lines()
        .filter(keep_mk)
        .map(|l| format!("{l}\n"))
        .collect();
    for k in on {
        h.push_str(&format!("#define {k} 1\n"));
        mk.push_str(&format!("{k}=y\n"));
    }
    (h, mk)
}

/// The compiler to build with, adapting the tree when it is not the one the
/// kernel was configured with.
pub(super) fn pick_cc(config: &str, build_dir: &Path) -> Result<(String, Vec<String>)> {
    // CONFIG_CC_VERSION_TEXT="x86_64-linux-gnu-gcc-14 (Debian 14.2.0-19) 14.2.0"
    let wanted = config_value(config, "CONFIG_CC_VERSION_TEXT")
        .and_then(|t| t.split_whitespace().next())
        .context("no CONFIG_CC_VERSION_TEXT in .config")?
        .to_string();
    if which(&wanted) {
        return Ok((wanted, Vec::new()));
    }
    let ver = host::output(Command::new("gcc").arg("-dumpfullversion"))?;
    let host_v = GccVersion::parse(&ver).context("gcc -dumpfullversion")?;
    let built = GccVersion::from_config(config).context("no CONFIG_GCC_VERSION in .config")?;
    let min_align = Command::new("gcc")
        .args([
            "-fmin-function-alignment=8",
            "-x",
            "c",
            "-c",
            "-o",
            "/dev/null",
            "/dev/null",
        ])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let (off, on, mut notes) = cc_fixes(config, built, host_v, min_align);
    let gen = build_dir.join("include/generated/autoconf.h");
    let mk = build_dir.join("include/config/auto.conf");
    let (h, m) = rewrite_config(
        &fs::read_to_string(&gen)?,
        &fs::read_to_string(&mk)?,
        &off,
        &on,
    );
    fs::write(&gen, h)?;
    fs::write(&mk, m)?;
    notes.insert(
        0,
        format!(
            "configured with {wanted} ({}.{}.{}), which this host lacks: built with gcc {}",
            built.0,
            built.1,
            built.2,
            ver.trim()
        ),
    );
    Ok(("gcc".into(), notes))
}

fn which(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcc12_on_a_gcc14_config_gets_the_kernels_own_answers() {
        let config = "CONFIG_GCC_VERSION=140200\nCONFIG_CC_HAS_MIN_FUNCTION_ALIGNMENT=y\n\
            CONFIG_CC_HAS_SANE_FUNCTION_ALIGNMENT=y\nCONFIG_CC_HAS_ASM_GOTO_OUTPUT=y\n";
        let built = GccVersion::from_config(config).expect("version");
        assert_eq!(built, GccVersion(14, 2, 0));
        let host = GccVersion::parse("12.2.0").expect("host");
        let (off, on, notes) = cc_fixes(config, built, host, false);
        assert!(off.contains(&"CONFIG_CC_HAS_MIN_FUNCTION_ALIGNMENT"));
        assert!(off.contains(&"CONFIG_CC_HAS_ASM_GOTO_OUTPUT"));
        assert_eq!(on, ["CONFIG_GCC_ASM_GOTO_OUTPUT_BROKEN"]);
        assert_eq!(notes.len(), 2);
        // 12.4 has the fix; a gcc that takes the option needs nothing.
        let (off, on, _) = cc_fixes(config, built, GccVersion(12, 4, 0), true);
        assert!(off.is_empty() && on.is_empty());
        // A kernel configured with the broken gcc itself (6.1 and gcc 12.2)
        // already carries that gcc's answers.
        let (off, _, _) = cc_fixes(config, GccVersion(12, 2, 0), host, true);
        assert!(off.is_empty());
    }

    #[test]
    fn config_rewrite_touches_exact_symbols() {
        let h =
            "#define CONFIG_CC_HAS_ASM_GOTO_OUTPUT 1\n#define CONFIG_CC_HAS_ASM_GOTO_OUTPUT_X 1\n";
        let mk = "CONFIG_CC_HAS_ASM_GOTO_OUTPUT=y\nCONFIG_CC_HAS_ASM_GOTO_OUTPUT_X=y\n";
        let (h2, mk2) = rewrite_config(h, mk, &["CONFIG_CC_HAS_ASM_GOTO_OUTPUT"], &["CONFIG_B"]);
        assert_eq!(
            h2,
            "#define CONFIG_CC_HAS_ASM_GOTO_OUTPUT_X 1\n#define CONFIG_B 1\n"
        );
        assert_eq!(mk2, "CONFIG_CC_HAS_ASM_GOTO_OUTPUT_X=y\nCONFIG_B=y\n");
    }
}
