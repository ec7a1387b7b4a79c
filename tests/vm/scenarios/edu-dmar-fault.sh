#!/bin/sh
# The injector really faults: an edu DMA write to an unmapped IOVA under VT-d makes
# the kernel log a DMAR fault for the edu's bus id (reason 5, PTE write access not
# set); a read gives reason 6. 5.10 prints the old format
# ("[fault reason 05]", "PASID ffffffff"), 6.x the new ("[fault reason 0x05]").
# gdt-vm: kernels=5.10,6.1,6.12,6.18,newest devices=edu iommu=intel timeout=300
set -e
# 7.x names the device with its PCI domain ([0000:00:03.0]), older kernels
# without ([00:03.0]): both match.
bus=${GDT_EDU_BDF#0000:}
gdt-dma-inject --device "$GDT_EDU_BDF" --iova 0x123000 --len 64 --dir write
gdt-dma-inject --device "$GDT_EDU_BDF" --iova 0x456000 --len 64 --dir read
# Fault reporting is an interrupt plus a rate-limited printk: give it a moment.
i=0
while [ $i -lt 20 ] && [ "$(dmesg | grep -c 'DMAR: \[DMA')" -lt 2 ]; do
    sleep 0.5; i=$((i + 1))
done
dmesg | grep 'DMAR: \[DMA' || true
w=$(dmesg | grep 'DMAR: \[DMA Write' | grep -E "\[(0000:)?$bus\]" | grep -c -E 'fault addr (0x)?123000 \[fault reason (0x)?05\]' || true)
r=$(dmesg | grep 'DMAR: \[DMA Read' | grep -E "\[(0000:)?$bus\]" | grep -c -E 'fault addr (0x)?456000 \[fault reason (0x)?06\]' || true)
echo "write faults: $w, read faults: $r"
[ "$w" -ge 1 ] && [ "$r" -ge 1 ]
