//! Probe families: one folder each, on each side (this crate's
//! `families/<name>/`, the eBPF crate's `src/families/<name>`), in the manner
//! of retis' collectors. A family holds its probe points (tracepoints and
//! hooks, as catalog data), its metric declarations and, where it keeps
//! per-device state of its own, that state with its decoding, its counters
//! and what it contributes to the JSON, the text, the HTML facts and the
//! metrics (`DeviceFamily`).
//!
//! This file is the one list: a new family is a folder and a line here
//! (`FAMILIES`, and `families!` when it keeps per-device state). The layers
//! above read the families only through it: the loader attaches
//! `tracepoints()` and `hooks()`, `aggregate` keeps a `Devices` per device,
//! serve and docs/metrics.md take `metric_sections()`.
//!
//! Families sit above the model, the kinds and the catalog's types, below
//! `aggregate`: they never import the layers that use them.

pub mod dma_api;
pub mod faults;
pub mod inval;
pub mod iommu;
pub mod nvidia;
pub mod pcie;
pub mod swiotlb;
pub mod tasks;

use std::sync::{Arc, LazyLock};

use gpudirect_trace_common::{Counter, CounterKey};
use serde::Serialize;

use crate::{
    catalog::{ProbeSpec, TimingSpec},
    decode::Record,
    metrics::{self, Metric, Section, Sink},
};

/// What a family declares: its probe points and its metrics.
pub struct Family {
    pub name: &'static str,
    /// Its tracepoints, in display order.
    pub tracepoints: &'static [ProbeSpec],
    /// Its timed (or learning) kernel functions, in display order.
    pub hooks: &'static [&'static [TimingSpec]],
    /// Its metrics in docs/metrics.md's main table.
    pub metrics: &'static [&'static Metric],
}

/// Every family, in display order (`probes`, docs/metrics.md).
pub const FAMILIES: &[&Family] = &[
    &iommu::FAMILY,
    &dma_api::FAMILY,
    &faults::FAMILY,
    &swiotlb::FAMILY,
    &inval::FAMILY,
    &nvidia::FAMILY,
    &pcie::FAMILY,
    &tasks::FAMILY,
];

/// Every catalog tracepoint, the families' in order.
pub fn tracepoints() -> &'static [ProbeSpec] {
    static ALL: LazyLock<Vec<ProbeSpec>> = LazyLock::new(|| {
        FAMILIES
            .iter()
            .flat_map(|f| f.tracepoints.iter().copied())
            .collect()
    });
    &ALL
}

/// Every hook the loader attaches, the families' in order.
pub fn hooks() -> impl Iterator<Item = &'static TimingSpec> {
    FAMILIES
        .iter()
        .flat_map(|f| f.hooks.iter().flat_map(|h| h.iter()))
}

/// Every distinct eBPF program the tracepoints use (each is loaded once,
/// then attached to every probe point that names it).
pub fn programs() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for p in tracepoints() {
        if !out.contains(&p.program) {
            out.push(p.program);
        }
    }
    out
}

/// docs/metrics.md's tables: the families' metrics and the tool's own.
pub fn metric_sections() -> &'static [Section] {
    static ALL: LazyLock<Vec<Section>> = LazyLock::new(|| {
        let main: Vec<&'static Metric> = FAMILIES
            .iter()
            .flat_map(|f| f.metrics.iter().copied())
            .chain(metrics::timing::ALL.iter().copied())
            .chain(metrics::tracer::ALL.iter().copied())
            .collect();
        vec![
            Section::new("dma", main),
            Section::new("flight", metrics::flight::ALL.to_vec()),
            Section::new("misuse", metrics::misuse::ALL.to_vec()),
            Section::new("gpu", nvidia::metrics::GPU_METRICS.to_vec()),
        ]
    });
    &ALL
}

/// A record a family made itself (a state read from sysfs, a uevent), of
/// its own kinds with `flags::FROM_USERSPACE`: the session hands it on as
/// it does the programs' records (analysis, sinks, trace files).
pub struct Synth {
    pub record: Record,
    pub device: Arc<str>,
}

/// A family's own source of records besides its programs.
pub trait Source: Send {
    /// Records of the state when the session starts.
    fn start(&mut self, _now_ns: u64, _out: &mut Vec<Synth>) {}
    /// Called every `POLL_EVERY`.
    fn poll(&mut self, _now_ns: u64, _out: &mut Vec<Synth>) {}
    /// A PCI device arrived or left (the kernel's uevent).
    fn presence(&mut self, _p: &crate::model::pci::Presence, _out: &mut Vec<Synth>) {}
}

/// How often the sources are polled.
pub const POLL_EVERY: std::time::Duration = pcie::sysfs::POLL_INTERVAL;

/// The families' sources for a session on this host; `attached` says
/// whether a catalog tracepoint is attached (a source steps back where the
/// kernel reports the same thing itself).
pub fn sources(attached: &dyn Fn(&str) -> bool) -> Vec<Box<dyn Source>> {
    vec![Box::new(pcie::sysfs::Links::new(
        std::path::Path::new("/sys"),
        !attached("pci:pcie_link_event"),
    ))]
}

/// A family's per-device part: what it counts for a device and what it
/// says about it.
pub trait DeviceFamily: Default {
    /// Its part of the device's snapshot, flattened into the device's JSON
    /// object: its field names are the JSON's.
    type Snapshot: Serialize + Clone + std::fmt::Debug + PartialEq + Default;

    /// A streamed record of the device; true where the family took it.
    fn ingest(&mut self, _rec: &Record) -> bool {
        false
    }

    /// One of the kernel's loss-free counters of the device (they replace
    /// what the stream counted).
    fn counter(&mut self, _key: &CounterKey, _c: &Counter) {}

    /// Its part of the snapshot at `now_ns` (CLOCK_MONOTONIC: the trace's
    /// latest moment; states that last, such as a link below its maximum,
    /// are counted up to it).
    fn snapshot(&self, now_ns: u64) -> Self::Snapshot;

    /// Its series for the device (`device`: the device's bounded label) at
    /// `now_ns`.
    fn metrics(&self, _device: &str, _now_ns: u64, _sink: &mut dyn Sink) {}

    /// Lines under `live`'s table about the device.
    fn notes(_s: &Self::Snapshot, _device: &str, _out: &mut Vec<String>) {}

    /// Rows of the device's facts in the HTML report: (what, value).
    fn facts(_s: &Self::Snapshot, _out: &mut Vec<(&'static str, String)>) {}

    /// A change of the device's state the last record made that is an
    /// incident (a link down, a downtrain, a removal), once.
    fn take_change(&mut self) -> Option<crate::model::pci::LinkChange> {
        None
    }

    /// A fault about the device decoded from the kernel log (the families
    /// that count a tracepoint's reports say how many the log showed).
    fn log_fault(&mut self, _f: &crate::model::Fault) {}

    /// NVML's reading of the device, a GPU, at `ts`: busy (P0) or not; a
    /// change that is an incident.
    fn gpu_busy(&mut self, _busy: bool, _ts: u64) -> Option<crate::model::pci::LinkChange> {
        None
    }
}

/// The per-device state of the families that keep one, and their
/// snapshots: one field each.
macro_rules! device_families {
    ($($name:ident: $ty:ty),* $(,)?) => {
        /// The families' state of one device.
        #[derive(Default)]
        pub struct Devices {
            $(pub $name: $ty,)*
        }

        /// The families' part of one device's snapshot.
        #[derive(Clone, Debug, Default, PartialEq, Serialize)]
        pub struct Snapshots {
            $(#[serde(flatten)] pub $name: <$ty as DeviceFamily>::Snapshot,)*
        }

        impl Devices {
            /// True where a family took the record.
            pub fn ingest(&mut self, rec: &Record) -> bool {
                false $(|| self.$name.ingest(rec))*
            }

            pub fn counter(&mut self, key: &CounterKey, c: &Counter) {
                $(self.$name.counter(key, c);)*
            }

            /// The change the last record made, if it is an incident.
            pub fn take_change(&mut self) -> Option<crate::model::pci::LinkChange> {
                None $(.or_else(|| self.$name.take_change()))*
            }

            pub fn log_fault(&mut self, f: &crate::model::Fault) {
                $(self.$name.log_fault(f);)*
            }

            /// NVML says the GPU is busy or not.
            pub fn gpu_busy(&mut self, busy: bool, ts: u64) -> Option<crate::model::pci::LinkChange> {
                let mut out = None;
                $(out = out.or(self.$name.gpu_busy(busy, ts));)*
                out
            }

            pub fn snapshot(&self, now_ns: u64) -> Snapshots {
                Snapshots { $($name: self.$name.snapshot(now_ns),)* }
            }

            pub fn metrics(&self, device: &str, now_ns: u64, sink: &mut dyn Sink) {
                $(self.$name.metrics(device, now_ns, sink);)*
            }
        }

        impl Snapshots {
            pub fn notes(&self, device: &str) -> Vec<String> {
                let mut out = Vec::new();
                $(<$ty as DeviceFamily>::notes(&self.$name, device, &mut out);)*
                out
            }

            pub fn facts(&self) -> Vec<(&'static str, String)> {
                let mut out = Vec::new();
                $(<$ty as DeviceFamily>::facts(&self.$name, &mut out);)*
                out
            }
        }
    };
}

device_families! {
    swiotlb: swiotlb::Device,
    pcie: pcie::Device,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_names_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for p in tracepoints() {
            assert!(seen.insert(p.name), "duplicate probe {}", p.name);
            assert!(!p.group().is_empty() && !p.event().is_empty(), "{}", p.name);
            assert!(p.args_read >= 1, "{}", p.name);
        }
        let mut seen = std::collections::HashSet::new();
        for h in hooks() {
            assert!(seen.insert(h.name), "duplicate hook {}", h.name);
        }
    }

    #[test]
    fn every_metric_is_declared_once_with_help_and_doc() {
        let mut seen = std::collections::BTreeSet::new();
        for m in metric_sections().iter().flat_map(|s| s.metrics.iter()) {
            assert!(seen.insert(m.exported()), "{} declared twice", m.exported());
            assert!(m.name.starts_with("gpudirect_"), "{}", m.name);
            assert!(
                !m.help.is_empty() && !m.doc.is_empty(),
                "{} lacks help",
                m.name
            );
            assert!(
                !m.help.contains('\n') && !m.doc.contains('\n'),
                "{}",
                m.name
            );
        }
    }

    /// docs/metrics.md's tables are the declarations' (GDT_BLESS=1 rewrites
    /// them).
    #[test]
    fn docs_metrics_md_is_made_from_the_declarations() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md");
        let doc = std::fs::read_to_string(&path).expect("docs/metrics.md");
        let want = metrics::with_tables(&doc, metric_sections())
            .expect("docs/metrics.md has every section's markers");
        if std::env::var_os("GDT_BLESS").is_some() {
            std::fs::write(&path, &want).expect("write docs/metrics.md");
            return;
        }
        assert!(
            doc == want,
            "docs/metrics.md's tables differ from the metric declarations: run \
             `GDT_BLESS=1 cargo test -p gpudirect-trace families::` and commit"
        );
    }

    #[test]
    fn one_program_serves_renamed_tracepoints() {
        let users: Vec<_> = tracepoints()
            .iter()
            .filter(|p| p.program == "dma_map")
            .map(|p| p.name)
            .collect();
        assert_eq!(users, ["dma:dma_map_page", "dma:dma_map_phys"]);
        assert!(programs().len() < tracepoints().len());
    }
}
