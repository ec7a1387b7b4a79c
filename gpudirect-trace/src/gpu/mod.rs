//! GPUs as their users know them: identity (index, UUID, name, bus id), NVML
//! facts (BAR1, PCIe link and replays, row remapping, retired pages, ECC,
//! persistence mode) and, per process, who mapped memory (comm, cgroup,
//! container).
//!
//! - [`identity`]: [`GpuIdentity`] from the driver's /proc files and sysfs (no
//!   NVML needed), `--device` resolution.
//! - [`facts`]: [`GpuFacts`], the [`FactsSource`] trait, recorded answers.
//! - [`nvml`]: the real NVML ([`NvmlSource`]), loaded at run time.
//! - [`process`]: pid -> comm, cgroup, container, cached.

pub mod cgroup_index;
pub mod facts;
pub mod identity;
pub mod nvml;
pub mod process;

pub use facts::{Fact, FactsSource, GpuFacts, NvmlRecord, NvmlStatus, RecordedSource, Sample};
pub use identity::{resolve_device, GpuIdentity};
pub use nvml::NvmlSource;
