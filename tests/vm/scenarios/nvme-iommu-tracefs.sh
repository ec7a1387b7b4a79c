#!/bin/sh
# NVMe reads under emulated VT-d produce iommu:map/unmap events (the NVMe is the
# only DMA master in this VM and sits in its own group with a DMA domain), seen
# through the kernel's own tracepoints in tracefs. This checks the VM and kernel
# side that the tracer scenarios rely on (iommu:map carries no device name).
# 5.10 is left out: its intel-iommu DMA ops map pages without iommu_map(), so
# the iommu:map/unmap tracepoints never fire there (seen in the VM).
# gdt-vm: kernels=6.1,6.12,6.18,newest devices=nvme iommu=intel timeout=300
set -e
T=/sys/kernel/tracing
[ -b /dev/nvme0n1 ] || { echo "no /dev/nvme0n1"; exit 1; }
echo 1 > $T/events/iommu/map/enable
echo 1 > $T/events/iommu/unmap/enable
echo > $T/trace
dd if=/dev/nvme0n1 of=/dev/null bs=1M count=32 iflag=direct
echo 0 > $T/events/iommu/enable
maps=$(grep -c ' map: IOMMU:' $T/trace || true)
unmaps=$(grep -c ' unmap: IOMMU:' $T/trace || true)
echo "iommu map events: $maps, unmap events: $unmaps"
grep -m 2 ' map: IOMMU:' $T/trace || true
# The NVMe must sit in its own IOMMU group with a DMA domain.
group=$(basename "$(readlink /sys/bus/pci/devices/$GDT_NVME_BDF/iommu_group)")
echo "NVMe $GDT_NVME_BDF: iommu group $group, domain type $(cat /sys/kernel/iommu_groups/$group/type 2>/dev/null)"
[ "$maps" -gt 0 ] && [ "$unmaps" -gt 0 ]
