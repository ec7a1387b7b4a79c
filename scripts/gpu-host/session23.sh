#!/bin/bash
# Session 23: the event ring's own reader (ebpf/ring.rs) on a 16-CPU host.
# 1. bench_streaming_with_reader (streaming dma_map/dma_unmap per hit while
#    a reader drains on the last CPU: aya's RingBuf against ours, three
#    interleaved rounds a run), ROUNDS times;
# 2. bench_ring_sizing once (the reader pinned beside one paced injector);
# 3. bench_reader_cpu once (the reader alone over a full ring).
# Usage: session23.sh HOSTTEST; results in $OUT/session23.tgz.
set -u
USAGE="session23.sh HOSTTEST"
. "$(dirname "$0")/prelude.sh"
HT=$BIN
{ uname -r; nproc; nvidia-smi -L 2>/dev/null; cat /proc/loadavg;
  lscpu 2>/dev/null | grep -E "^(Model name|Thread|Core|Socket|NUMA node\(s\))";
  grep -H . /sys/devices/system/cpu/vulnerabilities/{spec_rstack_overflow,spectre_v2} 2>/dev/null;
  cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list 2>/dev/null; } > "$OUT/host.txt" 2>&1
stamp() { echo "$1 rc=$2 at ${SECONDS}s load $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/host.txt"; }
bench() { # bench NAME LIMIT ROUND
    timeout "$2" "$HT" --ignored --exact --nocapture --test-threads=1 "$1" > "$OUT/$1.$3.txt" 2>&1
    stamp "$1 round $3" $?
}
for round in $(seq 1 "${ROUNDS:-3}"); do
    bench bench_concurrent::bench_streaming_with_reader 120 "$round"
done
bench bench_ring::bench_ring_sizing 150 1
bench bench_reader::bench_reader_cpu 90 1
# -o: with --nocapture the first BENCH line of a run follows the harness's
# "test NAME ... " on the same line.
grep -ho "BENCH .*" "$OUT"/*.txt > "$OUT/bench-lines.txt"
cd "$OUT" && tar czf session23.tgz host.txt ./*.txt 2> /dev/null
