//! A decoded fault: IOMMU translation faults (VT-d, AMD-Vi, SMMU,
//! iommu:io_page_fault), NVIDIA Xids and PCIe AER errors, whichever channel
//! reported them (the kernel log, a tracepoint, or both).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{mapping::MappingState, process::Process};

/// Which subsystem reported the fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Source {
    #[serde(rename = "vtd")]
    Vtd,
    #[serde(rename = "amd-vi")]
    AmdVi,
    #[serde(rename = "smmu")]
    Smmu,
    #[serde(rename = "virtio-iommu")]
    VirtioIommu,
    #[serde(rename = "iommu-tracepoint")]
    IommuTracepoint,
    #[serde(rename = "nvidia-xid")]
    NvidiaXid,
    #[serde(rename = "aer")]
    Aer,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Vtd => "vtd",
            Source::AmdVi => "amd-vi",
            Source::Smmu => "smmu",
            Source::VirtioIommu => "virtio-iommu",
            Source::IommuTracepoint => "iommu-tracepoint",
            Source::NvidiaXid => "nvidia-xid",
            Source::Aer => "aer",
        }
    }
}

/// The kind of access that faulted, where the report says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
    Atomic,
    Prefetch,
    Interrupt,
    Exec,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Atomic => "atomic",
            Access::Prefetch => "prefetch",
            Access::Interrupt => "interrupt",
            Access::Exec => "exec",
        }
    }
}

/// Where a fault was seen. One physical event often reaches both: the
/// NVIDIA driver fires nvidia:nvidia_dev_xid and prints its Xid line; AMD-Vi
/// calls report_iommu_fault (iommu:io_page_fault) and logs the event; AER
/// fires ras:aer_event and prints `AER:` lines. The ledger merges them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Channel {
    KernelLog,
    Tracepoint,
}

/// One decoded fault. `address` is a `"0x…"` string in JSON so that 64-bit
/// values survive readers that use doubles.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    pub source: Source,
    /// Full PCI id `SSSS:BB:DD.F` (VT-d and old AMD-Vi lines print no PCI
    /// segment: `0000` is assumed there, see `device_raw`), or the device's
    /// name for non-PCI devices.
    pub device: Option<String>,
    /// The device as the report printed it.
    #[serde(default)]
    pub device_raw: Option<String>,
    #[serde(
        serialize_with = "ser_hex_opt",
        deserialize_with = "de_hex_opt",
        default
    )]
    pub address: Option<u64>,
    /// Numeric cause: VT-d fault reason, AMD-Vi event type, SMMU event id,
    /// Xid number, AER status register.
    #[serde(default)]
    pub reason_code: Option<u32>,
    /// Short cause text, from the kernel/driver tables.
    pub reason: String,
    #[serde(default)]
    pub access: Option<Access>,
    #[serde(default)]
    pub pasid: Option<u32>,
    /// The process, from the source that knows (see `model::process`).
    #[serde(default)]
    pub process: Option<Process>,
    /// The address in the device's mapping history at fault time (live and
    /// replay; `explain` has no history).
    #[serde(default)]
    pub mapping: Option<MappingState>,
    /// Kernel time of the report (CLOCK_MONOTONIC for tracepoints, the printk
    /// clock for log lines), nanoseconds.
    #[serde(default)]
    pub timestamp_ns: Option<u64>,
    /// Seconds since the start of the trace (set where there is a trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_s: Option<f64>,
    /// Wall-clock time: as the log printed it (`dmesg -T`, journalctl), or
    /// from the trace's start time.
    #[serde(default)]
    pub wall_time: Option<String>,
    /// NVIDIA Xid number (source nvidia-xid).
    #[serde(default)]
    pub xid: Option<u32>,
    /// Decoded flag bits / error bit names (AMD-Vi flags, AER bits, SMMU FSR).
    #[serde(default)]
    pub flags: Vec<String>,
    /// How many faults this object stands for (more than 1 for rate-limited
    /// reports that only give a count).
    #[serde(default = "one")]
    pub count: u64,
    /// What it means and what to check first.
    #[serde(default)]
    pub explanation: String,
    /// The input line(s) or tracepoint message this was decoded from.
    #[serde(default)]
    pub raw: String,
    /// Recognised but not fully decoded (unknown code, missing field,
    /// details suppressed by rate limiting).
    #[serde(default)]
    pub partial: bool,
    /// The channels that reported it (both, once merged).
    #[serde(default)]
    pub seen_in: Vec<Channel>,
}

fn one() -> u64 {
    1
}

impl Fault {
    pub fn new(source: Source, reason: impl Into<String>, raw: &str) -> Self {
        Fault {
            source,
            device: None,
            device_raw: None,
            address: None,
            reason_code: None,
            reason: reason.into(),
            access: None,
            pasid: None,
            process: None,
            mapping: None,
            timestamp_ns: None,
            t_s: None,
            wall_time: None,
            xid: None,
            flags: Vec::new(),
            count: 1,
            explanation: String::new(),
            raw: raw.to_string(),
            partial: false,
            seen_in: Vec::new(),
        }
    }

    /// Set `device_raw` and the normalised `device` from text as printed.
    pub fn set_device(&mut self, printed: &str) {
        let printed = printed.trim();
        self.device = super::pci::normalize_bdf(printed);
        self.device_raw = Some(printed.to_string());
    }

    /// What kind of incident this fault is.
    pub fn category(&self) -> &'static str {
        match self.source {
            Source::NvidiaXid => "xid",
            Source::Aer => "aer",
            _ => "iommu-fault",
        }
    }
}

impl std::fmt::Display for Fault {
    /// `vtd 0000:00:03.0 at 0x200000: PTE Write access is not set (write)`:
    /// the one line every view prints for a fault (sanitised by the caller
    /// where it reaches a terminal).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}",
            self.source.as_str(),
            self.device.as_deref().unwrap_or("-")
        )?;
        if let Some(a) = self.address {
            write!(f, " at {a:#x}")?;
        }
        write!(f, ": {}", self.reason)?;
        if let Some(a) = self.access {
            write!(f, " ({})", a.as_str())?;
        }
        if self.count > 1 {
            write!(f, " x{}", self.count)?;
        }
        if let Some(p) = &self.process {
            write!(f, ", {p}")?;
        }
        Ok(())
    }
}

pub(super) fn ser_hex_opt<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(x) => s.serialize_str(&format!("{x:#x}")),
        None => s.serialize_none(),
    }
}

pub(super) fn de_hex_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Hex {
        Text(String),
        Number(u64),
    }
    Ok(match Option::<Hex>::deserialize(d)? {
        None => None,
        Some(Hex::Number(n)) => Some(n),
        Some(Hex::Text(t)) => {
            let digits = t.trim_start_matches("0x").trim_start_matches("0X");
            Some(u64::from_str_radix(digits, 16).map_err(serde::de::Error::custom)?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::process::ProcessOrigin;

    #[test]
    fn a_fault_round_trips_through_json_with_a_hex_address() {
        let mut f = Fault::new(Source::Vtd, "PTE Write access is not set", "raw");
        f.address = Some(0x123000);
        f.process = Some(Process::reported(619, Some("xid".into())));
        let v = serde_json::to_value(&f).expect("serialize");
        assert_eq!(v["address"], "0x123000");
        assert_eq!(v["source"], "vtd");
        assert_eq!(v["process"]["from"], "reported");
        let back: Fault = serde_json::from_value(v).expect("deserialize");
        assert_eq!(back, f);
        assert_eq!(
            back.process.as_ref().map(|p| p.from),
            Some(ProcessOrigin::Reported)
        );
    }

    #[test]
    fn one_line_names_source_device_address_reason_and_process() {
        let mut f = Fault::new(Source::NvidiaXid, "Xid 31: MMU Fault", "");
        f.device = Some("0000:00:06.0".into());
        f.process = Some(Process::reported(619, Some("xid".into())));
        assert_eq!(
            f.to_string(),
            "nvidia-xid 0000:00:06.0: Xid 31: MMU Fault, pid 619 (xid)"
        );
    }
}
