#!/bin/sh
# gpudirect-trace live --json attributes iommu maps, unmaps and mapped bytes to
# the NVMe while it is read (checked on the host: check=nvme-live-json parses the
# JSON intervals, one object per line).
# gdt-vm: kernels=6.1,6.12 devices=nvme iommu=intel timeout=400 check=nvme-live-json
set -e
gpudirect-trace live --json --duration 5s > /tmp/live.json &
tracer=$!
sleep 2
dd if=/dev/nvme0n1 of=/dev/null bs=1M count=32 iflag=direct
wait $tracer
cat /tmp/live.json
