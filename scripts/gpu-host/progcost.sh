#!/bin/bash
# Per-program cost of gpudirect-trace on a real DMA workload, from the kernel's
# own accounting (kernel.bpf_stats_enabled: run_time_ns / run_cnt, reported by
# `live --json` as program_stats), in streaming and aggregate-only mode.
# Usage: scripts/gpu-host/progcost.sh BIN [ITERS]; writes $OUT/progcost-*.json
# MODES picks the runs (default: streaming aggregate aggregate-nolife;
# aggregate times one lifetime in 16 (the default sampling), aggregate-every
# times each (--lifetime-sample 1), aggregate-nolife is aggregate-only
# without the in-kernel mapping table; check and
# stacks: streaming with --check, and with --check --stacks; stacks-every:
# with --stacks-every-call too; stacks-N: with --stack-depth N).
set -u
USAGE="progcost.sh BIN [ITERS]"
. "$(dirname "$0")/prelude.sh"
ITERS=${2:-3000}
echo 1 > /proc/sys/kernel/bpf_stats_enabled
MODES=${MODES:-streaming aggregate aggregate-nolife}
for mode in $MODES; do
  case $mode in
    streaming) flag="" ;;
    aggregate) flag=--aggregate-only ;;
    aggregate-every) flag="--aggregate-only --lifetime-sample 1" ;;
    aggregate-nolife) flag="--aggregate-only --no-lifetimes" ;;
    check) flag="--check" ;;
    stacks) flag="--check --stacks" ;;
    stacks-every) flag="--check --stacks --stacks-every-call" ;;
    stacks-*) flag="--check --stacks --stack-depth ${mode#stacks-}" ;;
  esac
  start_live /tmp/pc.jsonl /tmp/pc.err $flag --interval 30s
  tp=$LIVE_PID
  python3 "$HERE/workload.py" --iters "$ITERS" > "$OUT/progcost-work-$mode.json" 2>&1
  kill -INT $tp; wait $tp
  tail -n 1 /tmp/pc.jsonl > "$OUT/progcost-live-$mode.json"
  tail -n 1 /tmp/pc.jsonl | python3 -c 'import json,sys
d=json.load(sys.stdin)
print(json.dumps({"mode":sys.argv[1],"events":d["kernel_events"],"lost":d["lost_events"],"program_stats":d["program_stats"]}))' $mode | tee "$OUT/progcost-$mode.json"
done
echo 0 > /proc/sys/kernel/bpf_stats_enabled
