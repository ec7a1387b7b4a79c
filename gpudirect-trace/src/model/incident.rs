//! Incidents: the rare events a reader looks at one by one. Faults (IOMMU
//! translation faults, NVIDIA Xids, PCIe AER errors), mapping failures and
//! IOMMU group/domain changes, each shown once, with one clock.

use serde::{Deserialize, Serialize};

use super::{clock::Stamp, fault::Fault, process::Process};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    /// VT-d, AMD-Vi, SMMU, virtio-iommu and iommu:io_page_fault faults.
    IommuFault,
    Xid,
    Aer,
    /// A DMA-API mapping that failed (DMA_MAPPING_ERROR, dma_map_sg errors).
    MapError,
    /// A device joined or left an IOMMU group, or its domain changed.
    IommuChange,
    /// A DMA-API misuse the trace proves (`--check`).
    Misuse,
    /// A device's PCIe link went down or up, trained below its maximum or
    /// back, retrained; or the device left or joined the bus.
    Link,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::IommuFault => "iommu-fault",
            Category::Xid => "xid",
            Category::Aer => "aer",
            Category::MapError => "map-error",
            Category::IommuChange => "iommu-change",
            Category::Misuse => "misuse",
            Category::Link => "pcie-link",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "kebab-case")]
pub enum IommuChange {
    GroupAdd { group: u32 },
    GroupRemove { group: u32 },
    DomainAttach,
    DomainDetach,
}

impl std::fmt::Display for IommuChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IommuChange::GroupAdd { group } => write!(f, "added to IOMMU group {group}"),
            IommuChange::GroupRemove { group } => write!(f, "removed from IOMMU group {group}"),
            IommuChange::DomainAttach => f.write_str("attached to an IOMMU domain"),
            IommuChange::DomainDetach => f.write_str("detached from its IOMMU domain"),
        }
    }
}

/// A failed DMA-API mapping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MapError {
    /// dma_map_sg, dma_map_page, ...
    pub api: String,
    /// The error the kernel returned (negative errno), where it says.
    pub errno: Option<i64>,
    /// Scatterlist entries asked for (sg maps) or bytes (page maps).
    pub entries: Option<u64>,
    pub bytes: Option<u64>,
    pub direction: String,
}

/// A process's DMA activity on a device in a window before a moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    pub window_s: u64,
    pub maps: u64,
    pub unmaps: u64,
    pub bytes_mapped: u64,
    /// Outstanding at that moment (not only the window's).
    pub outstanding_mappings: u64,
    pub outstanding_bytes: u64,
}

/// What surrounded an incident: its process's recent DMA on the device, and
/// the GPU's state (NVML) at the time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<Activity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bar1_used: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bar1_total: Option<u64>,
    /// PCIe replays since the trace started (they climb before an Xid 79).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_replays_since_start: Option<u64>,
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::output::bytes;
        let mut parts = Vec::new();
        if let Some(a) = &self.activity {
            parts.push(format!(
                "its DMA on this device in the {} s before: {} maps, {} unmaps, {} mapped, \
                 {} outstanding in {} mappings",
                a.window_s,
                a.maps,
                a.unmaps,
                bytes(a.bytes_mapped),
                bytes(a.outstanding_bytes),
                a.outstanding_mappings
            ));
        }
        if let (Some(u), Some(t)) = (self.bar1_used, self.bar1_total) {
            parts.push(format!("BAR1 {} of {} used", bytes(u), bytes(t)));
        }
        if let Some(r) = self.pcie_replays_since_start {
            parts.push(format!("PCIe replays +{r} since the start"));
        }
        f.write_str(&parts.join("; "))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Incident {
    /// Position in the trace (1, 2, ...): the same in live and in replay.
    pub id: u64,
    #[serde(flatten)]
    pub at: Stamp,
    pub category: Category,
    pub device: String,
    pub process: Option<Process>,
    #[serde(
        serialize_with = "super::fault::ser_hex_opt",
        deserialize_with = "super::fault::de_hex_opt",
        default
    )]
    pub address: Option<u64>,
    /// The one-line description every view prints.
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<IommuChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map_error: Option<MapError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub misuse: Option<super::misuse::Misuse>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<super::pci::LinkChange>,
    /// What surrounded it (Xids: the process's DMA and the GPU's state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Context>,
}

impl std::fmt::Display for Incident {
    /// `   6.459000s  xid           0000:00:06.0   pid 619 (xid)  Xid 31: ...`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>12}  {:<12}  {:<14}",
            self.at.to_string(),
            self.category.as_str(),
            self.device
        )?;
        if let Some(p) = &self.process {
            write!(f, "  {p}")?;
        }
        if let Some(a) = self.address {
            write!(f, "  {a:#x}")?;
        }
        write!(f, "  {}", self.text)
    }
}

impl Incident {
    /// The context line shown under an incident, where there is one.
    pub fn context_line(&self) -> Option<String> {
        self.context
            .as_ref()
            .map(|c| c.to_string())
            .filter(|s| !s.is_empty())
            .map(|s| format!("context: {s}"))
    }

    /// The lines under a misuse finding: both calls, their stacks, the
    /// driver.
    pub fn misuse_lines(&self) -> Vec<String> {
        self.misuse
            .as_ref()
            .map(|m| m.call_lines())
            .unwrap_or_default()
    }

    /// The mapping line shown under a fault, where the history says something.
    pub fn mapping_line(&self) -> Option<String> {
        self.fault
            .as_ref()
            .and_then(|f| f.mapping.as_ref())
            .map(|m| format!("mapping: {m}"))
    }
}
