#!/bin/sh
# gpudirect-trace live --json attributes the NVMe's maps, unmaps and mapped bytes
# to its bus id while it is read (checked on the host: check=nvme-live-json reads
# the final JSON interval). 6.12 has dma:* tracepoints naming the device; 6.1 has
# only iommu:map/unmap, which the tracer attributes through the enclosing DMA-API
# call (fentry/kprobe hooks).
# gdt-vm: kernels=6.1,6.12 devices=nvme iommu=intel timeout=400 check=nvme-live-json
set -e
gpudirect-trace live --json --duration 5s > /tmp/live.json &
tracer=$!
sleep 2
dd if=/dev/nvme0n1 of=/dev/null bs=1M count=32 iflag=direct
wait $tracer
cat /tmp/live.json
