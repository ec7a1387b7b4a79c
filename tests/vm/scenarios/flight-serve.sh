#!/bin/sh
# The always-on exporter runs the flight recorder too: `serve --snapshot-dir`
# with three faults within one second and the default 10 s spacing writes one
# snapshot, and the metrics count the two other triggers as suppressed
# (check=flight-serve).
# gdt-vm: kernels=6.12 devices=edu iommu=intel timeout=300 check=flight-serve
set -e
. /scenarios/common.lib
ip link set lo up
mkdir -p /tmp/snaps
gpudirect-trace serve --listen 127.0.0.1:9435 --snapshot-dir /tmp/snaps --ring 30s \
    --trigger fault --after 2s 2> /tmp/serve.err &
srv=$!
wait_for /tmp/serve.err "serving http" $srv
for iova in 0x123000 0x124000 0x125000; do
    gdt-dma-inject --device "$GDT_EDU_BDF" --iova $iova --len 64 --dir write
done
# The kernel log is polled every 100 ms and the snapshot closes 2 s after the
# first fault; give both time.
sleep 5
wget -q -O /tmp/metrics http://127.0.0.1:9435/metrics
kill -TERM $srv
wait $srv || true
cat /tmp/serve.err
grep -E '^gpudirect_(snapshot|snapshots|flight)' /tmp/metrics | sed 's/^/METRIC /'
ls /tmp/snaps | sed 's/^/FILE /'
for f in /tmp/snaps/gdt-*.gdt; do
    [ -e "$f" ] && echo "REPORT $(gpudirect-trace report "$f" --json)"
done
