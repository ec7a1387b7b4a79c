pub const VENDOR_INTEL: u32 = 1;
pub const VENDOR_AMD: u32 = 2;
pub const VENDOR_SMMU: u32 = 3;
/// The unit (Intel seq_id, AMD index) could not be read.
pub const UNIT_UNKNOWN: u32 = 0xfff;
/// The submission ran inside a timed IOMMU call (iommu_map/unmap,
/// iotlb_sync) of its task, whose time already includes it.
pub const NESTED: u32 = 1 << 15;

/// Intel queued-invalidation descriptor types, `qw0 & 0xf`
/// (drivers/iommu/intel/iommu.h). A submission of no descriptor (a
/// lone wait, e.g. the page-request drain) is classed `QI_IWD`.
pub const QI_CC: u32 = 0x1;
pub const QI_IOTLB: u32 = 0x2;
pub const QI_DIOTLB: u32 = 0x3;
pub const QI_IEC: u32 = 0x4;
pub const QI_IWD: u32 = 0x5;
pub const QI_EIOTLB: u32 = 0x6;
pub const QI_PC: u32 = 0x7;
pub const QI_DEIOTLB: u32 = 0x8;
pub const QI_PGRP_RESP: u32 = 0x9;
pub const QI_PSTRM_RESP: u32 = 0xa;

/// AMD-Vi: iommu_completion_wait (the wait for every command queued on
/// one unit) and the older per-domain flush completion
/// (amd_iommu_domain_flush_complete / domain_flush_complete, unit unknown).
pub const AMD_COMPLETION_WAIT: u32 = 0;
pub const AMD_DOMAIN_FLUSH_COMPLETE: u32 = 1;

/// Tracepoints behind `kind::CACHE_TAG_FLUSH` (type bits 4..8; bits
/// 0..4 are the tag's `enum cache_tag_type`).
pub const TAG_FLUSH_RANGE: u32 = 0;
pub const TAG_FLUSH_ALL: u32 = 1;
pub const TAG_FLUSH_RANGE_NP: u32 = 2;

#[inline(always)]
pub const fn class(vendor: u32, ty: u32, unit: u32, nested: bool) -> u32 {
    (vendor & 0xff) << 24
        | (ty & 0xff) << 16
        | if nested { NESTED } else { 0 }
        | (unit & UNIT_UNKNOWN)
}

pub const fn vendor(class: u32) -> u32 {
    class >> 24
}

pub const fn ty(class: u32) -> u32 {
    (class >> 16) & 0xff
}

pub const fn unit(class: u32) -> u32 {
    class & UNIT_UNKNOWN
}

pub const fn nested(class: u32) -> bool {
    class & NESTED != 0
}
