#!/bin/sh
# Aggregate-only mode (no per-event streaming): while the NVMe is read,
# gpudirect-trace live --json --aggregate-only must still show the NVMe's
# DMA-API maps and unmaps from kernel counters and, from the kernel's own
# mapping table, map-to-unmap lifetimes: one in 16 unmaps at random by
# default (lifetime_sample), a binomial count the check bounds. On 6.12 from the dma:* tracepoints, before 6.8 from the
# DMA-API hooks (the same records, the same mapping table). Checked on the host
# (check=nvme-aggregate).
# gdt-vm: kernels=5.10,6.1,6.12,6.18,newest devices=nvme iommu=intel timeout=400 check=nvme-aggregate
set -e
. /scenarios/common.lib
traced /tmp/live.json /tmp/live.err live --json --aggregate-only --duration 6s
dd if=/dev/nvme0n1 of=/dev/null bs=64k count=256 iflag=direct
wait $tracer
tail -n 1 /tmp/live.json
