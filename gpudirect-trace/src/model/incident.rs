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
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::IommuFault => "iommu-fault",
            Category::Xid => "xid",
            Category::Aer => "aer",
            Category::MapError => "map-error",
            Category::IommuChange => "iommu-change",
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
    /// The mapping line shown under a fault, where the history says something.
    pub fn mapping_line(&self) -> Option<String> {
        self.fault
            .as_ref()
            .and_then(|f| f.mapping.as_ref())
            .map(|m| format!("mapping: {m}"))
    }
}
