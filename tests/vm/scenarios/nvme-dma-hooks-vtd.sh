#!/bin/sh
# nvme-dma-hooks under VT-d: the DMA-API level from the hooks, and on 6.1
# the IOMMU level nested under it (iommu:map/unmap attributed through the
# enclosing DMA-API call), as the dma:* tracepoints give it on 6.12. 5.10's
# intel-iommu maps without iommu_map() (no iommu:map events), so there the
# DMA level (its addresses are IOVAs) is the whole story.
# gdt-vm: kernels=5.10,6.1 devices=nvme iommu=intel timeout=400 check=nvme-dma-hooks-vtd
exec sh /scenarios/nvme-dma-hooks.sh
