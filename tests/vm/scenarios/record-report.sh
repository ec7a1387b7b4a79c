#!/bin/sh
# Record, then report offline: gpudirect-trace record captures NVMe reads and a
# faulting edu DMA under VT-d; report --json on the file must show the NVMe's
# mappings on its bus id and the decoded VT-d fault at 0x123000 (checked on the
# host: check=record-report).
# gdt-vm: kernels=6.1,6.12 devices=nvme,edu iommu=intel timeout=400 check=record-report
set -e
gpudirect-trace record -o /tmp/t.gdt --duration 8s 2> /tmp/rec.err &
rec=$!
i=0
while ! grep -q "probes attached" /tmp/rec.err 2>/dev/null && [ $i -lt 240 ]; do
    sleep 0.5; i=$((i + 1))
done
dd if=/dev/nvme0n1 of=/dev/null bs=64k count=256 iflag=direct
gdt-dma-inject --device "$GDT_EDU_BDF" --iova 0x123000 --len 64 --dir write
wait $rec
cat /tmp/rec.err
ls -l /tmp/t.gdt
gpudirect-trace report /tmp/t.gdt --json
