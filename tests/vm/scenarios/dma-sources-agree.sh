#!/bin/sh
# The two DMA-API sources agree: on 6.12, which has the dma:* tracepoints,
# one tracer takes them (the default) and another is forced onto the hooks
# (--dma-source hooks), over the same NVMe reads: identical counts and bytes
# (check=dma-sources-agree). With kernel.bpf_stats_enabled=1 both report
# their programs' run time: the tracepoint programs' per-hit cost against
# the hooks' (printed by the host check; docs/benchmarks.md).
# gdt-vm: kernels=6.12,newest devices=nvme iommu=none timeout=400 check=dma-sources-agree
set -e
. /scenarios/common.lib
echo 1 > /proc/sys/kernel/bpf_stats_enabled
gpudirect-trace live --json --duration 120s > /tmp/t.json 2> /tmp/t.err &
t=$!
gpudirect-trace live --json --dma-source hooks --duration 120s > /tmp/h.json 2> /tmp/h.err &
h=$!
wait_for /tmp/t.err "probes attached" $t
wait_for /tmp/h.err "probes attached" $h
dd if=/dev/nvme0n1 of=/dev/null bs=4k count=8192 iflag=direct
dd if=/dev/nvme0n1 of=/dev/null bs=64k count=512 iflag=direct
dd if=/dev/nvme0n1 of=/dev/null bs=1M count=8 iflag=direct
sleep 2
kill -INT $t $h
wait $t
wait $h
echo "TRACEPOINTS $(tail -n 1 /tmp/t.json)"
echo "HOOKS $(tail -n 1 /tmp/h.json)"
