#!/bin/sh
# VT-d in scalable mode (qemu x-scalable-mode=on): an edu write to an unmapped
# IOVA still logs a DMAR fault with the legacy reason 0x05, but tagged
# "PASID 0x0" where legacy mode says "NO_PASID" (fault decoders must accept both).
# gdt-vm: kernels=6.1,6.12,6.18,newest devices=edu iommu=intel-scalable timeout=300
set -e
# 7.x names the device with its PCI domain ([0000:00:03.0]), older kernels
# without ([00:03.0]): both match.
bus=${GDT_EDU_BDF#0000:}
gdt-dma-inject --device "$GDT_EDU_BDF" --iova 0x123000 --len 64 --dir write
i=0
while [ $i -lt 20 ] && ! dmesg | grep -q 'DMAR: \[DMA Write'; do
    sleep 0.5; i=$((i + 1))
done
dmesg | grep -i -e 'scalable' -e 'DMAR: \[DMA' || true
n=$(dmesg | grep -E "\[(0000:)?$bus\]" | grep -c -E 'DMAR: \[DMA Write PASID 0x[0-9a-f]+\] .*fault addr 0x123000 \[fault reason 0x05\]' || true)
echo "scalable-mode write faults: $n"
[ "$n" -ge 1 ]
