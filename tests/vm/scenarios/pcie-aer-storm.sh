#!/bin/sh
# An AER storm: 10,000 correctable Bad TLP errors on one device, each
# handled by the kernel (aer_inject, one at a time). The kernel log shows
# few of them (7.x rate-limits AER lines per device; older kernels print
# them all but the console cannot keep up); the recorder must count every
# one the kernel handled (ras:aer_event, counted by tracefs too) with no
# event lost from the ring, and say how many the log left out (checked on
# the host: check=pcie-aer-storm).
# gdt-vm: kernels=6.12,newest devices=blk-port iommu=intel modules=aer_inject timeout=400 check=pcie-aer-storm
set -e
. /scenarios/common.lib
trace_on ras/aer_event
traced - /tmp/rec.err record -o /tmp/storm.gdt --duration 300s
gdt-aer-inject --device "$GDT_BLKPORT_BDF" --correctable 0x40 --count 10000
sleep 2
kill -INT $tracer
wait $tracer || true
cat /tmp/rec.err
echo "TRACEFS aer_event=$(count_tracefs ras/aer_event)"
# The text report: its JSON would list the 4096 incidents kept, too much
# for the serial console.
gpudirect-trace report /tmp/storm.gdt | grep -v '  aer  ' || true
