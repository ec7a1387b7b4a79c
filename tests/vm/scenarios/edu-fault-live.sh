#!/bin/sh
# Faults decoded live: gpudirect-trace live follows the kernel log while the edu
# writes to and reads from unmapped IOVAs; the final JSON object must report
# both faults with source vtd, the edu's bus id, the IOVA, reasons 5 and 6, and
# mapping state "never mapped". Checked on the host (check=edu-fault-live).
# gdt-vm: kernels=5.10,6.1,6.12,6.18,newest devices=edu iommu=intel timeout=300 check=edu-fault-live
set -e
. /scenarios/common.lib
# Attaching the fentry/fexit hooks patches kernel text: slow under TCG.
# live prints its "probes attached" line when ready; --duration starts then.
traced /tmp/live.json /tmp/live.err live --json --duration 6s
gdt-dma-inject --device "$GDT_EDU_BDF" --iova 0x123000 --len 64 --dir write
gdt-dma-inject --device "$GDT_EDU_BDF" --iova 0x456000 --len 64 --dir read
wait $tracer
tail -n 1 /tmp/live.json
