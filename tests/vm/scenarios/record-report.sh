#!/bin/sh
# Record, then report offline: gpudirect-trace record captures NVMe reads and a
# faulting edu DMA under VT-d; report --json on the file must show the NVMe's
# mappings on its bus id and the decoded VT-d fault at 0x123000, and `report
# --device nvme0n1` (and `export --device nvme0n1`) the NVMe alone, found by
# the name the recording kept of the guest's disk (checked on the host:
# check=record-report).
# gdt-vm: kernels=6.1,6.12 devices=nvme,edu iommu=intel timeout=400 check=record-report
set -e
. /scenarios/common.lib
traced - /tmp/rec.err record -o /tmp/t.gdt --duration 8s
dd if=/dev/nvme0n1 of=/dev/null bs=64k count=256 iflag=direct
gdt-dma-inject --device "$GDT_EDU_BDF" --iova 0x123000 --len 64 --dir write
wait $tracer
cat /tmp/rec.err
ls -l /tmp/t.gdt
echo "BYNAME $(gpudirect-trace report /tmp/t.gdt --json --device nvme0n1 2>/tmp/byname.err)"
cat /tmp/byname.err
gpudirect-trace export /tmp/t.gdt --format jsonl --device nvme0n1 -o /tmp/byname.jsonl
n=$(grep -c '"device":' /tmp/byname.jsonl || true)
m=$(grep -c "\"device\":\"$GDT_NVME_BDF\"" /tmp/byname.jsonl || true)
echo "EXPORTED {\"with_device\":$n,\"nvme\":$m}"
gpudirect-trace report /tmp/t.gdt --json
