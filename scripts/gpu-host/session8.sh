#!/bin/bash
# Issues 29 and 30 on the GPU host: serve's flight recorder with real Xid 31s
# (a CUDA kernel writing to an unmapped address), the snapshot directory kept
# to 2 snapshots (--snapshot-max-count), each snapshot's ring holding at least
# its 8 s before the Xid while PyTorch DMA runs, then `report DIR` over what is
# left (the fleet summary of one host). Usage: session8.sh BIN; results in $OUT.
set -u
USAGE="session8.sh BIN"
. "$(dirname "$0")/prelude.sh"
{ uname -r; nvidia-smi -L 2>/dev/null; } > "$OUT/host.txt" 2>&1
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$NVCC" -O2 -o /tmp/xid31 "$HERE/xid31.cu" > "$OUT/nvcc.txt" 2>&1
SNAPS=/tmp/gdt-snaps-$$
PORT=19401
"$BIN" serve --listen 127.0.0.1:$PORT --ring 8s --trigger xid --after 1s \
    --min-spacing 0s --snapshot-dir "$SNAPS" --snapshot-max-count 2 \
    > "$OUT/serve.out" 2> "$OUT/serve.err" &
sv=$!
scrape() {
  python3 -c "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:$PORT/metrics',timeout=5).read().decode())" 2>/dev/null
}
for i in $(seq 1 120); do scrape > /dev/null && break; sleep 0.5; done
date +%s.%N > "$OUT/times.txt"
python3 "$HERE/workload.py" --iters 200000 > "$OUT/workload.json" 2>&1 &
wl=$!
sleep 12
for n in 1 2 3; do
  echo "xid31 $n $(date +%s.%N)" >> "$OUT/times.txt"
  /tmp/xid31 > "$OUT/xid31-$n.txt" 2>&1
  sleep 5
done
kill $wl 2>/dev/null; wait $wl 2>/dev/null
scrape | grep -E '^gpudirect_(snapshot|flight)' > "$OUT/metrics.txt"
kill -INT $sv; wait $sv
ls -la "$SNAPS" > "$OUT/snaps.txt" 2>&1
"$BIN" report "$SNAPS" > "$OUT/fleet.txt" 2>&1
"$BIN" report "$SNAPS" --json > "$OUT/fleet.json" 2> /dev/null
for f in "$SNAPS"/gdt-*.gdt; do
  echo "== $f"; "$BIN" report "$f" 2>&1 | head -3
done > "$OUT/snapshot-heads.txt"
dmesg | grep -E 'Xid' | tail -5 > "$OUT/dmesg-xid.txt"
cat "$OUT/snaps.txt" "$OUT/metrics.txt" "$OUT/serve.err" "$OUT/snapshot-heads.txt" "$OUT/fleet.txt" | cut -c1-300
rm -rf "$SNAPS"
