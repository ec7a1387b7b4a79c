#!/bin/sh
# doctor inside a guest with VT-d on (an e1000e NIC, an NVMe): it must see the IOMMU, the NIC's IOMMU
# groups and their default domain type; a --capture snapshot of the same guest,
# read back with --root, must give the same findings (checked on the host:
# check=doctor-vtd).
# gdt-vm: kernels=6.1,6.12,6.18,newest devices=nvme,e1000e iommu=intel timeout=300 check=doctor-vtd
set -e
gpudirect-trace doctor --json > /tmp/live.json || [ $? -eq 4 ]
gpudirect-trace doctor --capture /tmp/snap.tar.gz
mkdir -p /tmp/snap && tar -xzf /tmp/snap.tar.gz -C /tmp/snap
root=$(find /tmp/snap -maxdepth 2 -name proc -type d | head -n 1)
gpudirect-trace doctor --root "$(dirname "$root")" --json > /tmp/snap.json || [ $? -eq 4 ]
cat /tmp/live.json /tmp/snap.json
