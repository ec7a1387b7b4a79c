#!/bin/bash
# Stop 53's changes on real hardware: a recording keeps the names the host
# gives the class devices on each PCI function, `report --device NAME` finds
# the function by them (and GPU0 by the recording's GPUs), the end's note
# names a value as typed, and a GPU the recording lacks is said as the
# recording's. Usage: session17.sh BIN.
set -u
USAGE="session17.sh BIN"
. "$(dirname "$0")/prelude.sh"
{ uname -r; nvidia-smi -L; "$BIN" --version; } > "$OUT/host.txt" 2>&1
"$BIN" record -o "$OUT/r.gdt" --duration 20s > "$OUT/record.out" 2> "$OUT/record.err" &
R=$!
for _ in $(seq 1 120); do
    grep -q "probes attached" "$OUT/record.err" 2> /dev/null && break
    sleep 0.5
done
timeout 15 python3 "$HERE/workload.py" --iters 300 > "$OUT/workload.txt" 2>&1
wait $R
echo "record rc=$?" >> "$OUT/host.txt"
inventory='import json, sys
d = json.load(sys.stdin)
for x in d["header"]["devices"]:
    print(x["bus_id"], x.get("driver") or "-", " ".join(x.get("names") or []))'
"$BIN" report "$OUT/r.gdt" --json 2> /dev/null | python3 -c "$inventory" > "$OUT/inventory.txt" 2>&1
rows='import json, sys
d = json.load(sys.stdin)
print(" ".join("%s(%s):%d" % (x["device"], x.get("driver"), x["maps"]) for x in d["devices"]) or "(none)")'
# Every name the recording kept, then GPU0, a GPU it lacks and a name it lacks.
names=$(awk '{for (i = 3; i <= NF; i++) print $i}' "$OUT/inventory.txt")
for n in $names GPU0 GPU7 gdt-no-such-name; do
    echo "== --device $n"
    "$BIN" report "$OUT/r.gdt" --json --device "$n" 2>&1 > "$OUT/by.json"
    echo "rc=$?"
    python3 -c "$rows" < "$OUT/by.json" 2>/dev/null
done > "$OUT/by-name.txt" 2>&1
cd "$OUT" && tar czf session17.tgz host.txt record.err inventory.txt by-name.txt workload.txt
