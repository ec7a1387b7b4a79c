#!/bin/sh
# The DMA-API level on kernels without dma:* tracepoints (5.10, 6.1), from
# the hooks on the DMA-API functions: 8 MiB of O_DIRECT NVMe reads must give
# maps == unmaps > 0, 8 MiB from the device (exactly: NVMe maps the pages
# read), mapped sizes, one lifetime per unmap, level "dma", source "hooks".
# Two tracers run at once over the same reads, one on fentry/fexit, one
# forced onto kprobe/kretprobe (GPUDIRECT_TRACE_NO_FENTRY=1): both must give
# the same counts and bytes (check=nvme-dma-hooks). nvme-dma-hooks-vtd runs
# this script under VT-d.
# gdt-vm: kernels=5.10,6.1 devices=nvme iommu=none timeout=400 check=nvme-dma-hooks
set -e
. /scenarios/common.lib
two_tracers 120s
gpudirect-trace probes | grep -E '^time:dma_(map|unmap|map_sg|unmap_sg) |^DMA-API'
dd if=/dev/nvme0n1 of=/dev/null bs=1M count=8 iflag=direct
end_two_tracers
