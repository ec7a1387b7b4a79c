#!/bin/sh
# gpudirect-trace live --json attributes the NVMe's maps, unmaps and mapped bytes
# to its bus id while it is read (checked on the host: check=nvme-live-json reads
# the final JSON interval). 6.12 has dma:* tracepoints naming the device; on
# 5.10 and 6.1 the DMA-API hooks (fentry/kprobe) report the same records, and
# 6.1's iommu:map/unmap are attributed through the enclosing DMA-API call.
# The table is asked for by the disk's own name (--device nvme0n1): the
# tracer turns it into the PCI function that does its DMA and says so.
# gdt-vm: kernels=5.10,6.1,6.12,6.18,newest devices=nvme iommu=intel timeout=400 check=nvme-live-json
set -e
. /scenarios/common.lib
# Start the I/O only once every hook is attached: the tracer says so on stderr
# (under TCG, attaching the fentry hooks takes seconds).
traced /tmp/live.json /tmp/live.err live --json --duration 120s --device nvme0n1
dd if=/dev/nvme0n1 of=/dev/null bs=1M count=32 iflag=direct
# Let one more interval pass, then end it like Ctrl-C (final summary follows).
sleep 2
kill -INT $tracer
wait $tracer
cat /tmp/live.err /tmp/live.json
