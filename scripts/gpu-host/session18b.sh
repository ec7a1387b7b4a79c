#!/bin/bash
# A fork-heavy host under a streaming tracer, two builds interleaved:
# EXITS short processes (/bin/true) per run, and what the tracer spends on
# them: its CPU time (utime + stime, clock ticks), its threads' context
# switches (a reader wake-up is one) and sched_process_exit's ns per run
# (bpf_stats). Written for the exit record that no longer forces a reader
# wake-up (session 18).
# Usage: session18b.sh ROUNDS LABEL=BIN...; results in $OUT/forks.txt.
set -u
ROUNDS=${1:?usage: session18b.sh ROUNDS LABEL=BIN...}
shift
USAGE="session18b.sh ROUNDS LABEL=BIN..."
first=${1#*=}
. "$(dirname "$0")/prelude.sh" "$first"
EXITS=${EXITS:-5000}
echo 1 > /proc/sys/kernel/bpf_stats_enabled
ctxt() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/_ctxt_switches/ {n += $2} END {print n}'; }
cpu() { awk '{print $14 + $15}' /proc/"$1"/stat; }
for round in $(seq 1 "$ROUNDS"); do
    for pair in "$@"; do
        label=${pair%%=*} BIN=${pair#*=}
        chmod +x "$BIN"
        start_live /tmp/f.jsonl /tmp/f.err --interval 30s
        p=$LIVE_PID c0=$(ctxt $p) u0=$(cpu $p) t0=$(date +%s%N)
        for _ in $(seq 1 "$EXITS"); do /bin/true; done
        t1=$(date +%s%N) c1=$(ctxt $p) u1=$(cpu $p)
        kill -INT $p; wait $p
        stats=$(tail -n 1 /tmp/f.jsonl | python3 -c 'import json, sys
d = json.load(sys.stdin)
s = [x for x in d["program_stats"] if x["program"] == "sched_process_exit"]
print("exit_runs=%d exit_ns=%.0f lost=%d" % (s[0]["run_count"], s[0]["ns_per_run"], d["lost_events"]) if s else "no-stats")')
        echo "$label round=$round exits=$EXITS wall_ms=$(( (t1 - t0) / 1000000 )) tracer_ticks=$((u1 - u0)) tracer_ctxt=$((c1 - c0)) $stats"
    done
done | tee "$OUT/forks.txt"
echo 0 > /proc/sys/kernel/bpf_stats_enabled
