#!/bin/sh
# Translation latency and attribution under VT-d (strict mode): while the NVMe is
# read, gpudirect-trace live --json must show iommu_map/iommu_unmap latency
# percentiles and mapping lifetimes attributed to the NVMe's bus id (the
# iommu:* tracepoints carry no device: the timing hooks' per-task state gives
# it), with as many lifetimes as matched unmaps. Checked on the host
# (check=nvme-latency).
# gdt-vm: kernels=5.10,6.1,6.12 devices=nvme iommu=intel timeout=400 check=nvme-latency
set -e
. /scenarios/common.lib
gpudirect-trace probes | grep -E '^(time|learn):' || true
# Attaching the fentry/fexit hooks patches kernel text: slow under TCG.
# live prints its "probes attached" line when ready; --duration starts then.
traced /tmp/live.json /tmp/live.err live --json --duration 6s
dd if=/dev/nvme0n1 of=/dev/null bs=64k count=256 iflag=direct
wait $tracer
tail -n 1 /tmp/live.json
