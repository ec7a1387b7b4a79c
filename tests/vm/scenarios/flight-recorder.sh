#!/bin/sh
# The flight recorder catches a fault nobody was watching: NVMe reads for 12 s,
# a faulting edu DMA at about 8 s. `record --ring 5s --trigger fault --after 1s`
# must write exactly one snapshot, holding the NVMe's mappings from about 3 s to
# 9 s and the fault, nothing from before; report reads it (check=flight-recorder).
# gdt-vm: kernels=6.12,6.18,newest devices=nvme,edu iommu=intel timeout=400 check=flight-recorder
set -e
. /scenarios/common.lib
mkdir -p /tmp/snaps
# No --duration: the reads end it (kill -INT below). Under load the 120
# reads took 33 s, and a 20 s --duration ended the recorder before the fault.
traced - /tmp/rec.err record --ring 5s --trigger fault --after 1s -o /tmp/snaps --duration 300s
start=$(cut -d' ' -f1 /proc/uptime)
i=0
while [ $i -lt 120 ]; do
    dd if=/dev/nvme0n1 of=/dev/null bs=64k count=8 iflag=direct 2>/dev/null
    if [ $i -eq 80 ]; then
        echo "FAULT-AT $(cut -d' ' -f1 /proc/uptime)"
        gdt-dma-inject --device "$GDT_EDU_BDF" --iova 0x123000 --len 64 --dir write
    fi
    sleep 0.1
    i=$((i + 1))
done
echo "READS $start..$(cut -d' ' -f1 /proc/uptime)"
kill -INT $tracer
wait $tracer || true
cat /tmp/rec.err
n=0
for f in /tmp/snaps/gdt-*.gdt; do
    [ -e "$f" ] || continue
    n=$((n + 1))
    echo "SNAPSHOT $f"
    echo "REPORT $(gpudirect-trace report "$f" --json)"
    echo "FIRST $(gpudirect-trace export "$f" --format jsonl | head -n 1)"
    echo "LAST $(gpudirect-trace export "$f" --format jsonl | tail -n 1)"
done
echo "SNAPSHOTS $n"
ls -la /tmp/snaps
