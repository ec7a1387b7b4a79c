#!/bin/sh
# Kprobe misses are counted, never silent. gdt-misuse's in-kprobe command
# makes 16 map/unmap pairs on the edu inside a kprobe handler, where the
# kernel runs no other kprobe (what an interrupt's dma_unmap landing inside
# the tracer's own dma_map kprobe does in the field), then 16 outside it.
# Two tracers run: on fentry/fexit (sees all 32 pairs) and forced onto
# kprobes made through tracefs (sees the 16 outside and must count at least
# the 32 calls it missed, from kprobe_profile). On 6.12 the calls come from
# the dma:* tracepoints, which fire inside a kprobe too: both tracers count
# all 32 pairs, and the kprobe tracer's timing hooks time 16 of each and
# count the rest as missed. (misuse.lib's run_cmd sets $f: pids are $fpid.) After both exit, none of
# their kprobe events is left in kprobe_events (check=kprobe-missed).
# gdt-vm: kernels=5.10,6.1,6.12 devices=edu iommu=none kmods=gdt-misuse timeout=300 check=kprobe-missed
. /scenarios/misuse.lib
T=/sys/kernel/tracing
misuse_load || exit 1
gpudirect-trace live --json --duration 120s > /tmp/f.json 2> /tmp/f.err &
fpid=$!
GPUDIRECT_TRACE_NO_FENTRY=1 gpudirect-trace live --json --duration 120s > /tmp/k.json 2> /tmp/k.err &
kpid=$!
wait_for /tmp/f.err "probes attached" $fpid
wait_for /tmp/k.err "probes attached" $kpid
echo "EVENTS $(grep -c ':gpudirect_trace/' $T/kprobe_events)"
run_cmd in-kprobe 16
expect in-kprobe 64 0
grep '_dma_\(un\)\?map_page_attrs ' $T/kprobe_profile | sed 's/^/PROFILE /'
sleep 2
kill -INT $fpid $kpid
wait $fpid
wait $kpid
echo "FENTRY $(tail -n 1 /tmp/f.json)"
echo "KPROBE $(tail -n 1 /tmp/k.json)"
echo "LEFT $(grep -c ':gpudirect_trace/' $T/kprobe_events)"
[ "$fails" = 0 ]
