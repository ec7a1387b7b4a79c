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
gpudirect-trace live --json --duration 10s > /tmp/s.json 2> /tmp/s.err &
s=$!
gpudirect-trace live --json --aggregate-only --duration 10s > /tmp/a.json 2> /tmp/a.err &
a=$!
wait_for /tmp/s.err "probes attached" $s
wait_for /tmp/a.err "probes attached" $a
dd if=/dev/nvme0n1 of=/dev/null bs=64k count=256 iflag=direct
wait $s
wait $a
echo "STREAMING $(tail -n 1 /tmp/s.json)"
echo "AGGREGATE $(tail -n 1 /tmp/a.json)"
