#!/bin/bash
# NVML facts on the GPU host, checked against nvidia-smi at the same moments,
# while two processes hold 1 GiB and 4 GiB of host memory pinned with
# cudaHostRegister; then a CUDA kernel provokes a real Xid 31.
#
# Usage: scripts/gpu-host/nvml-check.sh PATH/TO/gpudirect-trace [HOLD_S]
# Needs: root, the NVIDIA driver (nvidia-smi, libnvidia-ml.so.1), python3
# with PyTorch, nvcc. Writes everything to $OUT/nvml (default ./gpu-out/nvml)
# and ends with a comparison table (nvml-compare.txt):
#   - BAR1 used and the replay counter as doctor read them (its nvml.json
#     readings) vs `nvidia-smi -q` just before and just after;
#   - doctor --baseline against a capture taken before the pinning;
#   - the pinning processes' pids and bytes (pin-*.json) beside the tracer's
#     live --json over the same time (live.jsonl), for per-process checks;
#   - the Xid 31 process's pid (xid31.txt) beside the driver's Xid line
#     (xid-klog.txt) and the tracer's view of it (live.jsonl, doctor-after-xid.txt).
# cudaHostRegister pins host memory; it does not use BAR1 (which maps GPU
# memory for peers), so BAR1 used is compared between tools, not expected to
# grow with the pinned bytes.
set -u
BIN=${1:?usage: nvml-check.sh BIN [HOLD_S]}
HOLD=${2:-20}
OUT=${OUT:-./gpu-out}/nvml
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
chmod +x "$BIN"
T=/sys/kernel/tracing
[ -d $T/events ] || mount -t tracefs nodev $T 2>/dev/null

{ uname -r; nvidia-smi -L; head -1 /proc/driver/nvidia/version; } > "$OUT/host.txt" 2>&1
ldd "$BIN" > "$OUT/ldd.txt" 2>&1

# 1. Idle: doctor (text, JSON) and a capture to compare against later.
nvidia-smi -q > "$OUT/smi-idle.txt" 2>&1
"$BIN" doctor > "$OUT/doctor-idle.txt" 2>&1
"$BIN" doctor --json > "$OUT/doctor-idle.json" 2> "$OUT/doctor-idle.err"
"$BIN" doctor --capture "$OUT/before.tar.gz" 2> "$OUT/capture-before.err"
mkdir -p "$OUT/before" && tar -xzf "$OUT/before.tar.gz" -C "$OUT/before"
# The capture read back: the same NVML findings as the live run above.
"$BIN" doctor --root "$OUT/before" > "$OUT/doctor-root-before.txt" 2>&1

# 2. The tracer over the pinning and the Xid.
"$BIN" live --json --interval 2s > "$OUT/live.jsonl" 2> "$OUT/live.err" &
tr=$!
for i in $(seq 1 120); do grep -q "probes attached" "$OUT/live.err" && break; sleep 0.5; done

# 3. Two processes pin 1 GiB and 4 GiB and hold them.
rm -f "$OUT"/pin-*.ready
python3 "$HERE/pin.py" --gib 1 --seconds "$HOLD" --ready "$OUT/pin-1g.ready" > "$OUT/pin-1g.json" 2> "$OUT/pin-1g.err" &
p1=$!
python3 "$HERE/pin.py" --gib 4 --seconds "$HOLD" --ready "$OUT/pin-4g.ready" > "$OUT/pin-4g.json" 2> "$OUT/pin-4g.err" &
p4=$!
for i in $(seq 1 240); do
  [ -s "$OUT/pin-1g.ready" ] && [ -s "$OUT/pin-4g.ready" ] && break; sleep 0.25
done
date +%s.%N > "$OUT/pinned-at.txt"
# While pinned: nvidia-smi, doctor (two NVML readings 1 s apart), nvidia-smi,
# three times, so each doctor reading is bracketed by nvidia-smi's.
for i in 1 2 3; do
  nvidia-smi -q > "$OUT/smi-pinned-$i-a.txt" 2>&1
  "$BIN" doctor --json > "$OUT/doctor-pinned-$i.json" 2> "$OUT/doctor-pinned-$i.err"
  nvidia-smi -q > "$OUT/smi-pinned-$i-b.txt" 2>&1
  sleep 1
done
"$BIN" doctor --baseline "$OUT/before.tar.gz" > "$OUT/doctor-vs-before.txt" 2>&1
"$BIN" doctor --capture "$OUT/pinned.tar.gz" 2> "$OUT/capture-pinned.err"
wait $p1 $p4

# 4. Xid 31: a kernel writing to an unmapped GPU address.
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$NVCC" -O2 -o /tmp/xid31 "$HERE/xid31.cu" > "$OUT/nvcc.txt" 2>&1
klog_before=$(dmesg 2>/dev/null | wc -l)
/tmp/xid31 > "$OUT/xid31.txt" 2>&1
sleep 2
dmesg 2>/dev/null | tail -n +"$((klog_before + 1))" | grep -E "NVRM|Xid" > "$OUT/xid-klog.txt"
"$BIN" doctor > "$OUT/doctor-after-xid.txt" 2>&1
sleep 3
kill -INT $tr; wait $tr

# 5. Compare.
python3 - "$OUT" <<'PY' | tee "$OUT/nvml-compare.txt"
import glob, json, os, re, sys
out = sys.argv[1]

def smi(path):
    """Per bus id: BAR1 used MiB and replays from nvidia-smi -q (580 has no PCIE display filter)."""
    res, bus, sect = {}, None, None
    if not os.path.exists(path):
        return res
    for line in open(path, errors="replace"):
        m = re.match(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-7])", line)
        if m:
            d, b, rest = m.group(1).split(":", 2)
            bus = f"{int(d, 16):04x}:{b.lower()}:{rest.lower()}"
            res[bus] = {}
            continue
        s = line.strip()
        if s.startswith("BAR1 Memory Usage"):
            sect = "bar1"
        elif s.startswith("FB Memory Usage") or s.startswith("Conf Compute"):
            sect = None
        elif bus and sect == "bar1" and s.startswith("Used"):
            res[bus]["bar1_used_mib"] = int(s.split(":")[1].split()[0])
        elif bus and s.startswith("Replays Since Reset"):
            res[bus]["replays"] = int(s.split(":")[1])
    return res

def doctor(path):
    try:
        r = json.load(open(path))
    except Exception as e:
        return None, f"unreadable ({e})"
    st = r["nvml"]["status"]
    if st["state"] != "available":
        return None, "NVML not available: " + st.get("why", "")
    res = {}
    for s in r["nvml"]["samples"]:
        for g in s["gpus"]:
            d = res.setdefault(g["identity"]["bus_id"], [])
            bar1 = g["bar1"].get("ok", {}).get("used")
            rep = g["pcie"]["replays"].get("ok")
            d.append((bar1 >> 20 if bar1 is not None else None, rep))
    return res, None

print("BAR1 used (MiB) and PCIe replays: nvidia-smi before | doctor's 2 readings | nvidia-smi after")
ok = True
for i in (1, 2, 3):
    a = smi(f"{out}/smi-pinned-{i}-a.txt")
    b = smi(f"{out}/smi-pinned-{i}-b.txt")
    d, err = doctor(f"{out}/doctor-pinned-{i}.json")
    if err:
        print(f"  round {i}: doctor {err}"); ok = False; continue
    if not a:
        print(f"  round {i}: no nvidia-smi output"); ok = False
    for bus in sorted(a):
        reads = d.get(bus, [])
        bar = [x for x, _ in reads]; rep = [y for _, y in reads]
        lo = min(a[bus].get("bar1_used_mib", 0), b.get(bus, {}).get("bar1_used_mib", 0))
        hi = max(a[bus].get("bar1_used_mib", 0), b.get(bus, {}).get("bar1_used_mib", 0))
        bar_ok = all(x is not None and lo <= x <= hi for x in bar)
        rlo, rhi = a[bus].get("replays"), b.get(bus, {}).get("replays")
        rep_ok = all(y is not None and rlo <= y <= rhi for y in rep) if None not in (rlo, rhi) else False
        ok &= bar_ok and rep_ok
        print(f"  round {i} {bus}: BAR1 {a[bus].get('bar1_used_mib')} | {bar} | {b.get(bus, {}).get('bar1_used_mib')}"
              f" {'match' if bar_ok else 'MISMATCH'}; replays {rlo} | {rep} | {rhi} {'match' if rep_ok else 'MISMATCH'}")
for p in sorted(glob.glob(f"{out}/pin-*.json")):
    try:
        j = json.loads(open(p).read().strip().splitlines()[-1])
        print(f"  pinned: pid {j['pid']} {j['bytes']} bytes on GPU{j['gpu']} (register {j['register_s']:.2f} s, unregister {j['unregister_s']:.2f} s)")
    except Exception as e:
        print(f"  {os.path.basename(p)}: {e}"); ok = False
x = open(f"{out}/xid31.txt").read() if os.path.exists(f"{out}/xid31.txt") else ""
pid = re.search(r"pid (\d+)", x)
klog = open(f"{out}/xid-klog.txt").read() if os.path.exists(f"{out}/xid-klog.txt") else ""
xid = [l for l in klog.splitlines() if re.search(r"Xid.*: 31,", l)]
print(f"  xid31 pid {pid.group(1) if pid else '?'}; driver lines with Xid 31: {len(xid)}")
for l in xid[:2]:
    print("    " + l.strip())
if pid and xid and not any(f"pid={pid.group(1)}" in l for l in xid):
    print("  the Xid 31 line names another pid"); ok = False
print("RESULT:", "agree" if ok else "DISAGREE (see above)")
PY
