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
# count the rest as missed. After both exit, none of
# their kprobe events is left in kprobe_events (check=kprobe-missed).
# gdt-vm: kernels=5.10,6.1,6.12,newest devices=edu iommu=none kmods=gdt-misuse timeout=300 check=kprobe-missed
. /scenarios/misuse.lib
T=/sys/kernel/tracing
misuse_load || exit 1
two_tracers 120s || exit 1
echo "EVENTS $(grep -c ':gpudirect_trace/' $T/kprobe_events)"
run_cmd in-kprobe 16
expect in-kprobe 64 0
grep '_dma_\(un\)\?map_page_attrs ' $T/kprobe_profile | sed 's/^/PROFILE /'
end_two_tracers
echo "LEFT $(grep -c ':gpudirect_trace/' $T/kprobe_events)"
[ "$fails" = 0 ]
