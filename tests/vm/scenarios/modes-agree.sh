#!/bin/sh
# Streaming and aggregate-only give the same answer: two tracers run at once
# over the same NVMe reads, one streaming every event to userspace (exact
# HdrHistograms), one keeping log2 histograms and the mapping table
# in-kernel. The host check (check=modes-agree) compares the NVMe's
# per-operation latency and its DMA-API lifetimes: equal counts, and each
# kernel percentile within a log2 bucket of the streamed one (plus one bucket
# of slack: each tracer's hooks run inside the other's timing window).
# gdt-vm: kernels=5.10,6.1,6.12 devices=nvme iommu=intel timeout=400 check=modes-agree
set -e
. /scenarios/common.lib
both_modes 10s
dd if=/dev/nvme0n1 of=/dev/null bs=64k count=256 iflag=direct
both_modes_end
