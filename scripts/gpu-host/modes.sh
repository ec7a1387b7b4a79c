#!/bin/bash
# Streaming and aggregate-only side by side on the GPU host: two tracers at
# once over one PyTorch DMA workload; prints, per GPU, maps/unmaps and the
# DMA-API lifetimes each mode measured (streamed exact HdrHistogram vs the
# kernel's mapping table and log2 histogram). Writes $OUT/modes-*.json.
# Usage: scripts/gpu-host/modes.sh BIN [ITERS]
set -u
USAGE="modes.sh BIN [ITERS]"
. "$(dirname "$0")/prelude.sh"
ITERS=${2:-1500}
start_live /tmp/m-s.jsonl /tmp/m-s.err --interval 60s
s=$LIVE_PID
start_live /tmp/m-a.jsonl /tmp/m-a.err --aggregate-only --interval 60s
a=$LIVE_PID
python3 "$HERE/workload.py" --iters "$ITERS" > "$OUT/modes-work.json" 2>&1
sleep 1
kill -INT $s $a; wait $s $a
tail -n 1 /tmp/m-s.jsonl > "$OUT/modes-streaming.json"
tail -n 1 /tmp/m-a.jsonl > "$OUT/modes-aggregate.json"
python3 - "$OUT/modes-streaming.json" "$OUT/modes-aggregate.json" <<'PY'
import json, sys
s, a = (json.load(open(p)) for p in sys.argv[1:3])
for d in s["devices"]:
    b = next((x for x in a["devices"] if x["device"] == d["device"]), None)
    if b is None:
        continue
    ls, la = d["dma"]["lifetime_ns"], b["dma"]["lifetime_ns"]
    print(f'{d["device"]}: maps {d["dma"]["maps"]}/{b["dma"]["maps"]} unmaps {d["dma"]["unmaps"]}/{b["dma"]["unmaps"]} '
          f'lifetimes {ls["count"]}/{la["count"]} p50 {ls["p50"]}/{la["p50"]} p99 {ls["p99"]}/{la["p99"]} '
          f'max {ls["max"]}/{la["max"]} (streaming/aggregate-only)')
print("lost", s["lost_events"], a["lost_events"], "missed", s["missed_events"], a["missed_events"],
      "unmatched(aggregate)", a.get("lifetime_unmatched"))
PY
