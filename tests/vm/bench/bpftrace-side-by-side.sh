#!/bin/sh
# `cargo xtask bench --vm`: gpudirect-trace (streaming, aggregate-only, and
# aggregate-only without the lifetime table)
# and bpftrace one-liners attached at the same time to the same real events
# (16384 NVMe 4 KiB O_DIRECT reads, the whole 64 MiB disk: dma:dma_map_page on 6.12, iommu:map on 6.1),
# with kernel.bpf_stats_enabled=1: every program's run count and run time come
# from the kernel's own accounting (bpftrace's from /proc/PID/fdinfo of its
# program fds, ours from live --json's program_stats). bpftrace is the host's
# Debian package, run through a chroot into the host's root shared read-only
# over 9p (--host-root). Then a tracefs trace_pipe stream of the same event,
# timed against no tracing at all (its cost is not a BPF program: bpf_stats
# cannot see it). Prints BENCH-VM lines for the host to parse.
set -e
. /scenarios/common.lib
R=/host
mkdir -p $R
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose hostroot $R
for d in proc sys dev; do mount -o rbind /$d $R/$d; done
mount -t tmpfs tmpfs $R/tmp
T=/sys/kernel/tracing
if [ -d $T/events/dma/dma_map_page ]; then
    EV=dma:dma_map_page
    HIST="tracepoint:dma:dma_map_page { @[str(args->device)] = hist(args->size); }"
    COUNT="tracepoint:dma:dma_map_page { @[probe] = count(); }"
    EMPTY="tracepoint:dma:dma_map_page { }"
    OURS=dma_map
else
    # 6.1 has no dma:* events; iommu:map carries no device: key by task.
    EV=iommu:map
    HIST="tracepoint:iommu:map { @[comm] = hist(args->size); }"
    COUNT="tracepoint:iommu:map { @[probe] = count(); }"
    EMPTY="tracepoint:iommu:map { }"
    OURS=iommu_map
fi
echo "BENCH-VM event=$EV ours_program=$OURS bpftrace=$(chroot $R /usr/bin/bpftrace --version)"
echo 1 > /proc/sys/kernel/bpf_stats_enabled
ulimit -l unlimited
chroot $R /usr/bin/bpftrace -e "$HIST" > /tmp/bt-hist.out 2>&1 &
bh=$!
chroot $R /usr/bin/bpftrace -e "$COUNT" > /tmp/bt-count.out 2>&1 &
bc=$!
# An empty program on the same event: the accounting floor (what bpf_stats
# charges any program for entering and timing it), to give net costs.
chroot $R /usr/bin/bpftrace -e "$EMPTY" > /tmp/bt-empty.out 2>&1 &
be=$!
gpudirect-trace live --json --duration 600s > /tmp/s.json 2> /tmp/s.err &
s=$!
gpudirect-trace live --json --aggregate-only --duration 600s > /tmp/a.json 2> /tmp/a.err &
a=$!
gpudirect-trace live --json --aggregate-only --no-lifetimes --duration 600s > /tmp/n.json 2> /tmp/n.err &
n=$!
wait_for /tmp/s.err "probes attached" $s > /dev/null
wait_for /tmp/a.err "probes attached" $a > /dev/null
wait_for /tmp/n.err "probes attached" $n > /dev/null
wait_for /tmp/bt-hist.out "Attaching" $bh
wait_for /tmp/bt-count.out "Attaching" $bc
wait_for /tmp/bt-empty.out "Attaching" $be
sleep 2
start=$(cut -d' ' -f1 /proc/uptime)
dd if=/dev/nvme0n1 of=/dev/null bs=4k count=${GDT_BENCH_READS:-16384} iflag=direct 2>&1 | tail -n 1
end=$(cut -d' ' -f1 /proc/uptime)
echo "BENCH-VM reads=${GDT_BENCH_READS:-16384} seconds=$start-$end"
# Each bpftrace program's counters, read while it is still attached.
for pair in "hist $bh" "count $bc" "empty $be"; do
    set -- $pair
    for f in /proc/$2/fdinfo/*; do
        if grep -q '^prog_type:' "$f" 2>/dev/null; then
            echo "BENCH-VM bpftrace-$1 $(grep -E '^(prog_type|prog_id|run_time_ns|run_cnt):' "$f" | tr '\n' ' ')"
        fi
    done
done
# stop NAME PID: SIGINT, then up to 60 s for it to print its summary and
# exit; a process still there is named and killed (its numbers are missing).
stop() {
    echo "BENCH-VM stopping $1"
    kill -INT "$2" 2>/dev/null || true
    _i=0
    while kill -0 "$2" 2>/dev/null; do
        _i=$((_i + 1))
        if [ $_i -gt 120 ]; then
            echo "BENCH-VM stuck $1 pid=$2: killed"
            kill -KILL "$2"
            break
        fi
        sleep 0.5
    done
    wait "$2" 2>/dev/null || true
}
stop streaming $s
stop aggregate $a
stop no-lifetimes $n
for p in "hist $bh" "count $bc" "empty $be"; do stop bpftrace-$p; done
echo "BENCH-VM bpftrace-hist-output $(tr '\n' '|' < /tmp/bt-hist.out | cut -c1-300)"
echo "BENCH-VM bpftrace-count-output $(tr '\n' ' ' < /tmp/bt-count.out | cut -c1-200)"
echo "STREAMING $(tail -n 1 /tmp/s.json)"
echo "AGGREGATE $(tail -n 1 /tmp/a.json)"
echo "NOLIFETIMES $(tail -n 1 /tmp/n.json)"
echo 0 > /proc/sys/kernel/bpf_stats_enabled
# trace_pipe: the same event streamed as text, against no tracing, same reads.
reads() {
    s0=$(cut -d' ' -f1 /proc/uptime)
    dd if=/dev/nvme0n1 of=/dev/null bs=4k count=4096 iflag=direct 2>/dev/null
    s1=$(cut -d' ' -f1 /proc/uptime)
    echo "$s0 $s1" | awk '{printf "%.3f", $2 - $1}'
}
for round in 1 2 3; do
    echo "BENCH-VM trace_pipe off round=$round seconds=$(reads)"
    echo 1 > $T/events/${EV%%:*}/${EV##*:}/enable
    cat $T/trace_pipe > /tmp/pipe.txt &
    p=$!
    t=$(reads)
    sleep 1
    echo 0 > $T/events/${EV%%:*}/${EV##*:}/enable
    kill $p
    wait $p 2>/dev/null || true
    echo "BENCH-VM trace_pipe on round=$round seconds=$t lines=$(wc -l < /tmp/pipe.txt)"
done
