//! One timeline per device, with its first cause: when a device's link
//! goes down, trains below its maximum, or the device leaves the bus (or a
//! GPU reports Xid 79, "fallen off the bus"), what happened to it before
//! and after, in order, from the incidents the ledger kept: corrected
//! AERs, a retrain, the link down, Xid 79, IOMMU faults from its DMA, its
//! driver's mapping errors. A port's incidents (the kernel names a link,
//! and the AER a root port logs, by the port) count for the devices below
//! it.
//!
//! "0000:41:00.0 is gone: first 3 PCIe AER corrected at 10.1 s, then PCIe
//! link down at 12.3 s, then Xid 79 at 12.4 s, then 8 IOMMU faults at
//! 12.5 s".

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{
    incident::Category,
    pci::{LinkChange, Topology},
    Incident,
};

/// Incidents this long before a device's first grave one are part of its
/// story (the corrected AERs that come before a link goes down).
pub const LOOKBACK_NS: u64 = 60_000_000_000;
/// Timelines kept at most, and steps in each (the rest counted).
pub const MAX_TIMELINES: usize = 64;
pub const MAX_STEPS: usize = 32;

/// A run of incidents of one kind on the device.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    /// Seconds since the trace's start of the run's first incident.
    pub t_s: f64,
    pub category: Category,
    /// The run's first incident's text.
    pub text: String,
    /// Incidents in the run.
    pub count: u64,
    /// Its first incident's id (to find it in the incident list).
    pub incident: u64,
    /// The device that reported it, where it is not the timeline's own
    /// (its port).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Timeline {
    pub device: String,
    /// `gone` (removed, or its link down at the end), `link down`,
    /// `downtrained`, `fell off the bus` (Xid 79), `recovered`.
    pub outcome: String,
    /// The first step: the first cause the trace shows.
    pub first_cause: Step,
    /// What followed, in order.
    pub then: Vec<Step>,
    /// Steps past `MAX_STEPS`, not listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub steps_not_listed: u64,
    /// The one line every view prints.
    pub summary: String,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Grave: the incidents that start a timeline.
fn grave(i: &Incident) -> bool {
    match i.category {
        Category::Link => matches!(
            i.link,
            Some(
                LinkChange::Down { .. }
                    | LinkChange::Removed { .. }
                    | LinkChange::Downtrained { .. }
            )
        ),
        Category::Xid => i.fault.as_ref().and_then(|f| f.xid) == Some(79),
        // A fatal AER (not "non-fatal"): the link is unreliable.
        Category::Aer => i.fault.as_ref().is_some_and(|f| {
            let r = f.reason.to_ascii_lowercase();
            r.contains("fatal") && !r.contains("non-fatal") && !r.contains("nonfatal")
        }),
        _ => false,
    }
}

/// Incidents that can be part of a device's story.
fn health(i: &Incident) -> bool {
    matches!(
        i.category,
        Category::Link | Category::Aer | Category::Xid | Category::IommuFault | Category::MapError
    )
}

/// A step's kind, for runs: the category, for link changes which one, and
/// the text (a corrected and an uncorrected AER are two steps).
fn run_key(i: &Incident) -> (Category, &'static str, &str) {
    (
        i.category,
        i.link.as_ref().map_or("", LinkChange::name),
        i.text.as_str(),
    )
}

/// The timelines of the devices that had a grave incident.
pub fn timelines(incidents: &[&Incident], topology: &Topology) -> Vec<Timeline> {
    // Incidents by the device whose story they are part of.
    let mut by_device: BTreeMap<&str, Vec<(&Incident, Option<&str>)>> = BTreeMap::new();
    for i in incidents.iter().copied().filter(|i| health(i)) {
        let below = topology.below(&i.device);
        if below.is_empty() {
            by_device.entry(&i.device).or_default().push((i, None));
        } else {
            for d in below {
                by_device.entry(d).or_default().push((i, Some(&i.device)));
            }
        }
    }
    let mut out = Vec::new();
    for (device, list) in by_device {
        let Some(first_grave) = list.iter().find(|(i, _)| grave(i)) else {
            continue;
        };
        let from = first_grave.0.at.mono_ns.saturating_sub(LOOKBACK_NS);
        let story: Vec<_> = list.iter().filter(|(i, _)| i.at.mono_ns >= from).collect();
        let mut steps: Vec<Step> = Vec::new();
        let mut keys: Vec<(Category, &'static str, &str)> = Vec::new();
        for (i, via) in story {
            let key = run_key(i);
            if keys.last() == Some(&key) {
                if let Some(s) = steps.last_mut() {
                    s.count += 1;
                }
                continue;
            }
            keys.push(key);
            steps.push(Step {
                t_s: i.at.t_s,
                category: i.category,
                text: i.text.clone(),
                count: 1,
                incident: i.id,
                via: via.map(str::to_owned),
            });
        }
        let outcome = outcome(&list.iter().map(|(i, _)| *i).collect::<Vec<_>>());
        let not_listed = steps.len().saturating_sub(MAX_STEPS + 1) as u64;
        steps.truncate(MAX_STEPS + 1);
        let mut it = steps.into_iter();
        let Some(first) = it.next() else { continue };
        let then: Vec<Step> = it.collect();
        let summary = summary(device, &outcome, &first, &then, not_listed);
        out.push(Timeline {
            device: device.to_owned(),
            outcome,
            first_cause: first,
            then,
            steps_not_listed: not_listed,
            summary,
        });
        if out.len() == MAX_TIMELINES {
            break;
        }
    }
    out
}

/// How the device's story ends, from its last link change (and Xid 79).
fn outcome(list: &[&Incident]) -> String {
    let last_link = list.iter().rev().find_map(|i| i.link.as_ref());
    let xid79 = list
        .iter()
        .any(|i| i.category == Category::Xid && i.fault.as_ref().and_then(|f| f.xid) == Some(79));
    match last_link {
        Some(LinkChange::Removed { .. }) => "gone",
        Some(LinkChange::Down { .. }) => "link down",
        Some(LinkChange::Downtrained { .. }) => "downtrained",
        _ if xid79 => "fell off the bus",
        Some(_) => "recovered",
        None => "errors",
    }
    .to_owned()
}

fn step_text(s: &Step) -> String {
    let what = match s.category {
        Category::Link => s.text.clone(),
        Category::Aer if s.count > 1 => format!("{} PCIe AER errors ({})", s.count, s.text),
        Category::IommuFault if s.count > 1 => format!("{} IOMMU faults ({})", s.count, s.text),
        Category::MapError if s.count > 1 => format!("{} mapping errors ({})", s.count, s.text),
        _ if s.count > 1 => format!("{} x {}", s.count, s.text),
        _ => s.text.clone(),
    };
    let via = s
        .via
        .as_deref()
        .map(|p| format!(" on its port {p}"))
        .unwrap_or_default();
    format!("{what}{via} at {:.3} s", s.t_s)
}

fn summary(device: &str, outcome: &str, first: &Step, then: &[Step], more: u64) -> String {
    let head = match outcome {
        "gone" => format!("{device} is gone"),
        "fell off the bus" => format!("{device} fell off the bus"),
        "recovered" => format!("{device} recovered"),
        o => format!("{device}: {o}"),
    };
    let mut s = format!("{head}: first {}", step_text(first));
    for t in then {
        s.push_str(", then ");
        s.push_str(&step_text(t));
    }
    if more > 0 {
        s.push_str(&format!(", and {more} more"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{clock::Stamp, fault::Fault, Source};

    fn inc(id: u64, t: u64, device: &str, category: Category, text: &str) -> Incident {
        Incident {
            id,
            at: Stamp {
                t_s: t as f64,
                mono_ns: t * 1_000_000_000,
                wall: None,
            },
            category,
            device: device.into(),
            process: None,
            address: None,
            text: text.into(),
            fault: None,
            change: None,
            map_error: None,
            misuse: None,
            link: None,
            context: None,
        }
    }

    #[test]
    fn a_gpu_gone_after_corrected_errors_on_its_port_with_faults_after() {
        let mut t = Topology::default();
        t.insert("0000:41:00.0", "0000:40:01.0");
        let mut list = vec![
            // Unrelated, long before: not in the story.
            inc(
                1,
                1,
                "0000:41:00.0",
                Category::Aer,
                "PCIe AER corrected: RxErr",
            ),
            inc(
                2,
                100,
                "0000:40:01.0",
                Category::Aer,
                "PCIe AER corrected: BadTLP",
            ),
            inc(
                3,
                101,
                "0000:40:01.0",
                Category::Aer,
                "PCIe AER corrected: BadTLP",
            ),
            inc(
                4,
                102,
                "0000:41:00.0",
                Category::Link,
                "PCIe link down (hotplug)",
            ),
            inc(
                5,
                103,
                "0000:41:00.0",
                Category::Xid,
                "Xid 79: GPU has fallen off the bus",
            ),
            inc(
                6,
                103,
                "0000:41:00.0",
                Category::IommuFault,
                "DMA write fault",
            ),
            inc(
                7,
                103,
                "0000:41:00.0",
                Category::IommuFault,
                "DMA write fault",
            ),
            inc(
                8,
                108,
                "0000:41:00.0",
                Category::Link,
                "device removed (the kernel removed it)",
            ),
            // Another device with only corrected errors: no timeline.
            inc(
                9,
                104,
                "0000:05:00.0",
                Category::Aer,
                "PCIe AER corrected: RxErr",
            ),
        ];
        list[3].link = Some(LinkChange::Down {
            reason: "hotplug".into(),
        });
        list[7].link = Some(LinkChange::Removed {
            how: "the kernel removed it".into(),
        });
        let mut xid = Fault::new(Source::NvidiaXid, "x", "x");
        xid.xid = Some(79);
        list[4].fault = Some(xid);
        let refs: Vec<&Incident> = list.iter().collect();
        let tl = timelines(&refs, &t);
        assert_eq!(tl.len(), 1, "{tl:#?}");
        let g = &tl[0];
        assert_eq!(
            (g.device.as_str(), g.outcome.as_str()),
            ("0000:41:00.0", "gone")
        );
        assert_eq!(g.first_cause.count, 2);
        assert_eq!(g.first_cause.via.as_deref(), Some("0000:40:01.0"));
        let kinds: Vec<(Category, u64)> = g.then.iter().map(|s| (s.category, s.count)).collect();
        assert_eq!(
            kinds,
            [
                (Category::Link, 1),
                (Category::Xid, 1),
                (Category::IommuFault, 2),
                (Category::Link, 1)
            ]
        );
        assert_eq!(
            g.summary,
            "0000:41:00.0 is gone: first 2 PCIe AER errors (PCIe AER corrected: BadTLP) on its \
             port 0000:40:01.0 at 100.000 s, then PCIe link down (hotplug) at 102.000 s, then \
             Xid 79: GPU has fallen off the bus at 103.000 s, then 2 IOMMU faults (DMA write \
             fault) at 103.000 s, then device removed (the kernel removed it) at 108.000 s"
        );
    }
}
