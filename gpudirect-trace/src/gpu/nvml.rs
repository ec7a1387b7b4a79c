//! The real NVML, through the `nvml-wrapper` crate. The crate opens
//! `libnvidia-ml.so.1` with dlopen when [`NvmlSource::open`] runs, so the binary
//! links and starts on hosts without NVIDIA software (checked with `ldd`: no
//! libnvidia-ml in its dependencies); there [`NvmlSource::status`] says why NVML
//! is not available and everything else goes on.

use nvml_wrapper::{
    enum_wrappers::device::{EccCounter, MemoryError, RetirementCause},
    error::{nvml_try, NvmlError},
    Device, Nvml,
};

use super::{
    facts::{
        now_unix_ms, Bar1, EccCounts, Fact, FactsSource, GpuFacts, NvmlStatus, PcieLink,
        RemappedRows, RetiredPages, Sample,
    },
    identity::{GpuIdentity, IndexSource},
};
use crate::faults::normalize_bdf;

/// NVML loaded (or why not).
pub struct NvmlSource {
    nvml: Result<Nvml, String>,
}

impl NvmlSource {
    /// Load libnvidia-ml.so.1 and initialise NVML. Never fails: a missing
    /// library or driver is kept as the reason NVML is unavailable.
    pub fn open() -> Self {
        Self {
            nvml: Nvml::init().map_err(|e| init_error(&e)),
        }
    }
}

/// Why NVML could not start, in words a user can act on.
fn init_error(e: &NvmlError) -> String {
    match e {
        // dlerror's text names the library: "libnvidia-ml.so.1: cannot open
        // shared object file: No such file or directory".
        NvmlError::LibloadingError(l) => {
            let l = l.to_string();
            if l.contains("libnvidia-ml") {
                l
            } else {
                format!("libnvidia-ml.so.1: {l}")
            }
        }
        NvmlError::DriverNotLoaded => "the NVIDIA kernel driver is not loaded".to_owned(),
        NvmlError::NoPermission => {
            "no permission to talk to the NVIDIA driver (/dev/nvidiactl)".to_owned()
        }
        other => format!("NVML init failed: {other}"),
    }
}

/// A failed call, as kept in a [`Fact`].
fn why(e: NvmlError) -> String {
    match e {
        NvmlError::NotSupported => "not supported on this GPU".to_owned(),
        NvmlError::NoPermission => "no permission".to_owned(),
        NvmlError::GpuLost => "GPU is lost (fallen off the bus?)".to_owned(),
        NvmlError::FailedToLoadSymbol(s) => {
            format!("this driver's NVML lacks the function ({s})")
        }
        other => other.to_string(),
    }
}

fn fact<T>(r: Result<T, NvmlError>) -> Fact<T> {
    match r {
        Ok(v) => Fact::Ok(v),
        Err(e) => Fact::Unavailable(why(e)),
    }
}

impl FactsSource for NvmlSource {
    fn status(&self) -> NvmlStatus {
        match &self.nvml {
            Ok(n) => NvmlStatus::Available {
                driver_version: fact(n.sys_driver_version()),
                nvml_version: fact(n.sys_nvml_version()),
            },
            Err(w) => NvmlStatus::Unavailable { why: w.clone() },
        }
    }

    fn sample(&mut self) -> Sample {
        let mut s = Sample {
            taken_unix_ms: now_unix_ms(),
            ..Default::default()
        };
        let Ok(nvml) = &self.nvml else {
            return s;
        };
        let count = match nvml.device_count() {
            Ok(c) => c,
            Err(e) => {
                s.errors.push(format!("device count: {}", why(e)));
                return s;
            }
        };
        for i in 0..count {
            match nvml.device_by_index(i) {
                Ok(d) => match read_device(nvml, &d, i) {
                    Ok(g) => s.gpus.push(g),
                    Err(e) => s.errors.push(format!("NVML device {i}: {e}")),
                },
                Err(e) => s.errors.push(format!("NVML device {i}: {}", why(e))),
            }
        }
        s
    }

    fn is_live(&self) -> bool {
        true
    }
}

fn read_device(nvml: &Nvml, d: &Device<'_>, i: u32) -> Result<GpuFacts, String> {
    let pci = d.pci_info().map_err(why)?;
    let bus_id = normalize_bdf(&pci.bus_id)
        .ok_or_else(|| format!("unparsable PCI bus id {:?}", pci.bus_id))?;
    let identity = GpuIdentity {
        index: Some(d.index().unwrap_or(i)),
        index_source: IndexSource::Nvml,
        uuid: d.uuid().ok(),
        bus_id,
        name: d.name().unwrap_or_else(|_| "NVIDIA GPU".to_owned()),
        minor: d.minor_number().ok(),
    };
    let ecc = |e, c| fact(d.total_ecc_errors(e, c));
    let retired = |c| fact(d.retired_pages(c).map(|v| v.len() as u32));
    Ok(GpuFacts {
        identity,
        bar1: fact(d.bar1_memory_info().map(|b| Bar1 {
            total: b.total,
            used: b.used,
        })),
        pcie: PcieLink {
            gen_current: fact(d.current_pcie_link_gen()),
            gen_max: fact(d.max_pcie_link_gen()),
            width_current: fact(d.current_pcie_link_width()),
            width_max: fact(d.max_pcie_link_width()),
            replays: fact(d.pcie_replay_counter().map(u64::from)),
        },
        remapped_rows: fact(remapped_rows(nvml, d)),
        retired_pages: RetiredPages {
            single_bit: retired(RetirementCause::MultipleSingleBitEccErrors),
            double_bit: retired(RetirementCause::DoubleBitEccError),
            pending: fact(d.are_pages_pending_retired()),
        },
        ecc: EccCounts {
            enabled: fact(d.is_ecc_enabled().map(|m| m.currently_enabled)),
            volatile_corrected: ecc(MemoryError::Corrected, EccCounter::Volatile),
            volatile_uncorrected: ecc(MemoryError::Uncorrected, EccCounter::Volatile),
            aggregate_corrected: ecc(MemoryError::Corrected, EccCounter::Aggregate),
            aggregate_uncorrected: ecc(MemoryError::Uncorrected, EccCounter::Aggregate),
        },
        persistence_mode: fact(d.is_in_persistent_mode()),
        performance_state: fact(d.performance_state().map(|p| p.as_c())),
    })
}

/// `nvmlDeviceGetRemappedRows`, which nvml-wrapper 0.13 binds (nvml-wrapper-sys)
/// but does not wrap.
fn remapped_rows(nvml: &Nvml, d: &Device<'_>) -> Result<RemappedRows, NvmlError> {
    let sym = nvml
        .lib()
        .nvmlDeviceGetRemappedRows
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: `sym` was resolved from the loaded libnvidia-ml with the
    // prototype nvml.h gives (device handle, four unsigned int out-pointers);
    // the handle comes from a live `Device` of this `Nvml`, and the four
    // pointers are to locals that outlive the call.
    let rc = unsafe { sym(d.handle(), &mut corr, &mut unc, &mut pending, &mut failure) };
    nvml_try(rc)?;
    Ok(RemappedRows {
        correctable: corr,
        uncorrectable: unc,
        pending: pending != 0,
        failure: failure != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On this machine and CI (no NVIDIA software) opening NVML must neither
    /// fail nor panic but say why once; on a host with the driver it must load.
    #[test]
    fn nvml_opens_or_says_why_without_nvidia_software() {
        let driver = std::path::Path::new("/proc/driver/nvidia/version").exists();
        let mut src = NvmlSource::open();
        match (src.status(), driver) {
            (NvmlStatus::Unavailable { why }, false) => {
                assert!(
                    why.contains("libnvidia-ml") || why.contains("driver"),
                    "{why}"
                )
            }
            (NvmlStatus::Available { .. }, true) => return,
            (s, _) => panic!("driver present: {driver}, NVML: {s:?}"),
        }
        let s = src.sample();
        assert!(s.gpus.is_empty() && s.errors.is_empty(), "{s:?}");
    }
}
