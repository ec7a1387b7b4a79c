//! The probe table on this kernel, as text.

use std::path::Path;

use serde::Serialize;

use crate::{
    ebpf::{DmaOpSource, ProbeStatus, Status},
    families::tracepoints,
    sanitize::text as clean,
};

/// One line: which programs report each DMA-API operation.
pub fn dma_plan_text(plan: &[DmaOpSource]) -> String {
    let ops: Vec<String> = plan
        .iter()
        .map(|o| format!("{} {}", o.op, o.source))
        .collect();
    format!(
        "DMA-API records (per-device level \"dma\"): {} (tracepoint: dma:*; hook: the time:dma_* \
         hooks on the DMA-API functions; none: not reported on this kernel)",
        ops.join(", ")
    )
}

/// A tracepoint of this kernel, in a group the catalog uses, that no
/// program of ours attaches to (new in this kernel, or not of interest).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct NotUsed {
    pub name: String,
    pub reason: &'static str,
}

const NOT_USED: &str = "this kernel has it; the catalog has no program for it";

/// The tracepoints under `tracefs`/events in the catalog's groups (dma,
/// iommu, swiotlb, ...) that the catalog does not name, sorted.
pub fn not_used(tracefs: Option<&Path>) -> Vec<NotUsed> {
    let Some(t) = tracefs else { return Vec::new() };
    let mut groups: Vec<&str> = tracepoints().iter().map(|p| p.group()).collect();
    groups.sort_unstable();
    groups.dedup();
    groups.retain(|g| !crate::families::tasks::BORROWED_GROUPS.contains(g));
    let mut out = Vec::new();
    for g in groups {
        let Ok(rd) = std::fs::read_dir(t.join("events").join(g)) else {
            continue;
        };
        for e in rd.filter_map(Result::ok) {
            if !e.path().is_dir() {
                continue;
            }
            let name = format!("{g}:{}", e.file_name().to_string_lossy());
            if !tracepoints().iter().any(|p| p.name == name) {
                out.push(NotUsed {
                    name,
                    reason: NOT_USED,
                });
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Clauses of a reason (`; `-separated outside parentheses) at least this
/// long, shared by two rows or more, are said once as a numbered note.
const NOTE_MIN: usize = 48;

/// Splits a reason at `; ` outside parentheses.
fn clauses(reason: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    let bytes = reason.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'(' => depth += 1,
            b')' => depth -= 1,
            b';' if depth <= 0 && bytes.get(i + 1) == Some(&b' ') => {
                out.push(&reason[start..i]);
                start = i + 2;
            }
            _ => {}
        }
    }
    out.push(&reason[start..]);
    out
}

/// A clause's label (`fentry: ...` -> `fentry`) and the rest.
fn labelled(clause: &str) -> (Option<&str>, &str) {
    match clause.split_once(": ") {
        Some((l, rest)) if !l.is_empty() && l.len() <= 12 && !l.contains(' ') => (Some(l), rest),
        _ => (None, clause),
    }
}

/// The reasons with every long clause shared by several rows replaced by
/// `[n]`, and the notes, in order of first use.
fn factor(reasons: &[String]) -> (Vec<String>, Vec<String>) {
    let mut uses: std::collections::HashMap<&str, usize> = Default::default();
    for r in reasons {
        for c in clauses(r) {
            let (_, body) = labelled(c);
            if body.len() >= NOTE_MIN {
                *uses.entry(body).or_default() += 1;
            }
        }
    }
    let mut notes: Vec<String> = Vec::new();
    let rows = reasons
        .iter()
        .map(|r| {
            let parts: Vec<String> = clauses(r)
                .into_iter()
                .map(|c| {
                    let (label, body) = labelled(c);
                    if uses.get(body).copied().unwrap_or(0) < 2 {
                        return c.to_owned();
                    }
                    let n = match notes.iter().position(|x| x == body) {
                        Some(i) => i + 1,
                        None => {
                            notes.push(body.to_owned());
                            notes.len()
                        }
                    };
                    match label {
                        Some(l) => format!("{l}: [{n}]"),
                        None => format!("[{n}]"),
                    }
                })
                .collect();
            parts.join("; ")
        })
        .collect();
    (rows, notes)
}

/// The probe table as `probes` prints it: a reason shared by several rows
/// is said once, as a numbered note under the table (`--json` keeps each
/// row's whole reason).
pub fn render(probes: &[ProbeStatus], not_used: &[NotUsed], release: &str, btf: bool) -> String {
    let width = probes
        .iter()
        .map(|p| p.name.len())
        .chain(not_used.iter().map(|n| n.name.len()))
        .max()
        .unwrap_or(10);
    let mut out = format!(
        "kernel {}, BTF {}\n{:<width$}  {:<14}  {:<11}  REASON\n",
        clean(release),
        if btf { "yes" } else { "no" },
        "PROBE",
        "KIND",
        "STATUS",
    );
    // Kernel and loader messages: one line, no control characters.
    let reasons: Vec<String> = probes
        .iter()
        .map(|p| clean(&p.reason).into_owned())
        .collect();
    let (rows, notes) = factor(&reasons);
    for (p, reason) in probes.iter().zip(rows) {
        out.push_str(&format!(
            "{:<width$}  {:<14}  {:<11}  {reason}\n",
            p.name,
            p.kind,
            p.status.as_str(),
        ));
    }
    for n in not_used {
        out.push_str(&format!(
            "{:<width$}  {:<14}  {:<11}  {}\n",
            clean(&n.name),
            "raw_tracepoint",
            "not used",
            n.reason
        ));
    }
    for (i, n) in notes.iter().enumerate() {
        out.push_str(&format!("[{}] {n}\n", i + 1));
    }
    let count = |s: Status| probes.iter().filter(|p| p.status == s).count();
    out.push_str(&format!(
        "{} attached, {} unavailable, {} failed",
        count(Status::Attached),
        count(Status::Unavailable),
        count(Status::Failed),
    ));
    if !not_used.is_empty() {
        out.push_str(&format!(", {} not used", not_used.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &'static str, status: Status, reason: &str) -> ProbeStatus {
        ProbeStatus {
            name,
            kind: "fentry|kprobe",
            program: "",
            status,
            reason: reason.to_owned(),
            hot: true,
        }
    }

    #[test]
    fn a_long_reason_shared_by_rows_is_one_numbered_note() {
        let eperm = "the kernel refused to load it (Operation not permitted (os error 1)): as \
                     root this is a security policy (kernel lockdown or an LSM; such as the BPF \
                     LSM) forbidding tracing programs";
        let probes: Vec<ProbeStatus> = ["time:a", "time:b", "time:c"]
            .into_iter()
            .map(|n| {
                row(
                    n,
                    Status::Unavailable,
                    &format!("fentry: {eperm}; kprobe: no kprobes (CONFIG_KPROBES)"),
                )
            })
            .chain([row("time:d", Status::Attached, "on dma_map_phys")])
            .collect();
        let text = render(&probes, &[], "6.18", true);
        assert_eq!(text.matches(eperm).count(), 1, "{text}");
        assert_eq!(
            text.matches("fentry: [1]; kprobe: no kprobes (CONFIG_KPROBES)")
                .count(),
            3,
            "{text}"
        );
        assert!(text.contains(&format!("[1] {eperm}\n")), "{text}");
        assert!(text.contains("on dma_map_phys"), "{text}");
        // No line is longer than the note itself plus its number.
        let longest = text.lines().map(str::len).max().unwrap_or(0);
        assert!(longest <= eperm.len() + 4, "{longest}: {text}");
    }

    #[test]
    fn a_reason_of_one_row_stays_whole() {
        let long = "x".repeat(200);
        let probes = [row("time:a", Status::Failed, &long)];
        let text = render(&probes, &[], "6.18", true);
        assert!(text.contains(&long) && !text.contains("[1]"), "{text}");
    }

    #[test]
    fn tracepoints_the_catalog_lacks_are_listed_as_not_used() {
        let dir = std::env::temp_dir().join(format!("gdt-notused-{}", std::process::id()));
        for ev in ["dma_map_phys", "dma_new_in_7_9"] {
            std::fs::create_dir_all(dir.join("events/dma").join(ev)).expect("mkdir");
        }
        std::fs::create_dir_all(dir.join("events/sched/sched_switch")).expect("mkdir");
        let list = not_used(Some(&dir));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            list,
            vec![NotUsed {
                name: "dma:dma_new_in_7_9".into(),
                reason: NOT_USED
            }]
        );
        let text = render(&[], &list, "7.9", true);
        assert!(
            text.contains("dma:dma_new_in_7_9") && text.contains("not used"),
            "{text}"
        );
        assert!(text.ends_with(", 1 not used"), "{text}");
    }
}
