#!/bin/sh
# VFIO under VT-d: gdt-dma-inject binds the edu to vfio-pci, maps a 4 KiB buffer
# at IOVA 0x200000 (iommu:map from this task), the edu writes into it, the buffer
# is unmapped (iommu:unmap) and the same DMA then faults with a DMAR line.
# gdt-vm: kernels=6.1,6.12,6.18,newest devices=edu iommu=intel modules=vfio_pci,vfio_iommu_type1 timeout=300
set -e
T=/sys/kernel/tracing
# 7.x names the device with its PCI domain ([0000:00:03.0]), older kernels
# without ([00:03.0]): both match.
bus=${GDT_EDU_BDF#0000:}
echo 1 > $T/events/iommu/map/enable
echo 1 > $T/events/iommu/unmap/enable
echo > $T/trace
gdt-dma-inject --mode vfio --device "$GDT_EDU_BDF" --iova 0x200000 --len 64 --dir write --map --then-unmap
echo 0 > $T/events/iommu/enable
grep -E ' (map|unmap): IOMMU: iova=0x0*200000' $T/trace || true
maps=$(grep -c -E 'gdt-dma-inject.* map: IOMMU: iova=0x0*200000' $T/trace || true)
unmaps=$(grep -c -E ' unmap: IOMMU: iova=0x0*200000' $T/trace || true)
i=0
while [ $i -lt 20 ] && ! dmesg | grep -q 'DMAR: \[DMA Write.*fault addr 0x200000'; do
    sleep 0.5; i=$((i + 1))
done
dmesg | grep 'DMAR: \[DMA' || true
faults=$(dmesg | grep -E "\[(0000:)?$bus\]" | grep -c 'DMAR: \[DMA Write.*fault addr 0x200000 \[fault reason 0x05\]' || true)
echo "map events from the injector: $maps, unmap events: $unmaps, faults after unmap: $faults"
[ "$maps" -ge 1 ] && [ "$unmaps" -ge 1 ] && [ "$faults" -ge 1 ]
