#!/bin/sh
# Lazy invalidation (flush queue): qemu's VT-d WITHOUT caching mode, booted
# with iommu.strict=0 (--iommu intel-lazy; with caching mode the guest forces
# strict: "IOMMU batching disallowed due to virtualization"). Unmaps queue
# their IOVAs and a timer flushes the whole domain: the host check
# (check=flush-lazy) wants (almost) no iotlb_sync call per unmap, the kernel's
# "lazy mode" line and the group type DMA-FQ.
# gdt-vm: kernels=6.1,6.12,6.18,newest devices=nvme iommu=intel-lazy timeout=300 check=flush-lazy
. /scenarios/flush.lib
