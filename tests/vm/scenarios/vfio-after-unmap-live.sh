#!/bin/sh
# DMA after unmap, diagnosed, and the same story live and offline: the edu is
# bound to vfio-pci, a buffer is mapped at IOVA 0x200000 with
# VFIO_IOMMU_MAP_DMA, the edu writes into it (no fault), the buffer is
# unmapped, and the same DMA faults. `record --json` prints the session's
# final object exactly as `live --json` would; it must report the fault as
# "DMA after unmap" with the unmap's time and task, the IOMMU map and unmap
# attributed to the edu through its VFIO domain. `report --json` of the file,
# here and on the host (the file comes out base64-encoded), must give exactly
# the same devices, faults and incidents (check=vfio-after-unmap).
# gdt-vm: kernels=6.1,6.12,6.18,newest devices=edu iommu=intel modules=vfio_pci,vfio_iommu_type1 timeout=300 check=vfio-after-unmap
set -e
. /scenarios/common.lib
# Attaching the fentry/fexit hooks patches kernel text: slow under TCG. The
# recorder prints its "probes attached" line when ready; --duration starts then.
traced /tmp/rec.json /tmp/rec.err record -o /tmp/v.gdt --json --duration 7s
gdt-dma-inject --mode vfio --device "$GDT_EDU_BDF" --iova 0x200000 --len 64 --dir write --map --then-unmap
wait $tracer
cat /tmp/rec.err
echo "RECORDED $(tail -n 1 /tmp/rec.json)"
echo "REPORTED $(gpudirect-trace report /tmp/v.gdt --json)"
echo GDT-FILE-BEGIN
base64 /tmp/v.gdt
echo GDT-FILE-END
