//! Intel VT-d fault reason tables, copied from drivers/iommu/intel/dmar.c
//! (torvalds/linux, stored revision c34e9ab9a612, a 6.1x tree): `dma_remap_fault_reasons[]`,
//! `dma_remap_sm_fault_reasons[]`, `irq_remap_fault_reasons[]` and the lookup order of
//! `dmar_get_fault_reason()`. The legacy and interrupt tables have not changed since
//! 2.6.x; the scalable-mode table arrived in 5.x.

/// drivers/iommu/intel/dmar.c `dma_remap_fault_reasons[]` (0x00-0x0D).
pub const DMA_REMAP_FAULT_REASONS: [&str; 14] = [
    "Software",
    "Present bit in root entry is clear",
    "Present bit in context entry is clear",
    "Invalid context entry",
    "Access beyond MGAW",
    "PTE Write access is not set",
    "PTE Read access is not set",
    "Next page table ptr is invalid",
    "Root table address invalid",
    "Context table ptr is invalid",
    "non-zero reserved fields in RTP",
    "non-zero reserved fields in CTP",
    "non-zero reserved fields in PTE",
    "PCE for translation request specifies blocking",
];

/// drivers/iommu/intel/dmar.c `irq_remap_fault_reasons[]` (0x20-0x26).
pub const IRQ_REMAP_FAULT_REASONS: [&str; 7] = [
    "Detected reserved fields in the decoded interrupt-remapped request",
    "Interrupt index exceeded the interrupt-remapping table size",
    "Present field in the IRTE entry is clear",
    "Error accessing interrupt-remapping table pointed by IRTA_REG",
    "Detected reserved fields in the IRTE entry",
    "Blocked a compatibility format interrupt request",
    "Blocked an interrupt request due to source-id verification failure",
];

/// drivers/iommu/intel/dmar.c `dma_remap_sm_fault_reasons[]` (0x30-0x90),
/// by code. The kernel's array fills the gaps between groups with
/// "Unknown"; they are left out here, and `fault_reason` gives None for
/// them as it does for the holes of the other tables.
pub const DMA_REMAP_SM_FAULT_REASONS: &[(u32, &str)] = &[
    (0x30, "SM: Invalid Root Table Address"),
    (0x31, "SM: TTM 0 for request with PASID"),
    (0x32, "SM: TTM 0 for page group request"),
    (0x38, "SM: Error attempting to access Root Entry"),
    (0x39, "SM: Present bit in Root Entry is clear"),
    (0x3A, "SM: Non-zero reserved field set in Root Entry"),
    (0x40, "SM: Error attempting to access Context Entry"),
    (0x41, "SM: Present bit in Context Entry is clear"),
    (0x42, "SM: Non-zero reserved field set in the Context Entry"),
    (0x43, "SM: Invalid Context Entry"),
    (0x44, "SM: DTE field in Context Entry is clear"),
    (0x45, "SM: PASID Enable field in Context Entry is clear"),
    (0x46, "SM: PASID is larger than the max in Context Entry"),
    (0x47, "SM: PRE field in Context-Entry is clear"),
    (0x48, "SM: RID_PASID field error in Context-Entry"),
    (
        0x50,
        "SM: Error attempting to access the PASID Directory Entry",
    ),
    (0x51, "SM: Present bit in Directory Entry is clear"),
    (
        0x52,
        "SM: Non-zero reserved field set in PASID Directory Entry",
    ),
    (0x58, "SM: Error attempting to access PASID Table Entry"),
    (0x59, "SM: Present bit in PASID Table Entry is clear"),
    (0x5A, "SM: Non-zero reserved field set in PASID Table Entry"),
    (0x5B, "SM: Invalid Scalable-Mode PASID Table Entry"),
    (0x5C, "SM: ERE field is clear in PASID Table Entry"),
    (0x5D, "SM: SRE field is clear in PASID Table Entry"),
    (
        0x70,
        "SM: Error attempting to access first-level paging entry",
    ),
    (0x71, "SM: Present bit in first-level paging entry is clear"),
    (
        0x72,
        "SM: Non-zero reserved field set in first-level paging entry",
    ),
    (0x73, "SM: Error attempting to access FL-PML4 entry"),
    (
        0x74,
        "SM: First-level entry address beyond MGAW in Nested translation",
    ),
    (
        0x75,
        "SM: Read permission error in FL-PML4 entry in Nested translation",
    ),
    (
        0x76,
        "SM: Read permission error in first-level paging entry in Nested translation",
    ),
    (
        0x77,
        "SM: Write permission error in first-level paging entry in Nested translation",
    ),
    (
        0x78,
        "SM: Error attempting to access second-level paging entry",
    ),
    (
        0x79,
        "SM: Read/Write permission error in second-level paging entry",
    ),
    (
        0x7A,
        "SM: Non-zero reserved field set in second-level paging entry",
    ),
    (0x7B, "SM: Invalid second-level page table pointer"),
    (
        0x7C,
        "SM: A/D bit update needed in second-level entry when set up in no snoop",
    ),
    (
        0x80,
        "SM: Address in first-level translation is not canonical",
    ),
    (
        0x81,
        "SM: U/S set 0 for first-level translation with user privilege",
    ),
    (
        0x82,
        "SM: No execute permission for request with PASID and ER=1",
    ),
    (0x83, "SM: Address beyond the DMA hardware max"),
    (0x84, "SM: Second-level entry address beyond the max"),
    (0x85, "SM: No write permission for Write/AtomicOp request"),
    (0x86, "SM: No read permission for Read/AtomicOp request"),
    (0x87, "SM: Invalid address-interrupt address"),
    (
        0x90,
        "SM: A/D bit update needed in first-level entry when set up in no snoop",
    ),
];

/// Kind of fault per `dmar_get_fault_reason()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultType {
    DmaRemap,
    IntrRemap,
    Unknown,
}

/// Same lookup order as `dmar_get_fault_reason()`. Holes ("Unknown") and
/// codes outside every table give `None`.
pub fn fault_reason(code: u32) -> Option<(&'static str, FaultType)> {
    let idx = |base: u32| (code - base) as usize;
    let hit = if code >= 0x20 && idx(0x20) < IRQ_REMAP_FAULT_REASONS.len() {
        (IRQ_REMAP_FAULT_REASONS[idx(0x20)], FaultType::IntrRemap)
    } else if (0x30..=0x90).contains(&code) {
        let (_, reason) = DMA_REMAP_SM_FAULT_REASONS
            .iter()
            .find(|(c, _)| *c == code)?;
        (*reason, FaultType::DmaRemap)
    } else if (code as usize) < DMA_REMAP_FAULT_REASONS.len() {
        (DMA_REMAP_FAULT_REASONS[code as usize], FaultType::DmaRemap)
    } else {
        return None;
    };
    (hit.0 != "Unknown").then_some(hit)
}
