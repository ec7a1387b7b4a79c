#!/bin/sh
# PCIe AER on a named device, recorded and reported offline: a virtio-blk
# disk behind a PCIe root port gets an uncorrectable Completion Timeout from
# qemu's emulated hardware (pcie_aer_inject_error through the monitor), then
# a correctable Receiver Error and an uncorrectable Unsupported Request with
# a TLP header from the kernel's own injector (aer_inject: qemu cannot
# deliver correctable errors; once aer_inject has faked the device's
# registers, qemu's own errors no longer reach the kernel, so qemu's goes
# first). report --json must count each on 0000:01:00.0 by severity and
# bit, with the TLP header, as incidents in order (check=pcie-aer).
# gdt-vm: kernels=6.1,6.12,6.18,newest devices=blk-port iommu=intel modules=aer_inject timeout=300 check=pcie-aer
set -e
. /scenarios/common.lib
trace_on ras/aer_event
traced - /tmp/rec.err record -o /tmp/aer.gdt --duration 60s
monitor pcie_aer_inject_error vblk1 0x4000
i=0
until grep -q TOTAL_ERR_NONFATAL.1 /sys/bus/pci/devices/$GDT_BLKPORT_BDF/aer_dev_nonfatal || [ $i -gt 20 ]; do
    sleep 0.5; i=$((i + 1))
done
gdt-aer-inject --device "$GDT_BLKPORT_BDF" --correctable 0x1
gdt-aer-inject --device "$GDT_BLKPORT_BDF" --uncorrectable 0x100000 \
    --header 0x40000001 0x0000000f 0xfe600000 0x00000000
sleep 2
kill -INT $tracer
wait $tracer || true
cat /tmp/rec.err
echo "TRACEFS aer_event=$(count_tracefs ras/aer_event)"
gpudirect-trace report /tmp/aer.gdt | grep -i -E 'aer|pcie' || true
gpudirect-trace report /tmp/aer.gdt --json
