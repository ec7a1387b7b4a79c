//! What the mapping history says about a faulting address.

use serde::{Deserialize, Serialize};

use super::process::Process;
use crate::output::ns;

/// The level of the mapping that covered (or last covered) an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MapLevel {
    /// Streaming DMA API (dma_map_page/phys/resource/sg).
    DmaApi,
    /// IOMMU page tables (iommu_map: DMA-API internals, VFIO, iommufd).
    Iommu,
    /// Coherent allocations (dma_alloc_*).
    Coherent,
}

impl MapLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            MapLevel::DmaApi => "DMA-API",
            MapLevel::Iommu => "IOMMU",
            MapLevel::Coherent => "coherent",
        }
    }
}

/// The state of the faulting address in this device's mapping history, at
/// the time of the fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum MappingState {
    /// Inside a live mapping: the access itself was not permitted
    /// (direction, permission), or the IOMMU's view disagrees.
    Mapped {
        level: MapLevel,
        /// How long before the fault the mapping was made.
        age_ns: u64,
        by: Option<Process>,
    },
    /// Inside a mapping that was unmapped before the fault: DMA after unmap.
    Unmapped {
        level: MapLevel,
        /// How long before the fault it was unmapped.
        before_ns: u64,
        by: Option<Process>,
    },
    /// No mapping of this trace covered it.
    NeverMapped {
        /// Whether the trace saw any DMA activity of this device at all.
        device_seen: bool,
    },
    /// The history cannot say (no address, no time, or no history kept).
    Unknown { why: String },
}

impl MappingState {
    /// A short machine-friendly name: mapped, unmapped, never-mapped, unknown.
    pub fn name(&self) -> &'static str {
        match self {
            MappingState::Mapped { .. } => "mapped",
            MappingState::Unmapped { .. } => "unmapped",
            MappingState::NeverMapped { .. } => "never-mapped",
            MappingState::Unknown { .. } => "unknown",
        }
    }
}

impl std::fmt::Display for MappingState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let by = |p: &Option<Process>| p.as_ref().map(|p| format!(" by {p}")).unwrap_or_default();
        match self {
            MappingState::Mapped {
                level,
                age_ns,
                by: who,
            } => write!(
                f,
                "mapped: inside a live {} mapping of this device (made {} before the fault{}), \
                 so the access itself was not permitted (direction/permission)",
                level.as_str(),
                ns(*age_ns),
                by(who)
            ),
            MappingState::Unmapped {
                level,
                before_ns,
                by: who,
            } => write!(
                f,
                "unmapped {} before the fault{} ({} mapping): DMA after unmap",
                ns(*before_ns),
                by(who),
                level.as_str()
            ),
            MappingState::NeverMapped { device_seen: false } => {
                f.write_str("never mapped in this trace (no DMA activity seen for this device)")
            }
            MappingState::NeverMapped { device_seen: true } => {
                f.write_str("never mapped in this trace")
            }
            MappingState::Unknown { why } => write!(f, "unknown: {why}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_typed_in_json_and_read_in_text() {
        let s = MappingState::Unmapped {
            level: MapLevel::Iommu,
            before_ns: 106_800_000,
            by: Some(Process::current_task(187)),
        };
        let v = serde_json::to_value(&s).expect("json");
        assert_eq!(v["state"], "unmapped");
        assert_eq!(v["before_ns"], 106_800_000);
        assert_eq!(v["by"]["pid"], 187);
        assert_eq!(v["by"]["from"], "current-task");
        let back: MappingState = serde_json::from_value(v).expect("round trip");
        assert_eq!(back, s);
        assert_eq!(
            s.to_string(),
            "unmapped 106.8ms before the fault by pid 187 [current task] (IOMMU mapping): DMA after unmap"
        );
    }
}
