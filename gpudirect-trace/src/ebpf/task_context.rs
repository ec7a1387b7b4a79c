//! Telling records made in interrupt context from those made by a task.
//!
//! A DMA unmap from a completion interrupt runs on whichever task the
//! interrupt landed on: its pid names a bystander. The programs read the
//! kernel's preempt count to flag such records (`flags::IN_INTERRUPT`); for
//! that they need two addresses, found here in /proc/kallsyms:
//! `__per_cpu_offset` and the per-CPU preempt count, which is
//! `__preempt_count` on x86_64 up to 6.1 and again from 6.15, and the
//! `preempt_count` member of `pcpu_hot` from 6.2 to 6.14 (its offset from
//! BTF). Kernels built without CONFIG_KALLSYMS_ALL list no data symbols
//! (the 6.18 CI host, for one).
//!
//! First choice, a typed ksym: where the kernel's BTF lists the count's
//! variable in its per-CPU section (Debian's 6.1 and later; its 5.10 BTF
//! has no variables), the programs read it through `bpf_this_cpu_ptr()` and
//! a plain load instead of a `bpf_probe_read_kernel()`, ~24 ns a record in
//! the parts table (benchmarks.md). The kernel finds the variable by name in kallsyms at
//! load (`ldimm64 failed to find the address for kernel symbol` where it
//! is not listed: the 6.18 CI host), so the name must be listed there, but
//! its address need not be readable: this works under kptr_restrict too.
//! aya 0.13 relocates no ksyms, so the loader does the one it needs: the
//! programs load a marker constant (`PREEMPT_COUNT_KSYM`), and
//! `make_ksym` turns each such `ld_imm64` into BPF_PSEUDO_BTF_ID of the
//! variable, as libbpf does for a `__ksym` extern. Where neither is
//! found, the flag is never set, and the probe list says so.

use std::collections::HashMap;

use super::{ProbeStatus, Status};
use crate::btf::Btf;

/// The data symbols this module reads from kallsyms.
pub const SYMBOLS: [&str; 3] = ["__per_cpu_offset", "__preempt_count", "pcpu_hot"];

/// The name under which the probe list shows the result.
pub const NAME: &str = "interrupt context";

/// How the programs read the count (`Config`), and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// The kallsyms addresses (0 where the typed ksym is used).
    pub per_cpu_offset: u64,
    pub preempt_count: u64,
    /// The typed ksym, where BTF has the variable.
    pub ksym: Option<Ksym>,
    pub how: String,
}

/// The preempt count as a typed per-CPU ksym.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ksym {
    /// The BTF id of the per-CPU variable (in vmlinux).
    pub btf_id: u32,
    /// The count's byte offset in the variable.
    pub member: u32,
}

/// The typed ksym of the count from BTF: `int __preempt_count` (up to 6.1,
/// and since 6.15), or `struct pcpu_hot`'s `preempt_count` (6.2 to 6.14);
/// only a variable that kallsyms lists (`syms`, whatever its address reads).
pub fn find_ksym(btf: &Btf, syms: &HashMap<&'static str, u64>) -> Option<(Ksym, String)> {
    let var = |name: &str| btf.percpu_var(name).filter(|_| syms.contains_key(name));
    if let Some(v) = var("__preempt_count") {
        if v.kind == crate::btf::KIND_INT && v.size == 4 {
            let how = format!("typed per-CPU __preempt_count, BTF id {}", v.id);
            return Some((
                Ksym {
                    btf_id: v.id,
                    member: 0,
                },
                how,
            ));
        }
    }
    let v = var("pcpu_hot")?;
    let member = btf.member_offset("pcpu_hot", "preempt_count")?;
    (v.kind == crate::btf::KIND_STRUCT && member + 4 <= v.size).then(|| {
        let how = format!(
            "typed per-CPU pcpu_hot.preempt_count, BTF id {}, offset {member}",
            v.id
        );
        (
            Ksym {
                btf_id: v.id,
                member,
            },
            how,
        )
    })
}

/// Decides from the symbols found (`name -> address`, absent or 0 when
/// kallsyms hides it), the offset of `pcpu_hot.preempt_count` (BTF) and the
/// architecture.
pub fn find(
    syms: &HashMap<&'static str, u64>,
    pcpu_hot_preempt_count: Option<u32>,
    arch: &str,
) -> Result<Found, String> {
    if arch != "x86_64" {
        return Err(format!(
            "not read on {arch}: only x86_64's per-CPU preempt count is known to the programs"
        ));
    }
    let sym = |n: &str| syms.get(n).copied().filter(|&a| a != 0);
    let Some(per_cpu_offset) = sym("__per_cpu_offset") else {
        return Err(
            "/proc/kallsyms lists no __per_cpu_offset (data symbols need CONFIG_KALLSYMS_ALL; \
             addresses read as 0 under kptr_restrict): records made in interrupts are shown \
             under the interrupted task"
                .to_owned(),
        );
    };
    if let Some(a) = sym("__preempt_count") {
        return Ok(Found {
            per_cpu_offset,
            preempt_count: a,
            ksym: None,
            how: "per-CPU __preempt_count".to_owned(),
        });
    }
    match (sym("pcpu_hot"), pcpu_hot_preempt_count) {
        (Some(a), Some(off)) => Ok(Found {
            per_cpu_offset,
            preempt_count: a + u64::from(off),
            ksym: None,
            how: format!("per-CPU pcpu_hot.preempt_count (offset {off} per BTF)"),
        }),
        (Some(_), None) => {
            Err("pcpu_hot exists but BTF gives no offset of its preempt_count".into())
        }
        (None, _) => Err("/proc/kallsyms lists neither __preempt_count nor pcpu_hot".into()),
    }
}

/// Whether the programs may read the count as a typed ksym.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum KsymUse {
    /// Where `find_ksym` finds it on this machine.
    #[default]
    WhereFound,
    /// Never: the kernel refused it in this session's first load (why).
    Refused(String),
    /// This one, whatever BTF says: for tests of a kernel that refuses it
    /// (a BTF id that is no per-CPU variable).
    Forced(Ksym),
}

/// On this machine: the typed ksym where BTF has it (x86_64) and `ksym`
/// allows it, else `find`.
pub fn discover(
    syms: &HashMap<&'static str, u64>,
    btf: Option<&Btf>,
    ksym: &KsymUse,
) -> Result<Found, String> {
    let arch = std::env::consts::ARCH;
    let typed = match ksym {
        KsymUse::Forced(k) => Some((
            *k,
            format!("typed per-CPU ksym, BTF id {} (forced)", k.btf_id),
        )),
        KsymUse::WhereFound if arch == "x86_64" => btf.and_then(|b| find_ksym(b, syms)),
        _ => None,
    };
    if let Some((ksym, how)) = typed {
        return Ok(Found {
            per_cpu_offset: 0,
            preempt_count: 0,
            ksym: Some(ksym),
            how,
        });
    }
    let off = btf.and_then(|b| b.member_offset("pcpu_hot", "preempt_count"));
    let found = find(syms, off, arch);
    match ksym {
        KsymUse::Refused(why) => match found {
            Ok(f) => Ok(Found {
                how: format!("{}; {why}", f.how),
                ..f
            }),
            Err(e) => Err(format!("{why}; {e}")),
        },
        _ => found,
    }
}

/// Loads the programs reading the count as `opts` says; where they read it
/// as a typed ksym and a probe then failed (a kernel whose verifier refuses
/// the ksym in a way the two checks of `find_ksym` did not foresee), loads
/// the whole object again without it: the count read from kallsyms where
/// listed, or no flag, rather than no DMA-API probes. A warning says so,
/// and the probe row tells why.
pub(super) fn load(
    opts: &super::TracerOptions,
    debug_log: bool,
    load_with: impl Fn(&super::TracerOptions, bool, &KsymUse) -> anyhow::Result<super::Tracer>,
) -> anyhow::Result<super::Tracer> {
    let tracer = load_with(opts, debug_log, &opts.preempt_count_ksym)?;
    if !tracer.typed_ksym {
        return Ok(tracer);
    }
    let (tracer, _) = super::feature_fallback::without_where_refused(
        tracer,
        "the preempt count is not read as a typed per-CPU ksym",
        "it",
        |refused| {
            let first: String = refused[0].chars().take(200).collect();
            let why = format!(
                "the kernel refused the typed ksym ({} probe(s) failed with it; {first})",
                refused.len()
            );
            load_with(opts, debug_log, &KsymUse::Refused(why))
        },
    )?;
    Ok(tracer)
}

/// `ld_imm64` (BPF_LD | BPF_IMM | BPF_DW), and its source register for a
/// BTF id (BPF_PSEUDO_BTF_ID).
const LD_IMM64: u8 = 0x18;
const PSEUDO_BTF_ID: u8 = 3;

/// Makes every `ld_imm64` of `PREEMPT_COUNT_KSYM` in the object's
/// instruction sections load the per-CPU variable `btf_id` of vmlinux (its
/// second half's imm: the BTF's fd, 0 for vmlinux); how many it made.
pub fn make_ksym(bytes: &mut [u8], btf_id: u32) -> anyhow::Result<usize> {
    let marker = gpudirect_trace_common::PREEMPT_COUNT_KSYM;
    let (lo, hi) = (
        (marker as u32).to_le_bytes(),
        ((marker >> 32) as u32).to_le_bytes(),
    );
    let mut made = 0;
    super::object_code::each_section(bytes, |code| {
        let mut i = 0;
        while i + 16 <= code.len() {
            let (first, second) = code[i..i + 16].split_at_mut(8);
            if first[0] == LD_IMM64 && first[1] >> 4 == 0 && first[4..8] == lo && second[4..8] == hi
            {
                first[1] = (first[1] & 0x0f) | (PSEUDO_BTF_ID << 4);
                first[4..8].copy_from_slice(&btf_id.to_le_bytes());
                second[4..8].copy_from_slice(&0u32.to_le_bytes());
                made += 1;
            }
            // An ld_imm64 takes two slots; any other instruction one.
            i += if first[0] == LD_IMM64 { 16 } else { 8 };
        }
    })?;
    Ok(made)
}

/// The probe list's row for the result.
pub fn status(found: &Result<Found, String>, attach: bool) -> ProbeStatus {
    let (status, reason) = match found {
        Ok(f) if attach => (
            Status::Attached,
            format!("records made in interrupts are flagged ({})", f.how),
        ),
        Ok(f) => (
            Status::Loaded,
            format!("verified; not attached ({})", f.how),
        ),
        Err(e) => (Status::Unavailable, e.clone()),
    };
    ProbeStatus {
        name: NAME,
        kind: "per-CPU read",
        program: "",
        status,
        reason,
        hot: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syms(list: &[(&'static str, u64)]) -> HashMap<&'static str, u64> {
        list.iter().copied().collect()
    }

    /// 5.10 and 6.1 (Debian, zero-based per-CPU symbols), 6.12 (pcpu_hot),
    /// a kernel without KALLSYMS_ALL (the 6.18 CI host), kptr_restrict.
    #[test]
    fn each_kernel_era_gives_its_preempt_count_or_says_why_not() {
        let old = syms(&[
            ("__per_cpu_offset", 0xffff_ffff_8260_4a80),
            ("__preempt_count", 0x1f8c8),
        ]);
        let f = find(&old, None, "x86_64").expect("5.10/6.1");
        assert_eq!(
            (f.per_cpu_offset, f.preempt_count),
            (0xffff_ffff_8260_4a80, 0x1f8c8)
        );
        let hot = syms(&[
            ("__per_cpu_offset", 0xffff_ffff_8280_0000),
            ("pcpu_hot", 0x32000),
        ]);
        let f = find(&hot, Some(8), "x86_64").expect("6.12");
        assert_eq!(f.preempt_count, 0x32008);
        assert!(f.how.contains("pcpu_hot"), "{}", f.how);
        assert!(find(&hot, None, "x86_64").is_err());
        let none = find(&syms(&[]), None, "x86_64").expect_err("no data symbols");
        assert!(none.contains("CONFIG_KALLSYMS_ALL"), "{none}");
        let hidden = syms(&[("__per_cpu_offset", 0), ("__preempt_count", 0)]);
        assert!(find(&hidden, None, "x86_64").is_err());
        assert!(find(&old, None, "aarch64")
            .expect_err("arm64")
            .contains("aarch64"));
    }

    /// The typed ksym needs the variable in BTF's per-CPU section and its
    /// name in kallsyms (the kernel looks it up there at load), not its
    /// address; a listed name then wins over the kallsyms addresses.
    #[test]
    fn the_typed_ksym_wants_btf_and_the_name_listed() {
        let btf = crate::btf::tests::sample_btf();
        let hidden = syms(&[("__per_cpu_offset", 0), ("__preempt_count", 0)]);
        let (k, how) = find_ksym(&btf, &hidden).expect("listed, address hidden");
        assert_eq!((k.btf_id, k.member), (8, 0));
        assert!(how.contains("typed per-CPU __preempt_count"), "{how}");
        assert_eq!(find_ksym(&btf, &syms(&[("__per_cpu_offset", 1)])), None);
        let empty = crate::btf::Btf::default();
        assert_eq!(find_ksym(&empty, &hidden), None);
    }

    /// After a refusal the typed ksym is never chosen, even where BTF and
    /// kallsyms have it: the kallsyms read (or why none) says why.
    #[test]
    fn a_refused_ksym_falls_to_kallsyms_and_says_why() {
        if std::env::consts::ARCH != "x86_64" {
            return;
        }
        let btf = crate::btf::tests::sample_btf();
        let listed = syms(&[
            ("__per_cpu_offset", 0xffff_ffff_8260_4a80),
            ("__preempt_count", 0x1f8c8),
        ]);
        let typed = discover(&listed, Some(&btf), &KsymUse::WhereFound).expect("typed");
        assert!(typed.ksym.is_some(), "{}", typed.how);
        let why = KsymUse::Refused("the kernel refused the typed ksym (3 ...)".into());
        let f = discover(&listed, Some(&btf), &why).expect("kallsyms");
        assert_eq!((f.ksym, f.preempt_count), (None, 0x1f8c8));
        assert!(
            f.how.ends_with("the kernel refused the typed ksym (3 ...)"),
            "{}",
            f.how
        );
        let e = discover(&syms(&[]), Some(&btf), &why).expect_err("no data symbols");
        assert!(
            e.starts_with("the kernel refused") && e.contains("KALLSYMS_ALL"),
            "{e}"
        );
        let forced = Ksym {
            btf_id: 1,
            member: 0,
        };
        let f = discover(&syms(&[]), None, &KsymUse::Forced(forced)).expect("forced");
        assert_eq!(f.ksym, Some(forced));
    }

    /// Every program that streams loads the marker (the compiler keeps it
    /// an `ld_imm64` straight into the helper's argument); each becomes a
    /// BTF-id load of the variable, none is left, and aya still parses the
    /// object.
    #[test]
    fn the_marker_becomes_a_typed_ksym_in_every_program() {
        let object = super::super::EBPF_OBJECT;
        let mut words = vec![0u64; object.len().div_ceil(8)];
        // SAFETY: u64s are plain bytes (an aligned copy for the ELF reader).
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), object.len())
        };
        bytes.copy_from_slice(object);
        let made = make_ksym(bytes, 8418).expect("patches");
        assert!(made >= 10, "only {made} loads of the marker");
        assert_eq!(make_ksym(bytes, 8418).expect("patches"), 0);
        let marked = bytes
            .windows(8)
            .filter(|w| {
                w[0] == LD_IMM64 && w[1] >> 4 == PSEUDO_BTF_ID && w[4..8] == 8418u32.to_le_bytes()
            })
            .count();
        assert_eq!(marked, made);
        aya_obj::Object::parse(bytes).expect("aya parses the patched object");
    }

    #[test]
    fn the_probe_row_says_what_was_found() {
        let f = Ok(Found {
            per_cpu_offset: 1,
            preempt_count: 2,
            ksym: None,
            how: "per-CPU __preempt_count".into(),
        });
        assert_eq!(status(&f, true).status, Status::Attached);
        assert_eq!(status(&f, false).status, Status::Loaded);
        let e = status(&Err("why".into()), true);
        assert_eq!((e.status, e.reason.as_str()), (Status::Unavailable, "why"));
    }
}
