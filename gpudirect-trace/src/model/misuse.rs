//! DMA-API misuse findings: the kernel's dma-debug checks
//! (kernel/dma/debug.c), made from the trace on kernels built without
//! CONFIG_DMA_API_DEBUG. Each finding names its check in dma-debug's own
//! wording where dma-debug has one, the device and its driver, and both
//! calls: the map and the call that misused it.

use serde::{Deserialize, Serialize};

use super::{clock::Stamp, process::Process};

/// The checks, one per kind of misuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Check {
    /// An unmap or free of a handle the trace saw mapped and then unmapped.
    DoubleUnmap,
    /// An unmap with a size other than its map's.
    UnmapSize,
    /// An unmap with a direction other than its map's.
    UnmapDirection,
    /// An unmap through another API class (page, sg, resource, coherent).
    UnmapClass,
    /// dma_unmap_sg with an entry count other than dma_map_sg's.
    SgUnmapCount,
    /// A sync of a handle the trace saw unmapped.
    SyncUnmapped,
    /// A sync reaching past the end of its mapping.
    SyncOutside,
    /// A sync in a direction its mapping does not allow.
    SyncDirection,
    /// dma_sync_sg_* with an entry count other than dma_map_sg's.
    SyncSgCount,
    /// Two FROM_DEVICE or BIDIRECTIONAL mappings sharing a cacheline.
    CachelineOverlap,
    /// Mappings still outstanding when the device's driver let it go.
    LeakAtUnbind,
    /// A map that returned DMA_MAPPING_ERROR (or a failed sg map or
    /// coherent allocation), counted per device and caller.
    MapFailure,
    /// A mapping of the kernel's own code or read-only data.
    KernelImage,
    /// An IOVA-API link, unlink or sync past the end of its state's IOVA
    /// allocation (the kernel does not check it).
    IovaOutside,
    /// dma_iova_unlink of IOVA space that is not linked.
    IovaUnlinkUnlinked,
    /// dma_iova_sync of IOVA space that is not linked.
    IovaSyncUnlinked,
    /// dma_iova_free (or dma_iova_destroy) leaving links behind.
    IovaFreeLinked,
    /// An IOVA state freed twice.
    IovaDoubleFree,
}

impl Check {
    pub const ALL: [Check; 18] = [
        Check::DoubleUnmap,
        Check::UnmapSize,
        Check::UnmapDirection,
        Check::UnmapClass,
        Check::SgUnmapCount,
        Check::SyncUnmapped,
        Check::SyncOutside,
        Check::SyncDirection,
        Check::SyncSgCount,
        Check::CachelineOverlap,
        Check::LeakAtUnbind,
        Check::MapFailure,
        Check::KernelImage,
        Check::IovaOutside,
        Check::IovaUnlinkUnlinked,
        Check::IovaSyncUnlinked,
        Check::IovaFreeLinked,
        Check::IovaDoubleFree,
    ];

    /// The name used in JSON, metrics labels and `--trigger misuse:NAME`.
    pub fn as_str(self) -> &'static str {
        match self {
            Check::DoubleUnmap => "double-unmap",
            Check::UnmapSize => "unmap-size",
            Check::UnmapDirection => "unmap-direction",
            Check::UnmapClass => "unmap-class",
            Check::SgUnmapCount => "sg-unmap-count",
            Check::SyncUnmapped => "sync-unmapped",
            Check::SyncOutside => "sync-outside",
            Check::SyncDirection => "sync-direction",
            Check::SyncSgCount => "sync-sg-count",
            Check::CachelineOverlap => "cacheline-overlap",
            Check::LeakAtUnbind => "leak-at-unbind",
            Check::MapFailure => "map-failure",
            Check::KernelImage => "kernel-image",
            Check::IovaOutside => "iova-outside",
            Check::IovaUnlinkUnlinked => "iova-unlink-unlinked",
            Check::IovaSyncUnlinked => "iova-sync-unlinked",
            Check::IovaFreeLinked => "iova-free-linked",
            Check::IovaDoubleFree => "iova-double-free",
        }
    }

    pub fn parse(s: &str) -> Option<Check> {
        Check::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// dma-debug's message for the misuse (6.1 to 6.12 wording), without
    /// its bracketed values; None where dma-debug has no such check.
    pub fn kernel_wording(self) -> Option<&'static str> {
        Some(match self {
            Check::DoubleUnmap => "device driver tries to free DMA memory it has not allocated",
            Check::UnmapSize => "device driver frees DMA memory with different size",
            Check::UnmapDirection => "device driver frees DMA memory with different direction",
            Check::UnmapClass => "device driver frees DMA memory with wrong function",
            Check::SgUnmapCount => "device driver frees DMA sg list with different entry count",
            Check::SyncUnmapped => "device driver tries to sync DMA memory it has not allocated",
            Check::SyncOutside => "device driver syncs DMA memory outside allocated range",
            Check::SyncDirection => "device driver syncs DMA memory with different direction",
            Check::SyncSgCount => "device driver syncs DMA sg list with different entry count",
            Check::CachelineOverlap => {
                "cacheline tracking EEXIST, overlapping mappings aren't supported"
            }
            Check::LeakAtUnbind => {
                "device driver has pending DMA allocations while released from device"
            }
            Check::MapFailure
            | Check::IovaOutside
            | Check::IovaUnlinkUnlinked
            | Check::IovaSyncUnlinked
            | Check::IovaFreeLinked
            | Check::IovaDoubleFree => return None,
            Check::KernelImage => "device driver maps memory from kernel text or rodata",
        })
    }

    /// What the finding says where dma-debug has no check of its own (the
    /// IOVA API came after it), in its manner.
    pub fn own_wording(self) -> Option<&'static str> {
        Some(match self {
            Check::IovaOutside => "device driver links IOVA space outside its allocation",
            Check::IovaUnlinkUnlinked => "device driver unlinks IOVA space it has not linked",
            Check::IovaSyncUnlinked => "device driver syncs IOVA space it has not linked",
            Check::IovaFreeLinked => "device driver frees IOVA space that is still linked",
            Check::IovaDoubleFree => "device driver frees an IOVA state twice",
            _ => return None,
        })
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// dma-debug's classes of mapping: what must unmap what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApiClass {
    /// dma_map_single / dma_map_page (and dma_map_phys).
    Single,
    ScatterGather,
    /// dma_map_resource (MMIO, e.g. a peer's BAR).
    Resource,
    /// dma_alloc_coherent / dma_alloc_attrs.
    Coherent,
    /// The IOVA API (dma_iova_try_alloc, dma_iova_link, ...: 6.17+).
    Iova,
}

impl ApiClass {
    /// dma-debug's `type2name`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiClass::Single => "single",
            ApiClass::ScatterGather => "scatter-gather",
            ApiClass::Resource => "resource",
            ApiClass::Coherent => "coherent",
            ApiClass::Iova => "iova",
        }
    }
}

/// One DMA-API call as a finding shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Call {
    #[serde(flatten)]
    pub at: Stamp,
    /// dma_map_page, dma_unmap_sg, dma_sync_single_for_cpu, ...
    pub api: String,
    pub class: ApiClass,
    /// The task current when the call was traced (a DMA-API call's caller,
    /// or whatever an interrupt interrupted).
    pub process: Option<Process>,
    pub tid: u32,
    #[serde(
        serialize_with = "super::fault::ser_hex_opt",
        deserialize_with = "super::fault::de_hex_opt",
        default
    )]
    pub address: Option<u64>,
    pub size: u64,
    pub direction: String,
    /// Scatterlist entries handed to the call (sg calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<u32>,
    /// The kernel stack (`--stacks`), innermost frame first, symbolized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stack: Vec<String>,
    /// The stack's id in the trace (`STACKS` map / block), for `stack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_id: Option<u32>,
}

impl std::fmt::Display for Call {
    /// `dma_map_single 256 B DMA_TO_DEVICE at 6.459000s by pid 12 (insmod)`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ", self.api)?;
        if let Some(a) = self.address {
            write!(f, "{a:#x} ")?;
        }
        write!(f, "{} B {}", self.size, self.direction)?;
        if let Some(n) = self.entries {
            write!(f, " {n} entries")?;
        }
        write!(f, " at {}", self.at)?;
        if let Some(p) = &self.process {
            write!(f, " by {p}")?;
        }
        Ok(())
    }
}

/// A misuse the trace proves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Misuse {
    pub check: Check,
    pub device: String,
    /// The device's driver when the finding was made, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// The call that made the mapping the offending call misused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map: Option<Call>,
    /// The offending call (for a leak: the map still outstanding).
    pub call: Call,
    /// The values dma-debug prints in brackets, e.g. `[map size=256 bytes]
    /// [unmap size=128 bytes]`.
    pub detail: String,
    /// Calls this finding stands for: 1, or for map failures and leaks the
    /// number from the same caller (device and stack) or unbind.
    pub count: u64,
}

impl Misuse {
    /// The one line every view prints.
    pub fn text(&self) -> String {
        let words = self
            .check
            .kernel_wording()
            .or(self.check.own_wording())
            .unwrap_or(self.check.as_str());
        let n = if self.count > 1 {
            format!(" ({} calls)", self.count)
        } else {
            String::new()
        };
        format!("{}: {words} {}{n}", self.check, self.detail)
    }

    /// The lines under the finding: both calls and their stacks.
    pub fn call_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (what, c) in [("mapped", self.map.as_ref()), ("misused", Some(&self.call))] {
            let Some(c) = c else { continue };
            out.push(format!("{what}: {c}"));
            out.extend(c.stack.iter().map(|s| format!("    {s}")));
        }
        if let Some(d) = &self.driver {
            out.push(format!("driver: {d}"));
        }
        out
    }
}

/// A range of the kernel's own image in physical memory (/proc/iomem),
/// inclusive at both ends as /proc/iomem prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRange {
    /// "Kernel code" or "Kernel rodata".
    pub name: String,
    pub start: u64,
    pub end: u64,
}

impl ImageRange {
    /// `[phys, phys + len)` shares a byte with the range.
    pub fn overlaps(&self, phys: u64, len: u64) -> bool {
        len > 0 && phys <= self.end && phys.saturating_add(len - 1) >= self.start
    }
}

/// How a trace was checked (`--check`), kept in its header so a report
/// checks the same way.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckSetup {
    /// The kernel image's ranges when the trace started.
    pub kernel_image: Vec<ImageRange>,
    /// Kernel stacks were taken for DMA-API calls (`--stacks`).
    #[serde(default)]
    pub stacks: bool,
}

/// A kernel stack of the trace, symbolized when it was taken (STACKS
/// blocks in trace files).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackFrames {
    pub id: u32,
    /// Innermost first: `function+0xoff [module]`, or an address.
    pub frames: Vec<String>,
}
