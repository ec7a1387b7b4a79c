//! GPU families from NVML facts (docs/metrics.md, "GPUs"), and the capped
//! per-container label.
//!
//! Labels are bounded: `device` (bus id, through the same [`DeviceLabels`] as
//! every other family, so series join on it), `gpu` (NVML index) and `uuid` are
//! one value per GPU; `fact`, `cause`, `scope` and `error` are fixed sets.
//! Never pids.

use std::sync::Arc;

use super::{labels::BoundedLabels, DeviceLabels, Labels, Model};
use crate::families::nvidia::metrics as nv;
use crate::gpu::{process::Container, Fact, GpuFacts, GpuIdentity, NvmlStatus, Sample};
use crate::metrics::Metric;

/// Tasks in no container get this `container` label.
pub const HOST_CONTAINER: &str = "host";
/// The label that containers past the cap fold into.
pub const OTHER_CONTAINER: &str = "other";
pub const DEFAULT_MAX_CONTAINERS: usize = 64;
/// Longest `container` label value (LXC names are free-form).
const MAX_CONTAINER_LEN: usize = 64;
/// Distinct folded containers remembered for the folded counter; past this a
/// long-running exporter on a host with container churn stops remembering
/// (and counting) new ones, so its memory stays bounded.
const MAX_FOLDED_TRACKED: usize = 4096;

/// Bounded `container` labels, like [`DeviceLabels`]: the first `max`
/// containers seen keep their short id for the life of the process (a label
/// never moves, so counters stay monotonic); later ones are `other`, and each
/// folded container is counted once in `gpudirect_containers_folded_total`.
/// Tasks outside any container are `host`, which is never folded.
#[derive(Debug)]
pub struct ContainerLabels(BoundedLabels);

impl ContainerLabels {
    pub fn new(max: usize) -> Self {
        Self(BoundedLabels::new(max, MAX_FOLDED_TRACKED))
    }

    /// The label value for a task in `container` (`None`: not in one).
    pub fn label(&mut self, container: Option<&Container>) -> Arc<str> {
        let Some(c) = container else {
            return Arc::from(HOST_CONTAINER);
        };
        let name = crate::sanitize::cut(c.short_id(), MAX_CONTAINER_LEN);
        let reserved = name == OTHER_CONTAINER || name == HOST_CONTAINER;
        self.0
            .admit(name, reserved)
            .unwrap_or_else(|| Arc::from(OTHER_CONTAINER))
    }

    /// Distinct containers folded into `other` so far (at most 4096 counted).
    pub fn folded(&self) -> u64 {
        self.0.folded()
    }
}

fn flag(b: bool) -> u64 {
    u64::from(b)
}

impl Model {
    /// GPU families from one NVML reading: `gpudirect_nvml_available` always;
    /// per GPU its info, BAR1, PCIe link and replays, row remapping, retired
    /// pages, ECC, persistence mode and P-state where NVML answered, and
    /// `gpudirect_gpu_fact_unavailable{fact}` where it did not.
    pub fn add_gpus(&mut self, status: &NvmlStatus, sample: &Sample, labels: &mut DeviceLabels) {
        let up = flag(status.is_available());
        self.add(&nv::NVML_AVAILABLE, vec![], up);
        if !status.is_available() {
            return;
        }
        let errors = sample.errors.len() as u64;
        self.add(&nv::NVML_DEVICE_ERRORS, vec![], errors);
        for g in &sample.gpus {
            let base = gpu_labels(&g.identity, labels);
            let with = |k: &'static str, v: &str| {
                let mut l = base.clone();
                l.push((k, v.to_owned()));
                l
            };
            let name = with("name", &g.identity.name);
            self.add(&nv::GPU_INFO, name, 1);
            self.add_gpu_values(g, &base);
            for (fact, _) in g.unavailable() {
                let l = with("fact", fact);
                self.add(&nv::GPU_FACT_UNAVAILABLE, l, 1);
            }
            let r = &g.retired_pages;
            for (cause, f) in [("single_bit", &r.single_bit), ("double_bit", &r.double_bit)] {
                if let Fact::Ok(n) = f {
                    let l = with("cause", cause);
                    self.add(&nv::GPU_RETIRED_PAGES, l, u64::from(*n));
                }
            }
            let e = &g.ecc;
            for (scope, error, f) in [
                ("volatile", "corrected", &e.volatile_corrected),
                ("volatile", "uncorrected", &e.volatile_uncorrected),
                ("aggregate", "corrected", &e.aggregate_corrected),
                ("aggregate", "uncorrected", &e.aggregate_uncorrected),
            ] {
                if let Fact::Ok(n) = f {
                    let mut l = with("scope", scope);
                    l.push(("error", error.to_owned()));
                    self.add(&nv::GPU_ECC_ERRORS_TOTAL, l, *n);
                }
            }
        }
    }

    fn add_gpu_values(&mut self, g: &GpuFacts, base: &Labels) {
        let gauge = |m: &mut Self, metric: &'static Metric, v: Option<u64>| {
            if let Some(v) = v {
                m.add(metric, base.clone(), v);
            }
        };
        if let Fact::Ok(b) = g.bar1 {
            self.add(&nv::GPU_BAR1_TOTAL_BYTES, base.clone(), b.total);
            self.add(&nv::GPU_BAR1_USED_BYTES, base.clone(), b.used);
        }
        let p = &g.pcie;
        for (metric, fact) in [
            (&nv::GPU_PCIE_LINK_GEN_CURRENT, &p.gen_current),
            (&nv::GPU_PCIE_LINK_GEN_MAX, &p.gen_max),
            (&nv::GPU_PCIE_LINK_WIDTH_CURRENT, &p.width_current),
            (&nv::GPU_PCIE_LINK_WIDTH_MAX, &p.width_max),
        ] {
            gauge(self, metric, fact.ok().map(|&x| u64::from(x)));
        }
        if let Fact::Ok(n) = p.replays {
            self.add(&nv::GPU_PCIE_REPLAYS_TOTAL, base.clone(), n);
        }
        if let Fact::Ok(r) = g.remapped_rows {
            for (cause, n) in [
                ("correctable", r.correctable),
                ("uncorrectable", r.uncorrectable),
            ] {
                let mut l = base.clone();
                l.push(("cause", cause.to_owned()));
                self.add(&nv::GPU_REMAPPED_ROWS, l, u64::from(n));
            }
            gauge(self, &nv::GPU_ROW_REMAP_PENDING, Some(flag(r.pending)));
            gauge(self, &nv::GPU_ROW_REMAP_FAILED, Some(flag(r.failure)));
        }
        for (metric, fact) in [
            (&nv::GPU_RETIRED_PAGES_PENDING, &g.retired_pages.pending),
            (&nv::GPU_ECC_ENABLED, &g.ecc.enabled),
            (&nv::GPU_PERSISTENCE_MODE, &g.persistence_mode),
        ] {
            gauge(self, metric, fact.ok().map(|&b| flag(b)));
        }
        let ps = g.performance_state.ok().map(|&s| u64::from(s));
        gauge(self, &nv::GPU_PERFORMANCE_STATE, ps);
    }

    /// `gpudirect_containers_folded_total`, for an exporter that uses
    /// [`ContainerLabels`].
    pub fn add_container_folds(&mut self, containers: &ContainerLabels) {
        let n = containers.folded();
        self.add(&nv::CONTAINERS_FOLDED_TOTAL, vec![], n);
    }
}

/// `device`, `gpu`, `uuid` of one GPU.
fn gpu_labels(id: &GpuIdentity, labels: &mut DeviceLabels) -> Labels {
    let gpu = id
        .index
        .map_or_else(|| "unknown".to_owned(), |i| i.to_string());
    vec![
        ("device", labels.label(&id.bus_id).to_string()),
        ("gpu", gpu),
        (
            "uuid",
            id.uuid.clone().unwrap_or_else(|| "unknown".to_owned()),
        ),
    ]
}

#[cfg(test)]
#[path = "metrics_gpu_tests.rs"]
mod tests;
