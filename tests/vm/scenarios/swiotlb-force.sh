#!/bin/sh
# Forced bouncing: no IOMMU, swiotlb=force. Every NVMe read lands in a
# bounce buffer and is copied out at unmap (swiotlb:swiotlb_bounced). The
# host check (check=swiotlb-force) wants the tool's swiotlb_bounced_bytes on
# the NVMe to equal the bytes read (READ_BYTES) and to stay within what the
# driver mapped.
# gdt-vm: kernels=6.1,6.12,6.18,newest devices=nvme iommu=none append=swiotlb=force timeout=300 check=swiotlb-force
set -e
. /scenarios/common.lib
traced /tmp/live.json /tmp/live.err live --json --duration 6s
dd if=/dev/nvme0n1 of=/dev/null bs=64k count=256 iflag=direct
wait $tracer
echo "READ_BYTES $((256 * 65536))"
echo "IOMMU_GROUPS $(ls /sys/kernel/iommu_groups | wc -l)"
tail -n 1 /tmp/live.json
