#!/bin/sh
# Passthrough (iommu=pt under VT-d): the NVMe's group is identity-mapped, so
# its reads map nothing in the IOMMU. The host check (check=passthrough) wants
# no iommu map on the NVMe, DMA-API maps still timed (and, on 6.12, counted
# from dma:*), and the group type identity.
# gdt-vm: kernels=6.1,6.12 devices=nvme iommu=intel append=iommu=pt timeout=300 check=passthrough
set -e
. /scenarios/common.lib
traced /tmp/live.json /tmp/live.err live --json --duration 6s
dd if=/dev/nvme0n1 of=/dev/null bs=64k count=256 iflag=direct
wait $tracer
dmesg | grep -E "Default domain type" || true
echo "GROUP_TYPE $GDT_NVME_BDF $(cat /sys/bus/pci/devices/$GDT_NVME_BDF/iommu_group/type)"
tail -n 1 /tmp/live.json
