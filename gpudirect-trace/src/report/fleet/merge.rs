//! The fleet's rows merged: a host and boot's files into one row (each
//! incident once), the kinds over all hosts, and the kinds hosts share.

use std::collections::{BTreeMap, BTreeSet};

use super::{Brief, FileRow, GpuRow, HostRow, Kind, KindRow, Pattern, MAX_TIMELINES};

pub(super) fn hosts(
    files: &[FileRow],
    gpus: &BTreeMap<(String, String), BTreeMap<String, String>>,
    devices: &BTreeMap<(String, String), BTreeSet<String>>,
) -> Vec<HostRow> {
    let mut by: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        if let (Some(h), Some(b)) = (&f.host, &f.boot_id) {
            by.entry((h.clone(), b.clone())).or_default().push(i);
        }
    }
    let mut rows: Vec<HostRow> = by
        .into_iter()
        .map(|(key, mut idx)| {
            idx.sort_by(|&a, &b| files[a].start_unix_s.total_cmp(&files[b].start_unix_s));
            let mut counts: BTreeMap<Kind, u64> = BTreeMap::new();
            let mut seen = std::collections::HashSet::new();
            let mut timelines = Vec::new();
            for &i in &idx {
                for (h, k) in &files[i].keys {
                    if seen.insert(*h) {
                        *counts.entry(k.clone()).or_default() += 1;
                    }
                }
                for (k, n) in &files[i].unkeyed {
                    *counts.entry(k.clone()).or_default() += n;
                }
                for t in &files[i].timelines {
                    if !timelines.contains(t) && timelines.len() < MAX_TIMELINES {
                        timelines.push(t.clone());
                    }
                }
            }
            // Same boot: CLOCK_MONOTONIC stamps of its files compare.
            let first_cause = idx
                .iter()
                .filter_map(|&i| files[i].first.as_ref())
                .min_by_key(|b| b.mono_ns)
                .cloned();
            let g = gpus.get(&key).cloned().unwrap_or_default();
            HostRow {
                kernel: files[idx[0]].kernel.clone().unwrap_or_default(),
                incidents: counts.values().sum(),
                devices: devices.get(&key).map_or(0, |d| d.len() as u64),
                gpus: g
                    .into_iter()
                    .map(|(bus_id, label)| GpuRow { label, bus_id })
                    .collect(),
                by_kind: counts.into_iter().collect(),
                host: key.0,
                boot_id: key.1,
                files: idx,
                first_cause,
                timelines,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        let start = |h: &HostRow| files[h.files[0]].start_unix_s;
        start(a).total_cmp(&start(b)).then(a.host.cmp(&b.host))
    });
    rows
}

pub(super) fn by_kind(hosts: &[HostRow]) -> Vec<KindRow> {
    let mut m: BTreeMap<Kind, (u64, BTreeSet<&str>)> = BTreeMap::new();
    for h in hosts {
        for (k, n) in &h.by_kind {
            let e = m.entry(k.clone()).or_default();
            e.0 += n;
            e.1.insert(h.host.as_str());
        }
    }
    let mut rows: Vec<KindRow> = m
        .into_iter()
        .map(|(kind, (count, hosts))| KindRow {
            kind,
            count,
            hosts: hosts.len() as u64,
        })
        .collect();
    rows.sort_by(|a, b| b.count.cmp(&a.count).then(a.kind.cmp(&b.kind)));
    rows
}

/// Kinds seen on two hosts or more, with what the hit devices share.
pub(super) fn patterns(
    files: &[FileRow],
    hosts_rows: &[HostRow],
    occurrences: &BTreeMap<Kind, Vec<Brief>>,
) -> Vec<Pattern> {
    let mut out = Vec::new();
    for (kind, briefs) in occurrences {
        let host_of = |b: &Brief| files[b.file].host.clone().unwrap_or_default();
        let hosts: BTreeSet<String> = briefs.iter().map(host_of).collect();
        if hosts.len() < 2 {
            continue;
        }
        let devices: BTreeSet<String> = briefs
            .iter()
            .map(|b| match &b.gpu {
                Some(g) => format!("{} {} ({g})", host_of(b), b.device),
                None => format!("{} {}", host_of(b), b.device),
            })
            .collect();
        let models: BTreeSet<String> = briefs.iter().filter_map(|b| b.model.clone()).collect();
        let drivers: BTreeSet<String> = briefs.iter().filter_map(|b| b.driver.clone()).collect();
        let kernels: BTreeSet<String> = briefs
            .iter()
            .filter_map(|b| files[b.file].kernel.clone())
            .collect();
        let count = hosts_rows
            .iter()
            .flat_map(|h| h.by_kind.iter())
            .filter(|(k, _)| k == kind)
            .map(|(_, n)| n)
            .sum();
        let same = |what: &str, set: &BTreeSet<String>| match set.len() {
            0 => None,
            1 => Some(format!(
                "all {what} {}",
                set.iter().next().map_or("", |s| s)
            )),
            n => Some(format!("{n} {what}s")),
        };
        let mut summary = format!(
            "{kind}: {count} on {} hosts, {} devices",
            hosts.len(),
            devices.len()
        );
        for s in [
            same("model", &models),
            same("driver", &drivers),
            same("kernel", &kernels),
        ]
        .into_iter()
        .flatten()
        {
            summary.push_str("; ");
            summary.push_str(&s);
        }
        out.push(Pattern {
            kind: kind.clone(),
            hosts: hosts.into_iter().collect(),
            devices: devices.into_iter().collect(),
            models: models.into_iter().collect(),
            drivers: drivers.into_iter().collect(),
            kernels: kernels.into_iter().collect(),
            count,
            summary,
        });
    }
    out.sort_by(|a, b| {
        b.hosts
            .len()
            .cmp(&a.hosts.len())
            .then(b.count.cmp(&a.count))
    });
    out
}
