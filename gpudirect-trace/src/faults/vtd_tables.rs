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

/// drivers/iommu/intel/dmar.c `dma_remap_sm_fault_reasons[]` (0x30-0x90);
/// "Unknown" holes kept so that the index is `code - 0x30`.
pub const DMA_REMAP_SM_FAULT_REASONS: [&str; 0x61] = [
    "SM: Invalid Root Table Address",
    "SM: TTM 0 for request with PASID",
    "SM: TTM 0 for page group request",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown", // 0x33-0x37
    "SM: Error attempting to access Root Entry",
    "SM: Present bit in Root Entry is clear",
    "SM: Non-zero reserved field set in Root Entry",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown", // 0x3B-0x3F
    "SM: Error attempting to access Context Entry",
    "SM: Present bit in Context Entry is clear",
    "SM: Non-zero reserved field set in the Context Entry",
    "SM: Invalid Context Entry",
    "SM: DTE field in Context Entry is clear",
    "SM: PASID Enable field in Context Entry is clear",
    "SM: PASID is larger than the max in Context Entry",
    "SM: PRE field in Context-Entry is clear",
    "SM: RID_PASID field error in Context-Entry",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown", // 0x49-0x4F
    "SM: Error attempting to access the PASID Directory Entry",
    "SM: Present bit in Directory Entry is clear",
    "SM: Non-zero reserved field set in PASID Directory Entry",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown", // 0x53-0x57
    "SM: Error attempting to access PASID Table Entry",
    "SM: Present bit in PASID Table Entry is clear",
    "SM: Non-zero reserved field set in PASID Table Entry",
    "SM: Invalid Scalable-Mode PASID Table Entry",
    "SM: ERE field is clear in PASID Table Entry",
    "SM: SRE field is clear in PASID Table Entry",
    "Unknown",
    "Unknown", // 0x5E-0x5F
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown", // 0x60-0x67
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown", // 0x68-0x6F
    "SM: Error attempting to access first-level paging entry",
    "SM: Present bit in first-level paging entry is clear",
    "SM: Non-zero reserved field set in first-level paging entry",
    "SM: Error attempting to access FL-PML4 entry",
    "SM: First-level entry address beyond MGAW in Nested translation",
    "SM: Read permission error in FL-PML4 entry in Nested translation",
    "SM: Read permission error in first-level paging entry in Nested translation",
    "SM: Write permission error in first-level paging entry in Nested translation",
    "SM: Error attempting to access second-level paging entry",
    "SM: Read/Write permission error in second-level paging entry",
    "SM: Non-zero reserved field set in second-level paging entry",
    "SM: Invalid second-level page table pointer",
    "SM: A/D bit update needed in second-level entry when set up in no snoop",
    "Unknown",
    "Unknown",
    "Unknown", // 0x7D-0x7F
    "SM: Address in first-level translation is not canonical",
    "SM: U/S set 0 for first-level translation with user privilege",
    "SM: No execute permission for request with PASID and ER=1",
    "SM: Address beyond the DMA hardware max",
    "SM: Second-level entry address beyond the max",
    "SM: No write permission for Write/AtomicOp request",
    "SM: No read permission for Read/AtomicOp request",
    "SM: Invalid address-interrupt address",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown",
    "Unknown", // 0x88-0x8F
    "SM: A/D bit update needed in first-level entry when set up in no snoop",
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
    } else if code >= 0x30 && idx(0x30) < DMA_REMAP_SM_FAULT_REASONS.len() {
        (DMA_REMAP_SM_FAULT_REASONS[idx(0x30)], FaultType::DmaRemap)
    } else if (code as usize) < DMA_REMAP_FAULT_REASONS.len() {
        (DMA_REMAP_FAULT_REASONS[code as usize], FaultType::DmaRemap)
    } else {
        return None;
    };
    (hit.0 != "Unknown").then_some(hit)
}
