#!/bin/sh
# gpudirect-trace live --json shows the NVMe's maps, unmaps and mapped bytes while
# it is read (checked on the host: check=nvme-live-json reads the final JSON
# interval), attributed to the NVMe's bus id: by the dma:* tracepoints on 6.12,
# and on 6.1 (iommu:map/unmap only, no device in them) in-kernel through the
# DMA-API call each IOMMU operation is nested in.
# gdt-vm: kernels=6.1,6.12 devices=nvme iommu=intel timeout=400 check=nvme-live-json
set -e
# Attaching the fentry/fexit hooks patches kernel text: slow under TCG.
# live prints its "probes attached" line when ready; --duration starts then.
gpudirect-trace live --json --duration 5s > /tmp/live.json 2> /tmp/live.err &
tracer=$!
i=0
while ! grep -q "probes attached" /tmp/live.err 2>/dev/null && [ $i -lt 240 ]; do
    sleep 0.5; i=$((i + 1))
done
cat /tmp/live.err
dd if=/dev/nvme0n1 of=/dev/null bs=1M count=32 iflag=direct
wait $tracer
cat /tmp/live.json
