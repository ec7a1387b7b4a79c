#!/bin/bash
# One batched session on the GPU test host with the binary whose kprobes
# are made in kprobe_events and whose stacks are retried on a taken bucket:
# the probe list (no kprobes there: nothing may change), and `live --check
# --stacks` around the PyTorch workload: the GPU's maps/unmaps, misuse
# findings (none expected), missed_events, lost_events and stacks_lost.
# Usage: OUT=DIR scripts/gpu-host/session5.sh BIN
set -u
USAGE="session5.sh BIN"
. "$(dirname "$0")/prelude.sh"
T=/sys/kernel/tracing
[ -d $T/events ] || mount -t tracefs nodev $T 2>/dev/null
{ uname -r; nvidia-smi -L; head -1 /proc/driver/nvidia/version; nproc;
  ls -l $T/kprobe_events 2>&1; ls /sys/bus/event_source/devices; } > "$OUT/host.txt" 2>&1
"$BIN" --version > "$OUT/version.txt" 2>&1
"$BIN" probes > "$OUT/probes.txt" 2>&1
timeout 120 "$BIN" live --json --check --stacks --duration 40s > "$OUT/live.json" 2> "$OUT/live.err" &
pid=$!
for _ in $(seq 60); do grep -q "probes attached" "$OUT/live.err" && break; sleep 0.5; done
python3 "$HERE/workload.py" --iters 300 > "$OUT/workload.out" 2>&1
sleep 2
kill -INT $pid
wait $pid
echo "live rc=$?" >> "$OUT/live.err"
tail -n 1 "$OUT/live.json" | python3 -c '
import json, sys
v = json.loads(sys.stdin.read())
keep = {k: v.get(k) for k in ("kernel", "events", "kernel_events", "lost_events",
        "missed_events", "stacks_lost", "hook_args_missing", "probes_attached")}
keep["devices"] = [{k: d.get(k) for k in ("device", "maps", "unmaps", "level", "dma_source")}
                   for d in v.get("devices", []) if d.get("maps")]
keep["misuse"] = (v.get("misuse") or {}).get("findings")
print(json.dumps(keep, indent=1))' > "$OUT/summary.json" 2>&1
ls $T/kprobe_events >/dev/null 2>&1 && grep -c gpudirect_trace $T/kprobe_events > "$OUT/left.txt" 2>&1
rm -f "$OUT/live.json"
