#!/bin/bash
# gpudirect-trace on the GPU test host: probes, a traced PyTorch DMA workload,
# and overhead measured in one run (untraced vs tracefs vs gpudirect-trace
# streaming vs aggregate-only, alternating, ROUNDS rounds). Results go to $OUT
# (or ./gpu-out). Usage: scripts/gpu-host/run.sh PATH/TO/gpudirect-trace [ROUNDS]
set -u
USAGE="run.sh BIN [ROUNDS]"
. "$(dirname "$0")/prelude.sh"
ROUNDS=${2:-3}
T=/sys/kernel/tracing
[ -d $T/events ] || mount -t tracefs nodev $T
{
  uname -r; nvidia-smi -L 2>/dev/null; cat /proc/driver/nvidia/version 2>/dev/null | head -1
} > "$OUT/host.txt" 2>&1
"$BIN" probes > "$OUT/probes.txt" 2>&1
"$BIN" probes --json > "$OUT/probes.json" 2>/dev/null

# 1. Traced workload: live --json over the whole run.
start_live "$OUT/live.jsonl" "$OUT/live.err" --interval 2s
tr=$LIVE_PID
python3 "$HERE/workload.py" --iters 500 > "$OUT/workload-traced.json" 2>&1
sleep 2; kill -INT $tr; wait $tr

# 2. Overhead, alternating modes within each round.
# PAR processes at once (the host has many CPUs; one process barely loads the
# tracer); prints one JSON object: total pairs/s and the slowest elapsed time.
work() {
  local par=${PAR:-1} i
  for i in $(seq 1 "$par"); do
    python3 "$HERE/workload.py" --iters "${ITERS:-1500}" > /tmp/work.$i 2>/dev/null &
  done
  wait
  cat /tmp/work.* | python3 -c 'import json,sys
r=[json.loads(l) for l in sys.stdin if l.startswith("{")]
print(json.dumps({"procs":len(r),"pairs_per_s":sum(x["pairs_per_s"] for x in r),"elapsed_s":max(x["elapsed_s"] for x in r)}))'
  rm -f /tmp/work.*
}
EVENTS="dma/dma_map_sg dma/dma_unmap_sg dma/dma_map_phys dma/dma_unmap_phys iommu/map iommu/unmap swiotlb/swiotlb_bounced"
echo -n > "$OUT/overhead.jsonl"
for r in $(seq 1 "$ROUNDS"); do
  for mode in untraced tracefs streaming aggregate; do
    case $mode in
      untraced) res=$(work) ;;
      tracefs)
        echo > $T/trace
        for e in $EVENTS; do [ -e $T/events/$e/enable ] && echo 1 > $T/events/$e/enable; done
        cat $T/trace_pipe > /tmp/trace_pipe.out & cp=$!
        res=$(work)
        for e in $EVENTS; do [ -e $T/events/$e/enable ] && echo 0 > $T/events/$e/enable; done
        kill $cp; wait $cp 2>/dev/null ;;
      streaming|aggregate)
        flag=""; [ $mode = aggregate ] && flag=--aggregate-only
        start_live /tmp/live-$mode.jsonl /tmp/live-$mode.err $flag --interval 5s
        tp=$LIVE_PID
        res=$(work)
        kill -INT $tp; wait $tp
        tail -1 /tmp/live-$mode.jsonl > "$OUT/final-$mode.json" ;;
    esac
    echo "{\"round\":$r,\"mode\":\"$mode\",\"result\":$res}" | tee -a "$OUT/overhead.jsonl"
  done
done
