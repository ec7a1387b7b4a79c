#!/bin/sh
# Without an IOMMU the 6.17+ block layer maps each NVMe segment with
# dma_map_phys and, where dma_need_unmap() says the device needs none,
# never unmaps it (issue 32). 4 MiB of O_DIRECT reads, streaming and
# aggregate-only: the NVMe's row has the 4 MiB, nothing outstanding and no
# leak suspect once the reads are done, and says how many unmaps the kernel
# skipped (checked on the host: check=nvme-direct-unmap).
# gdt-vm: kernels=6.18,newest devices=nvme iommu=none timeout=400 check=nvme-direct-unmap
set -e
. /scenarios/common.lib
# Per-program run counts and time (the cost per hit the host check prints).
echo 1 > /proc/sys/kernel/bpf_stats_enabled
both_modes 120s --long-lived 1s
dd if=/dev/nvme0n1 of=/dev/null bs=128k count=32 iflag=direct
both_modes_end 3
