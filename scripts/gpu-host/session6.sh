#!/bin/bash
# Issue 26 on the GPU host: short-lived processes keep their names (the
# exit record, sched:sched_process_exit, a tracepoint the lockdown host
# allows). Three PyTorch runs of a few seconds each under live --json and
# record; the GPU's process rows must name them python3 though they are
# gone before the final summary. Usage: session6.sh BIN; results in $OUT.
set -u
USAGE="session6.sh BIN"
. "$(dirname "$0")/prelude.sh"
uname -r > "$OUT/host.txt"
"$BIN" probes > "$OUT/probes.txt" 2>&1
"$BIN" live --json --interval 2s > "$OUT/live.jsonl" 2> "$OUT/live.err" &
tr=$!
"$BIN" record -o "$OUT/short.gdt" > "$OUT/record.out" 2> "$OUT/record.err" &
rec=$!
for i in $(seq 1 120); do
    grep -q "probes attached" "$OUT/live.err" && grep -q "probes attached" "$OUT/record.err" && break
    sleep 0.5
done
for i in 1 2 3; do
    python3 "$HERE/workload.py" --iters 40 > "$OUT/workload-$i.json" 2>&1
done
sleep 3
kill -INT $tr $rec
wait $tr
wait $rec
"$BIN" report --json "$OUT/short.gdt" > "$OUT/report.json" 2> "$OUT/report.err"
tail -n 1 "$OUT/live.jsonl" | python3 -c '
import json, sys
v = json.load(sys.stdin)
for d in v["devices"]:
    for p in d.get("processes", []):
        print("live", d["device"], p["pid"], p["comm"], p["maps"])
print("processes_unnamed", v.get("processes_unnamed"), "lost", v.get("lost_events"), "missed", v.get("missed_events"))
' > "$OUT/names.txt" 2>&1
python3 -c '
import json, sys
v = json.load(open(sys.argv[1]))
for d in v["devices"]:
    for p in d.get("processes", []):
        print("report", d["device"], p["pid"], p["comm"], p["maps"])
' "$OUT/report.json" >> "$OUT/names.txt" 2>&1
grep -n "sched_process_exit" "$OUT/probes.txt" >> "$OUT/names.txt"
cat "$OUT/names.txt"
