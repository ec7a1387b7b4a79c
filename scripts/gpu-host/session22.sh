#!/bin/bash
# Session 22: the flight recorder with --check --stacks around the NVIDIA
# driver's real DMA-API calls. A snapshot (cut by the `exit` trigger: the
# command exits 3) must name the frames of every stack its records carry,
# as a recording does since session 21b (each second's flush now writes the
# stacks of its records). Usage: session22.sh BIN; results in $OUT.
set -u
USAGE="session22.sh BIN"
. "$(dirname "$0")/prelude.sh"
{ uname -r; nproc; nvidia-smi -L 2>/dev/null; cat /proc/loadavg; } > "$OUT/host.txt" 2>&1
stamp() { echo "$1 rc=$2 at ${SECONDS}s load $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/host.txt"; }
SNAP=/tmp/s22-snapshots
rm -rf "$SNAP"
timeout 180 "$BIN" record --ring 60s,256MiB --trigger exit -o "$SNAP" \
    --check --stacks --stacks-every-call \
    -- bash -c "python3 '$HERE/workload.py' --iters 300; exit 3" \
    > "$OUT/record.out" 2> "$OUT/record.err"
stamp "record --ring" $?
ls -l "$SNAP" > "$OUT/snapshots.txt" 2>&1
for f in "$SNAP"/gdt-*.gdt; do
    [ -e "$f" ] || continue
    timeout 60 "$BIN" export "$f" --format jsonl > /tmp/s22.jsonl 2>> "$OUT/export.err"
    stamp "export $(basename "$f")" $?
    python3 - /tmp/s22.jsonl > "$OUT/stacks-check.txt" 2>&1 <<'PY'
import json, sys
named, frames = {}, {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") == "stacks":
        for s in r.get("stacks", []):
            frames[s["id"]] = len(s.get("frames", []))
    elif r.get("stack_id") is not None:
        named[r["stack_id"]] = named.get(r["stack_id"], 0) + 1
missing = sorted(i for i in named if frames.get(i, 0) == 0)
print(f"records with a stack id: {sum(named.values())}")
print(f"distinct stacks named: {len(named)}; with frames: {len(named) - len(missing)}")
print(f"frames per stack: {sorted(frames.values())}")
print(f"named without frames: {missing}")
print("RESULT", "ok" if named and not missing else "FAIL")
PY
    head -c 4000 /tmp/s22.jsonl | grep -m2 '"kind":"stacks"' | cut -c1-1500 > "$OUT/stacks-sample.txt"
done
