#!/bin/bash
# Issue 27 on the GPU host: the H200's PCIe link row (Gen5 x16 of Gen5 x16)
# and no false downtrain while a workload runs, then idles. live --json
# over ~40 s: 20 s of PyTorch DMA, then idle; the link as sysfs and NVML
# show it sampled every second beside it (the GPU lowers its speed when
# idle); doctor's link finding; serve's pcie series. Usage: session7.sh
# BIN; results in $OUT.
set -u
USAGE="session7.sh BIN"
. "$(dirname "$0")/prelude.sh"
{ uname -r; nvidia-smi -L 2>/dev/null; } > "$OUT/host.txt" 2>&1
"$BIN" probes > "$OUT/probes.txt" 2>&1
GPU=$(ls -d /sys/bus/pci/drivers/nvidia/0000:* 2>/dev/null | head -1 | xargs -n1 basename)
echo "gpu $GPU" >> "$OUT/host.txt"
( for i in $(seq 1 45); do
    printf '%s %s x%s | nvml %s\n' "$(date +%s.%N | cut -c1-14)" \
      "$(cat /sys/bus/pci/devices/$GPU/current_link_speed)" \
      "$(cat /sys/bus/pci/devices/$GPU/current_link_width)" \
      "$(nvidia-smi --query-gpu=pcie.link.gen.current,pcie.link.width.current,pstate,utilization.gpu --format=csv,noheader 2>/dev/null | head -1)"
    sleep 1
  done ) > "$OUT/link-samples.txt" 2>&1 &
sampler=$!
"$BIN" live --json --interval 5s --duration 42s > "$OUT/live.jsonl" 2> "$OUT/live.err" &
tr=$!
for i in $(seq 1 120); do grep -q "probes attached" "$OUT/live.err" && break; sleep 0.5; done
python3 "$HERE/workload.py" --iters 60000 > "$OUT/workload.json" 2>&1 &
wl=$!
( sleep 20; kill $wl 2>/dev/null ) &
wait $wl
wait $tr
wait $sampler
"$BIN" doctor > "$OUT/doctor.txt" 2>&1
"$BIN" serve --listen 127.0.0.1:19400 > "$OUT/serve.out" 2>&1 &
sv=$!
sleep 8
python3 -c 'import urllib.request;print(urllib.request.urlopen("http://127.0.0.1:19400/metrics").read().decode())' 2>&1 | grep -E '^gpudirect_pcie|^gpudirect_gpu_pcie' > "$OUT/metrics.txt"
kill -INT $sv; wait $sv
python3 - "$OUT/live.jsonl" > "$OUT/summary.txt" 2>&1 <<'PY'
import json, sys
objs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
for v in objs:
    for d in v["devices"]:
        l = d.get("pcie_link")
        if l:
            print(round(v["elapsed_s"], 1), d["device"], json.dumps(l, sort_keys=True))
last = objs[-1]
print("incidents", [i["text"] for i in last["incidents"] if i["category"] == "pcie-link"])
print("timelines", last.get("device_timelines"))
print("lost", last["lost_events"], "missed", last["missed_events"])
PY
grep -i -E 'pcie.link|link runs|link at' "$OUT/doctor.txt" >> "$OUT/summary.txt"
cat "$OUT/summary.txt" "$OUT/metrics.txt"
