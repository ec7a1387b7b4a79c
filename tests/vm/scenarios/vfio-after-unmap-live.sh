#!/bin/sh
# DMA after unmap, diagnosed: the edu is bound to vfio-pci, a buffer is mapped at
# IOVA 0x200000 with VFIO_IOMMU_MAP_DMA, the edu writes into it (no fault), the
# buffer is unmapped, and the same DMA faults. gpudirect-trace live must report
# the fault as "DMA after unmap" with the unmap's time and task, the IOMMU map
# and unmap attributed to the edu through its VFIO domain. Checked on the host
# (check=vfio-after-unmap).
# gdt-vm: kernels=6.1,6.12 devices=edu iommu=intel modules=vfio_pci,vfio_iommu_type1 timeout=300 check=vfio-after-unmap
set -e
. /scenarios/common.lib
# Attaching the fentry/fexit hooks patches kernel text: slow under TCG.
# live prints its "probes attached" line when ready; --duration starts then.
gpudirect-trace live --json --duration 7s > /tmp/live.json 2> /tmp/live.err &
tracer=$!
wait_for /tmp/live.err "probes attached" $tracer
gdt-dma-inject --mode vfio --device "$GDT_EDU_BDF" --iova 0x200000 --len 64 --dir write --map --then-unmap
wait $tracer
tail -n 1 /tmp/live.json
