#!/bin/sh
# Strict invalidation (qemu VT-d with caching mode, iommu.strict=1): every
# unmap of the NVMe's reads is followed by its own IOTLB sync. The host check
# (check=flush-strict) wants the timing hook's iotlb_sync count on the NVMe
# to match its unmaps and the group's default domain type to read DMA.
# gdt-vm: kernels=6.1,6.12,6.18,newest devices=nvme iommu=intel timeout=300 check=flush-strict
. /scenarios/flush.lib
