//! `report` over many files: a fleet's snapshots and recordings, from any
//! number of hosts, read one at a time into a small summary each (issue 29).
//!
//! Each file goes through the same replay as `report FILE` (within the
//! readers' memory budget, released when the next file starts), and only
//! its summary is kept: the hosts, devices and GPUs it names, its incidents
//! counted by kind and code, its first incident and its device timelines.
//! The summaries are bounded (`MAX_FILES`, and caps on every list in one),
//! so a directory of 10,000 snapshots costs what 10,000 small rows cost.
//! A damaged or unreadable file is a row with its reason, never the end of
//! the report. Files of the same host and boot (the header's host name and
//! boot id) are merged in time: their CLOCK_MONOTONIC stamps compare, so
//! the host's first cause is the earliest incident of all its files.

pub mod html;
mod merge;
pub mod text;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use serde::Serialize;

use crate::model::{Category, Incident};

/// Files read at most; the rest are counted in `files_not_read`.
pub const MAX_FILES: usize = 10_000;
/// Directory levels walked below each directory given.
const MAX_DEPTH: usize = 4;
/// Kinds of incident kept per file, timelines per file, occurrences kept
/// per kind for the shared patterns.
const MAX_KINDS: usize = 64;
const MAX_TIMELINES: usize = 8;
const MAX_OCCURRENCES: usize = 2_000;
/// Incidents per file remembered by a hash of their identity, so that one
/// boot's overlapping snapshots (a later snapshot's ring holds the earlier
/// trigger) count each incident once; past this they are counted as they
/// come (8 bytes each: 10,000 files keep at most 40 MB).
const MAX_KEYS: usize = 512;

/// A kind of incident: its category and its code (`Xid 79`, a fault
/// reason, `link-down`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Kind {
    pub category: &'static str,
    pub code: String,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.code.is_empty() {
            write!(f, "{}", self.category)
        } else {
            write!(f, "{} {}", self.category, self.code)
        }
    }
}

/// One incident, as the fleet views show it.
#[derive(Clone, Debug, Serialize)]
pub struct Brief {
    /// Index into `Fleet::files`.
    pub file: usize,
    pub t_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall: Option<String>,
    #[serde(skip)]
    pub mono_ns: u64,
    pub kind: Kind,
    pub device: String,
    /// `GPU1 NVIDIA H200 GPU-...` where the device is a GPU the file names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// `10de:2335` from the file's device list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    pub text: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct FileRow {
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    /// Wall-clock start, seconds since the Unix epoch (0: unknown).
    pub start_unix_s: f64,
    pub duration_s: f64,
    /// A snapshot's trigger (`xid79`, `fault`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    pub incidents: u64,
    pub by_kind: Vec<(Kind, u64)>,
    /// The file's incidents by identity (time, kind, device), for the
    /// host's count; the rest, past `MAX_KEYS`, by kind.
    #[serde(skip)]
    keys: Vec<(u64, Kind)>,
    #[serde(skip)]
    unkeyed: BTreeMap<Kind, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first: Option<Brief>,
    pub timelines: Vec<String>,
    pub lost_events: u64,
    /// What the file itself said (cut short, damaged, ...).
    pub warnings: Vec<String>,
    /// Why it could not be read at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The command that gives this file's own report.
    pub report: String,
}

impl FileRow {
    pub fn damaged(&self) -> bool {
        self.error.is_some() || !self.warnings.is_empty()
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct GpuRow {
    pub label: String,
    pub bus_id: String,
}

/// One host and boot, its files merged in time.
#[derive(Clone, Debug, Serialize)]
pub struct HostRow {
    pub host: String,
    pub boot_id: String,
    pub kernel: String,
    /// Indices into `Fleet::files`, oldest first.
    pub files: Vec<usize>,
    pub gpus: Vec<GpuRow>,
    pub devices: u64,
    /// The host's incidents, each once however many of its files hold it.
    pub incidents: u64,
    pub by_kind: Vec<(Kind, u64)>,
    /// The earliest incident of all the host's files: its cascade's first
    /// cause.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_cause: Option<Brief>,
    pub timelines: Vec<String>,
}

/// A kind of incident seen on more than one host.
#[derive(Clone, Debug, Serialize)]
pub struct Pattern {
    pub kind: Kind,
    pub hosts: Vec<String>,
    /// The devices it hit, `host device (GPU label)`.
    pub devices: Vec<String>,
    pub models: Vec<String>,
    pub drivers: Vec<String>,
    pub kernels: Vec<String>,
    pub count: u64,
    /// The one line every view prints.
    pub summary: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Fleet {
    pub files: Vec<FileRow>,
    pub hosts: Vec<HostRow>,
    pub by_kind: Vec<KindRow>,
    pub patterns: Vec<Pattern>,
    pub gpus: u64,
    pub devices: u64,
    pub damaged_files: u64,
    /// Files past `MAX_FILES`, and entries that are not regular files
    /// (links, devices, FIFOs: skipped, never followed).
    pub files_not_read: u64,
    pub entries_skipped: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct KindRow {
    pub kind: Kind,
    pub count: u64,
    pub hosts: u64,
}

/// The files `report` reads for `paths`: files as given, directories
/// walked (`*.gdt`, not dot files, `MAX_DEPTH` levels) in name order.
/// Links, devices and FIFOs inside a directory are skipped and named.
pub fn expand(paths: &[PathBuf]) -> (Vec<PathBuf>, Vec<String>, u64) {
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    let mut over = 0u64;
    for p in paths {
        match std::fs::metadata(p) {
            Ok(m) if m.is_dir() => walk(p, 0, &mut files, &mut skipped, &mut over),
            _ => push(&mut files, p.clone(), &mut over),
        }
    }
    (files, skipped, over)
}

fn push(files: &mut Vec<PathBuf>, p: PathBuf, over: &mut u64) {
    if files.len() < MAX_FILES {
        files.push(p);
    } else {
        *over += 1;
    }
}

fn walk(
    dir: &Path,
    depth: usize,
    files: &mut Vec<PathBuf>,
    skipped: &mut Vec<String>,
    over: &mut u64,
) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        skipped.push(format!("{}: cannot be listed", shown(dir)));
        return;
    };
    let mut entries: Vec<_> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if m.is_dir() {
            if depth + 1 < MAX_DEPTH {
                walk(&p, depth + 1, files, skipped, over);
            }
        } else if name.ends_with(".gdt") {
            if m.is_file() {
                push(files, p, over);
            } else if skipped.len() < 100 {
                skipped.push(format!("{}: not a regular file (skipped)", shown(&p)));
            }
        }
    }
}

fn shown(p: &Path) -> String {
    crate::sanitize::text(&p.display().to_string()).into_owned()
}

/// The fleet summary of `files`; `progress(i, n, path)` before each file.
pub fn summarize(files: &[PathBuf], mut progress: impl FnMut(usize, usize, &str)) -> Fleet {
    let mut fleet = Fleet::default();
    let mut occurrences: BTreeMap<Kind, Vec<Brief>> = BTreeMap::new();
    let mut host_gpus: BTreeMap<(String, String), BTreeMap<String, String>> = BTreeMap::new();
    let mut host_devices: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (i, path) in files.iter().enumerate() {
        let shown_path = shown(path);
        progress(i, files.len(), &shown_path);
        let row = match read_one(i, path, &shown_path) {
            Ok((row, briefs, gpus, devices)) => {
                let key = (
                    row.host.clone().unwrap_or_default(),
                    row.boot_id.clone().unwrap_or_default(),
                );
                host_gpus.entry(key.clone()).or_default().extend(gpus);
                host_devices.entry(key).or_default().extend(devices);
                for b in briefs {
                    let v = occurrences.entry(b.kind.clone()).or_default();
                    if v.len() < MAX_OCCURRENCES {
                        v.push(b);
                    }
                }
                row
            }
            Err(e) => FileRow {
                error: Some(crate::sanitize::text(&format!("{e:#}")).into_owned()),
                ..empty_row(&shown_path)
            },
        };
        fleet.files.push(row);
    }
    fleet.damaged_files = fleet.files.iter().filter(|f| f.damaged()).count() as u64;
    fleet.hosts = merge::hosts(&fleet.files, &host_gpus, &host_devices);
    fleet.gpus = fleet.hosts.iter().map(|h| h.gpus.len() as u64).sum();
    fleet.devices = fleet.hosts.iter().map(|h| h.devices).sum();
    fleet.by_kind = merge::by_kind(&fleet.hosts);
    fleet.patterns = merge::patterns(&fleet.files, &fleet.hosts, &occurrences);
    fleet
}

fn empty_row(path: &str) -> FileRow {
    FileRow {
        path: path.to_owned(),
        host: None,
        boot_id: None,
        kernel: None,
        start_unix_s: 0.0,
        duration_s: 0.0,
        trigger: None,
        incidents: 0,
        by_kind: Vec::new(),
        keys: Vec::new(),
        unkeyed: BTreeMap::new(),
        first: None,
        timelines: Vec::new(),
        lost_events: 0,
        warnings: Vec::new(),
        error: None,
        report: format!("gpudirect-trace report {}", shell_word(path)),
    }
}

/// `path` as one shell word (single quotes unless it is plain).
fn shell_word(path: &str) -> String {
    if path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-:+,=@".contains(&b))
    {
        path.to_owned()
    } else {
        format!("'{}'", path.replace('\'', r"'\''"))
    }
}

type Read = (
    FileRow,
    Vec<Brief>,
    BTreeMap<String, String>,
    BTreeSet<String>,
);

/// One file's replay, reduced to its row; the replay is dropped here.
fn read_one(index: usize, path: &Path, shown_path: &str) -> anyhow::Result<Read> {
    let reader = crate::tracefile::open(path)?;
    let r = super::replay_from(path, reader, &super::Window::default())?;
    let h = &r.header;
    let mut row = empty_row(shown_path);
    row.host = Some(h.hostname.clone());
    row.boot_id = Some(h.boot_id.clone());
    row.kernel = Some(h.kernel_release.clone());
    row.start_unix_s = h.start_unix_ns as f64 / 1e9;
    row.duration_s = r.seconds(r.end_ns.max(r.last_ns)).max(0.0);
    row.trigger = h.snapshot.as_ref().map(|s| s.trigger.label.clone());
    row.lost_events = r.losses_total();
    row.warnings = super::warnings(shown_path, &r);
    let gpus: BTreeMap<String, String> = h
        .gpus
        .iter()
        .map(|g| (g.bus_id.clone(), gpu_label(g)))
        .collect();
    let devices: BTreeSet<String> = h.devices.iter().map(|d| d.bus_id.clone()).collect();
    let model = |dev: &str| {
        h.devices.iter().find(|d| d.bus_id == dev).map(|d| {
            let id = |s: &str| s.trim_start_matches("0x").to_owned();
            (
                format!("{}:{}", id(&d.vendor), id(&d.device)),
                d.driver.clone(),
            )
        })
    };
    let mut counts: BTreeMap<Kind, u64> = BTreeMap::new();
    let mut briefs = Vec::new();
    for inc in r.incidents() {
        row.incidents += 1;
        let kind = kind_of(inc);
        let new_kind = !counts.contains_key(&kind);
        if new_kind && counts.len() >= MAX_KINDS {
            continue;
        }
        *counts.entry(kind.clone()).or_default() += 1;
        if row.keys.len() < MAX_KEYS {
            row.keys.push((identity(inc, &kind), kind.clone()));
        } else {
            *row.unkeyed.entry(kind.clone()).or_default() += 1;
        }
        let (m, driver) = model(&inc.device).map_or((None, None), |(m, d)| (Some(m), d));
        let brief = Brief {
            file: index,
            t_s: inc.at.t_s,
            wall: inc.at.wall.clone(),
            mono_ns: inc.at.mono_ns,
            kind,
            device: inc.device.clone(),
            gpu: gpus.get(&inc.device).cloned(),
            model: m,
            driver,
            text: inc.text.clone(),
        };
        if row.first.is_none() {
            row.first = Some(brief.clone());
        }
        // One occurrence per kind and device per file is enough to tell
        // which hosts and devices share a pattern.
        if new_kind
            || !briefs
                .iter()
                .any(|b: &Brief| b.kind == brief.kind && b.device == brief.device)
        {
            briefs.push(brief);
        }
    }
    row.by_kind = counts.into_iter().collect();
    row.timelines = r
        .analysis
        .timelines()
        .into_iter()
        .take(MAX_TIMELINES)
        .map(|t| t.summary)
        .collect();
    Ok((row, briefs, gpus, devices))
}

/// An incident's identity within one boot: its CLOCK_MONOTONIC time, kind
/// and device.
fn identity(i: &Incident, kind: &Kind) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (i.at.mono_ns, kind, &i.device).hash(&mut h);
    h.finish()
}

fn gpu_label(g: &crate::gpu::GpuIdentity) -> String {
    let mut s = format!("{} {}", g.short(), g.name);
    if let Some(u) = &g.uuid {
        s.push(' ');
        s.push_str(u);
    }
    s
}

/// An incident's kind: its category and the code that tells such
/// incidents apart across hosts.
pub fn kind_of(i: &Incident) -> Kind {
    let code = match i.category {
        Category::Xid => i
            .fault
            .as_ref()
            .and_then(|f| f.xid)
            .map_or_else(String::new, |x| format!("Xid {x}")),
        Category::IommuFault | Category::Aer => i
            .fault
            .as_ref()
            .map(|f| f.reason.chars().take(80).collect())
            .unwrap_or_default(),
        Category::Link => i
            .link
            .as_ref()
            .map_or_else(String::new, |l| l.name().to_owned()),
        _ => String::new(),
    };
    Kind {
        category: i.category.as_str(),
        code,
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
