//! NVML facts per GPU, the source trait they come from, and their recorded
//! form (`nvml.json` in a doctor capture, and the fixtures of the tests).
//!
//! Every NVML answer is a [`Fact`]: the value, or `unavailable: why` (not
//! supported on this GPU, no permission, GPU lost). A failing call never fails
//! the reading. Without NVML at all, [`NvmlStatus::Unavailable`] says why once
//! and a sample has no GPUs.

use std::{
    fs,
    path::Path,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use super::identity::GpuIdentity;

/// File name of the recorded NVML answers in a doctor capture.
pub const NVML_FILE: &str = "nvml.json";
/// Version of the recorded form; bumped on incompatible changes.
pub const FORMAT: u32 = 1;

/// One NVML answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fact<T> {
    Ok(T),
    /// Why NVML gave no value (its error, e.g. "not supported on this GPU").
    Unavailable(String),
}

impl<T> Fact<T> {
    pub fn ok(&self) -> Option<&T> {
        match self {
            Fact::Ok(v) => Some(v),
            Fact::Unavailable(_) => None,
        }
    }

    pub fn why(&self) -> Option<&str> {
        match self {
            Fact::Ok(_) => None,
            Fact::Unavailable(w) => Some(w),
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Fact<U> {
        match self {
            Fact::Ok(v) => Fact::Ok(f(v)),
            Fact::Unavailable(w) => Fact::Unavailable(w),
        }
    }
}

impl<T, E: std::fmt::Display> From<Result<T, E>> for Fact<T> {
    fn from(r: Result<T, E>) -> Self {
        match r {
            Ok(v) => Fact::Ok(v),
            Err(e) => Fact::Unavailable(e.to_string()),
        }
    }
}

/// BAR1: the window through which peers (NICs, other GPUs, the CPU) reach GPU
/// memory; GPUDirect RDMA registrations map GPU memory into it. Bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bar1 {
    pub total: u64,
    pub used: u64,
}

/// PCIe link as NVML sees it. `max` is the most this GPU and this host allow
/// together (`nvmlDeviceGetMaxPcieLinkGeneration`), not the GPU's own maximum.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PcieLink {
    pub gen_current: Fact<u32>,
    pub gen_max: Fact<u32>,
    pub width_current: Fact<u32>,
    pub width_max: Fact<u32>,
    /// `nvmlDeviceGetPcieReplayCounter`: link-level retransmissions since the
    /// driver loaded (nvidia-smi's "Replays Since Reset").
    pub replays: Fact<u64>,
}

/// Row remapping (Ampere and later): HBM rows replaced after ECC errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemappedRows {
    /// Rows remapped after correctable errors.
    pub correctable: u32,
    /// Rows remapped after uncorrectable errors (Xid 63/64 territory).
    pub uncorrectable: u32,
    /// A remapping waits for a GPU reset to take effect.
    pub pending: bool,
    /// A remapping failed: no spare row was left.
    pub failure: bool,
}

/// Page retirement (before Ampere; Ampere and later remap rows instead).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetiredPages {
    pub single_bit: Fact<u32>,
    pub double_bit: Fact<u32>,
    /// Pages wait for a reboot/driver reload to be retired.
    pub pending: Fact<bool>,
}

/// ECC error counts (`nvmlDeviceGetTotalEccErrors`): volatile since the driver
/// loaded, aggregate over the GPU's life.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EccCounts {
    pub enabled: Fact<bool>,
    pub volatile_corrected: Fact<u64>,
    pub volatile_uncorrected: Fact<u64>,
    pub aggregate_corrected: Fact<u64>,
    pub aggregate_uncorrected: Fact<u64>,
}

/// Everything read about one GPU at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuFacts {
    pub identity: GpuIdentity,
    pub bar1: Fact<Bar1>,
    pub pcie: PcieLink,
    pub remapped_rows: Fact<RemappedRows>,
    pub retired_pages: RetiredPages,
    pub ecc: EccCounts,
    pub persistence_mode: Fact<bool>,
    /// P-state, 0 (full performance) to 15; idle GPUs sit in P8 and may run
    /// their link slower.
    pub performance_state: Fact<u32>,
}

impl GpuFacts {
    /// `(name, why)` of every fact NVML did not give.
    pub fn unavailable(&self) -> Vec<(&'static str, &str)> {
        let p = &self.pcie;
        let r = &self.retired_pages;
        let e = &self.ecc;
        [
            ("bar1", self.bar1.why()),
            ("pcie_link_gen_current", p.gen_current.why()),
            ("pcie_link_gen_max", p.gen_max.why()),
            ("pcie_link_width_current", p.width_current.why()),
            ("pcie_link_width_max", p.width_max.why()),
            ("pcie_replays", p.replays.why()),
            ("remapped_rows", self.remapped_rows.why()),
            ("retired_pages_single_bit", r.single_bit.why()),
            ("retired_pages_double_bit", r.double_bit.why()),
            ("retired_pages_pending", r.pending.why()),
            ("ecc_mode", e.enabled.why()),
            ("ecc_volatile_corrected", e.volatile_corrected.why()),
            ("ecc_volatile_uncorrected", e.volatile_uncorrected.why()),
            ("ecc_aggregate_corrected", e.aggregate_corrected.why()),
            ("ecc_aggregate_uncorrected", e.aggregate_uncorrected.why()),
            ("persistence_mode", self.persistence_mode.why()),
            ("performance_state", self.performance_state.why()),
        ]
        .into_iter()
        .filter_map(|(n, w)| w.map(|w| (n, w)))
        .collect()
    }
}

/// Whether NVML could be used at all.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum NvmlStatus {
    Available {
        driver_version: Fact<String>,
        nvml_version: Fact<String>,
    },
    /// `NVML not available (why)`: library missing, driver not loaded, ...
    Unavailable { why: String },
}

impl NvmlStatus {
    pub fn is_available(&self) -> bool {
        matches!(self, NvmlStatus::Available { .. })
    }
}

/// One reading of every GPU NVML lists.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Wall-clock time of the reading, ms since the Unix epoch.
    pub taken_unix_ms: u64,
    pub gpus: Vec<GpuFacts>,
    /// GPUs NVML counts but could not open (e.g. `GPU is lost` after Xid 79).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

impl Sample {
    pub fn gpu(&self, bus_id: &str) -> Option<&GpuFacts> {
        self.gpus.iter().find(|g| g.identity.bus_id == bus_id)
    }
}

/// Where NVML facts come from: the real library ([`super::nvml::NvmlSource`])
/// or recorded answers ([`RecordedSource`]).
pub trait FactsSource {
    fn status(&self) -> NvmlStatus;
    /// Read every GPU now (live), or the next recorded reading.
    fn sample(&mut self) -> Sample;
    /// True when readings are taken now (waiting between them means something).
    fn is_live(&self) -> bool;
}

/// The recorded form: NVML's status and one or more readings, in time order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvmlRecord {
    pub format: u32,
    pub status: NvmlStatus,
    pub samples: Vec<Sample>,
}

impl NvmlRecord {
    pub fn from_json(text: &str) -> anyhow::Result<Self> {
        let r: Self = serde_json::from_str(text).context("parsing recorded NVML answers")?;
        anyhow::ensure!(
            r.format == FORMAT,
            "recorded NVML answers have format {}, this build reads {FORMAT}",
            r.format
        );
        Ok(r)
    }

    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_json(&text).with_context(|| path.display().to_string())
    }

    pub fn to_json(&self) -> String {
        // Plain data: serialising cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    pub fn first(&self) -> Option<&Sample> {
        self.samples.first()
    }

    pub fn last(&self) -> Option<&Sample> {
        self.samples.last()
    }
}

/// Take `n` readings from `src`, `gap` apart when it is live (a recorded source
/// replays its own readings without waiting).
pub fn record(src: &mut dyn FactsSource, n: usize, gap: Duration) -> NvmlRecord {
    let status = src.status();
    let mut samples = Vec::new();
    if status.is_available() {
        for i in 0..n {
            if i > 0 && src.is_live() {
                std::thread::sleep(gap);
            }
            samples.push(src.sample());
        }
    }
    NvmlRecord {
        format: FORMAT,
        status,
        samples,
    }
}

/// Recorded NVML answers, replayed in order; the last reading repeats.
#[derive(Clone, Debug)]
pub struct RecordedSource {
    record: NvmlRecord,
    next: usize,
}

impl RecordedSource {
    pub fn new(record: NvmlRecord) -> Self {
        Self { record, next: 0 }
    }
}

impl FactsSource for RecordedSource {
    fn status(&self) -> NvmlStatus {
        self.record.status.clone()
    }

    fn sample(&mut self) -> Sample {
        let i = self.next.min(self.record.samples.len().saturating_sub(1));
        self.next += 1;
        self.record.samples.get(i).cloned().unwrap_or_default()
    }

    fn is_live(&self) -> bool {
        false
    }
}

pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recorded answers of the 2x H200 host (testdata/README.md).
    const H200X2: &str = include_str!("testdata/h200x2-nvml.json");

    #[test]
    fn recorded_nvml_h200_answers_parse_and_round_trip() {
        let r = NvmlRecord::from_json(H200X2).expect("parse");
        assert!(r.status.is_available());
        let s = r.last().expect("sample");
        let g = s.gpu("0000:00:07.0").expect("GPU1");
        assert_eq!(g.identity.index, Some(1));
        // nvidia-smi-q.txt: BAR1 Total 262144 MiB, Used 1 MiB; Replays Since Reset 2.
        assert_eq!(
            g.bar1,
            Fact::Ok(Bar1 {
                total: 262144 << 20,
                used: 1 << 20
            })
        );
        assert_eq!(g.pcie.replays, Fact::Ok(2));
        let names: Vec<&str> = g.unavailable().iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "retired_pages_single_bit",
                "retired_pages_double_bit",
                "retired_pages_pending"
            ]
        );
        let again = NvmlRecord::from_json(&r.to_json()).expect("re-parse");
        assert_eq!(again, r);
    }

    #[test]
    fn recorded_nvml_source_replays_in_order_then_repeats_the_last() {
        let mut rec = NvmlRecord::from_json(H200X2).expect("parse");
        rec.samples[1].taken_unix_ms += 5;
        let mut src = RecordedSource::new(rec.clone());
        let t: Vec<u64> = (0..3).map(|_| src.sample().taken_unix_ms).collect();
        let (a, b) = (rec.samples[0].taken_unix_ms, rec.samples[1].taken_unix_ms);
        assert_eq!(t, [a, b, b]);
        // record() takes the recorded readings without sleeping.
        let started = std::time::Instant::now();
        let again = record(
            &mut RecordedSource::new(rec.clone()),
            2,
            Duration::from_secs(30),
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(again, rec);
    }

    #[test]
    fn recorded_nvml_unavailable_status_has_no_samples_and_bad_files_say_why() {
        let mut src = RecordedSource::new(NvmlRecord {
            format: FORMAT,
            status: NvmlStatus::Unavailable {
                why: "the NVIDIA kernel driver is not loaded".into(),
            },
            samples: vec![Sample::default()],
        });
        let r = record(&mut src, 2, Duration::ZERO);
        assert!(r.samples.is_empty(), "no readings without NVML");
        let json = r.to_json();
        assert!(json.contains(r#""state": "unavailable""#), "{json}");
        let e = NvmlRecord::from_json("{").expect_err("truncated");
        assert!(e.to_string().contains("recorded NVML"), "{e}");
        let newer = json.replace(r#""format": 1"#, r#""format": 9"#);
        let e = NvmlRecord::from_json(&newer).expect_err("format");
        assert!(e.to_string().contains("format 9"), "{e}");
    }
}
