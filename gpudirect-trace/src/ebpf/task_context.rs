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
//! (the 6.18 CI host, for one): the flag is then never set, and the probe
//! list says so.

use std::collections::HashMap;

use super::{ProbeStatus, Status};
use crate::btf::Btf;

/// The data symbols this module reads from kallsyms.
pub const SYMBOLS: [&str; 3] = ["__per_cpu_offset", "__preempt_count", "pcpu_hot"];

/// The name under which the probe list shows the result.
pub const NAME: &str = "interrupt context";

/// The two addresses for `Config`, and where the preempt count came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub per_cpu_offset: u64,
    pub preempt_count: u64,
    pub how: String,
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
            how: "per-CPU __preempt_count".to_owned(),
        });
    }
    match (sym("pcpu_hot"), pcpu_hot_preempt_count) {
        (Some(a), Some(off)) => Ok(Found {
            per_cpu_offset,
            preempt_count: a + u64::from(off),
            how: format!("per-CPU pcpu_hot.preempt_count (offset {off} per BTF)"),
        }),
        (Some(_), None) => {
            Err("pcpu_hot exists but BTF gives no offset of its preempt_count".into())
        }
        (None, _) => Err("/proc/kallsyms lists neither __preempt_count nor pcpu_hot".into()),
    }
}

/// `find` on this machine.
pub fn discover(syms: &HashMap<&'static str, u64>, btf: Option<&Btf>) -> Result<Found, String> {
    let off = btf.and_then(|b| b.member_offset("pcpu_hot", "preempt_count"));
    find(syms, off, std::env::consts::ARCH)
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

    #[test]
    fn the_probe_row_says_what_was_found() {
        let f = Ok(Found {
            per_cpu_offset: 1,
            preempt_count: 2,
            how: "per-CPU __preempt_count".into(),
        });
        assert_eq!(status(&f, true).status, Status::Attached);
        assert_eq!(status(&f, false).status, Status::Loaded);
        let e = status(&Err("why".into()), true);
        assert_eq!((e.status, e.reason.as_str()), (Status::Unavailable, "why"));
    }
}
