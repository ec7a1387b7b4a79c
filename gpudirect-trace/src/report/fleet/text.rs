//! The fleet summary as text: the fleet, its incidents by kind, each
//! host's first cause, the patterns hosts share, then every file.

use std::fmt::Write as _;

use super::{Brief, Fleet};
use crate::output::counted;

/// Incidents and rows shown per list before "... and N more".
const SHOWN: usize = 20;

fn when(b: &Brief) -> String {
    match &b.wall {
        Some(w) => w.clone(),
        None => format!("{:.3}s", b.t_s),
    }
}

fn brief(b: &Brief) -> String {
    let gpu = b
        .gpu
        .as_deref()
        .map(|g| format!(" ({g})"))
        .unwrap_or_default();
    format!("{} {}{gpu}: {}", when(b), b.device, b.text)
}

pub fn text(f: &Fleet) -> String {
    let mut s = String::new();
    let boots = f.hosts.len();
    let hosts: std::collections::BTreeSet<&str> = f.hosts.iter().map(|h| h.host.as_str()).collect();
    let _ = writeln!(
        s,
        "Fleet: {}, {} ({}), {}, {}; {} damaged or unreadable",
        counted(f.files.len() as u64, "file"),
        counted(hosts.len() as u64, "host"),
        counted(boots as u64, "boot"),
        counted(f.gpus, "GPU"),
        counted(f.devices, "device"),
        f.damaged_files
    );
    if f.files_not_read > 0 {
        let _ = writeln!(
            s,
            "  {} more files not read (at most {} in one report)",
            f.files_not_read,
            super::MAX_FILES
        );
    }
    let _ = writeln!(s, "\nIncidents by kind:");
    if f.by_kind.is_empty() {
        let _ = writeln!(s, "  none");
    }
    for k in f.by_kind.iter().take(SHOWN) {
        let _ = writeln!(s, "  {:>8}  on {:>3} hosts  {}", k.count, k.hosts, k.kind);
    }
    more(&mut s, f.by_kind.len());
    let _ = writeln!(
        s,
        "\nHosts, each with its first cause (files of one boot merged in time):"
    );
    for h in &f.hosts {
        let boot: String = h.boot_id.chars().take(8).collect();
        let _ = writeln!(
            s,
            "  {} (boot {boot}, kernel {}): {}, {}, {}",
            h.host,
            h.kernel,
            counted(h.files.len() as u64, "file"),
            counted(h.gpus.len() as u64, "GPU"),
            counted(h.incidents, "incident")
        );
        match &h.first_cause {
            Some(b) => {
                let _ = writeln!(s, "    first: {}", brief(b));
            }
            None => {
                let _ = writeln!(s, "    no incident");
            }
        }
        let then: Vec<String> = h.by_kind.iter().map(|(k, n)| format!("{n} {k}")).collect();
        if !then.is_empty() {
            let _ = writeln!(s, "    in all: {}", then.join(", "));
        }
        for t in &h.timelines {
            let _ = writeln!(s, "    timeline: {t}");
        }
    }
    let _ = writeln!(s, "\nShared by hosts:");
    if f.patterns.is_empty() {
        let _ = writeln!(s, "  no kind of incident on more than one host");
    }
    for p in f.patterns.iter().take(SHOWN) {
        let _ = writeln!(s, "  {}", p.summary);
        let _ = writeln!(s, "    hosts: {}", p.hosts.join(", "));
        let _ = writeln!(s, "    devices: {}", p.devices.join("; "));
    }
    more(&mut s, f.patterns.len());
    let _ = writeln!(s, "\nFiles:");
    for (i, r) in f.files.iter().enumerate() {
        let status = match (&r.error, r.warnings.is_empty()) {
            (Some(e), _) => format!("UNREADABLE: {e}"),
            (None, false) => format!("damaged: {}", r.warnings.join("; ")),
            (None, true) => "ok".to_owned(),
        };
        let trigger = r
            .trigger
            .as_deref()
            .map(|t| format!(" trigger {t},"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  [{}] {}  {}{trigger} {}, {} lost, {status}",
            i + 1,
            r.path,
            r.host.as_deref().unwrap_or("?"),
            counted(r.incidents, "incident"),
            r.lost_events
        );
        if r.error.is_none() {
            let _ = writeln!(s, "      {}", r.report);
        }
    }
    for e in &f.entries_skipped {
        let _ = writeln!(s, "  skipped: {e}");
    }
    s
}

fn more(s: &mut String, n: usize) {
    if n > SHOWN {
        let _ = writeln!(s, "  ... and {} more (--json has them all)", n - SHOWN);
    }
}
