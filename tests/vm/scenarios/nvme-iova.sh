#!/bin/sh
# The IOVA API as a DMA-API source (issue 32): since 6.17 the block layer
# maps NVMe requests with dma_iova_try_alloc/link/sync/destroy, which fire no
# dma:* tracepoint. 4 MiB of O_DIRECT reads under VT-d, traced streaming and
# aggregate-only at once: the NVMe's own row at level dma, maps (links) ==
# unmaps > 0, 4 MiB from the device, its iommu:map/unmap attributed to it
# (no "(iommu, unattributed)" maps), the iova row, and the IOVA hooks as the
# source (checked on the host: check=nvme-iova).
# gdt-vm: kernels=6.18,newest devices=nvme iommu=intel timeout=400 check=nvme-iova
set -e
. /scenarios/common.lib
# Per-program run counts and time (the cost per hit the host check prints).
echo 1 > /proc/sys/kernel/bpf_stats_enabled
both_modes 120s
gpudirect-trace probes --json > /tmp/p.json 2>/dev/null || true
dd if=/dev/nvme0n1 of=/dev/null bs=128k count=32 iflag=direct
both_modes_end 2
echo "PROBES $(tr -d '\n' < /tmp/p.json)"
