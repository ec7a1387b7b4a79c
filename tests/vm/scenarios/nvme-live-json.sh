#!/bin/sh
# gpudirect-trace live --json shows the NVMe's maps, unmaps and mapped bytes while
# it is read (checked on the host: check=nvme-live-json reads the final JSON
# interval). 6.12 attributes them to the NVMe's bus id (dma:* tracepoints); 6.1
# has only iommu:map/unmap, which carry no device, so there the check expects
# them under "(iommu, unattributed)".
# gdt-vm: kernels=6.1,6.12 devices=nvme iommu=intel timeout=400 check=nvme-live-json
set -e
gpudirect-trace live --json --duration 5s > /tmp/live.json &
tracer=$!
sleep 2
dd if=/dev/nvme0n1 of=/dev/null bs=1M count=32 iflag=direct
wait $tracer
cat /tmp/live.json
