#!/bin/sh
# Across hosts, for real (issue 29): two VMs, node-a and node-b, each run
# `serve` with the flight recorder; a real Prometheus on the host scrapes
# both through loopback port forwards with the shipped rules
# (deploy/prometheus/gpudirect-trace.rules.yml, unchanged) and sends to a
# real Alertmanager. A DMAR fault in node-a only must give one
# GPUDirectIOMMUFault alert naming node-a and the edu, none for node-b, and
# a snapshot on node-a only (xtask/src/vm/fleet.rs checks it).
# The rules count a new counter series only when it grows (or when the
# target was scraped 5 minutes before its birth), so node-a faults once,
# waits until Prometheus holds the new series, and faults again.
# gdt-vm: kernels=6.12 devices=edu,net iommu=intel timeout=300 fleet=node-a,node-b
set -e
. /scenarios/common.lib
net_up
mkdir -p /tmp/snaps
# 0.0.0.0: the host's forward arrives on eth0. The user-mode network is this
# VM's alone (restrict=on), reachable only through the host's loopback.
gpudirect-trace serve --listen 0.0.0.0:9435 --snapshot-dir /tmp/snaps --ring 30s \
    --trigger fault --after 1s 2> /tmp/serve.err &
srv=$!
wait_for /tmp/serve.err "serving http" $srv
fleet scraped
if [ "$GDT_NODE" = "$GDT_FLEET_FAULT" ]; then
    gdt-dma-inject --device "$GDT_EDU_BDF" --iova 0x123000 --len 64 --dir write
    fleet counted
    gdt-dma-inject --device "$GDT_EDU_BDF" --iova 0x124000 --len 64 --dir write
fi
# The host keeps every exporter up until the alert is in the Alertmanager.
fleet done
kill -TERM $srv
wait $srv || true
tail -n 5 /tmp/serve.err
echo "DMAR faults logged: $(dmesg | grep -c 'DMAR: \[DMA' || true)"
ls /tmp/snaps | sed 's/^/FILE /'
