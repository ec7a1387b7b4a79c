//! What the doctor reports: one finding per observation, with the evidence it
//! was drawn from and what to do about it.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Checked and fine.
    Ok,
    /// Worth knowing; nothing to change.
    Info,
    /// A file the check needs could not be read: the state is unknown.
    Unknown,
    /// Likely costs performance or breaks some GPUDirect modes.
    Warn,
    /// Breaks or badly degrades GPUDirect / P2P.
    Problem,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Info => "info",
            Severity::Unknown => "unknown",
            Severity::Warn => "warn",
            Severity::Problem => "problem",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Stable identifier, e.g. `pcie.link.downtrained`.
    pub id: String,
    pub severity: Severity,
    /// BDF the finding is about, or `host`.
    pub device: String,
    pub summary: String,
    /// Files and values read (`/sys/.../current_link_width = 8`).
    pub evidence: Vec<String>,
    /// What to do; empty when nothing.
    pub advice: String,
}

/// Collects findings.
#[derive(Debug, Default)]
pub struct Findings {
    pub list: Vec<Finding>,
    /// The tree read is a capture (`--root`): what is missing there was
    /// not captured, and "run as root on the host" cannot help its reader.
    pub capture: bool,
}

impl Findings {
    /// What to do about a file a check could not read, on this tree.
    pub fn unreadable_advice(&self) -> &'static str {
        if self.capture {
            UNCAPTURED_ADVICE
        } else {
            UNREADABLE_ADVICE
        }
    }

    pub fn add(
        &mut self,
        id: &str,
        severity: Severity,
        device: &str,
        summary: impl Into<String>,
        evidence: Vec<String>,
        advice: impl Into<String>,
    ) {
        self.list.push(Finding {
            id: id.to_string(),
            severity,
            device: device.to_string(),
            summary: summary.into(),
            evidence,
            advice: advice.into(),
        });
    }

    /// A file a check needed could not be read.
    pub fn unreadable(&mut self, id: &str, device: &str, path: &str, err: &dyn std::fmt::Display) {
        self.add(
            &format!("{id}.unreadable"),
            Severity::Unknown,
            device,
            format!("unknown: {path} unreadable"),
            vec![format!("{path}: {err}")],
            self.unreadable_advice(),
        );
    }

    pub fn by_id<'a>(&'a self, id: &'a str) -> impl Iterator<Item = &'a Finding> + 'a {
        self.list.iter().filter(move |f| f.id == id)
    }

    pub fn worst(&self) -> Option<Severity> {
        self.list.iter().map(|f| f.severity).max()
    }
}

/// What to do about a file a check could not read (`unreadable_advice`).
const UNREADABLE_ADVICE: &str =
    "run as root on the host itself, or capture with `gpudirect-trace doctor --capture`";

/// The same, where the file was missing from a capture (`--root`).
const UNCAPTURED_ADVICE: &str =
    "the capture does not hold it (taken without root, by another tool, or by an older \
     gpudirect-trace): capture again as root on the host with `gpudirect-trace doctor --capture`";

/// `path = value` evidence line.
pub fn ev(path: &str, value: impl std::fmt::Display) -> String {
    format!("{path} = {value}")
}
