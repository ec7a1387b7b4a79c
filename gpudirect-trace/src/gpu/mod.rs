//! GPUs as their users know them: identity (index, UUID, name, bus id) and,
//! per process, who mapped memory (comm, cgroup, container).
//!
//! - [`identity`]: [`GpuIdentity`] from the driver's /proc files and sysfs (no
//!   NVML needed), `--device` resolution.
//! - [`process`]: pid -> comm, cgroup, container, cached.

pub mod identity;
pub mod process;

pub use identity::{resolve_device, GpuIdentity};
