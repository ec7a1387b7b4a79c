#!/bin/sh
# A device pulled out of its slot during DMA: the virtio-blk disk behind a
# PCIe root port is read (DMA through the IOMMU) while qemu removes it
# (device_del: the slot's attention button, pciehp powers it off and the
# kernel removes the device), after an uncorrectable AER from the emulated
# hardware; then a NIC is put into the empty slot (device_add), which 7.x's
# pciehp reports through pci:pci_hp_event (qemu 7.2's slot then reads "card
# not present"). report --json must say 0000:01:00.0 is gone, with its
# first cause (the AER) and what followed (the removal, from the kernel's
# uevent on every kernel; the slot's event on 7.x), and the DMA it did
# before (check=pcie-remove). qemu has no surprise removal: device_del is
# the orderly attention-button removal.
# gdt-vm: kernels=6.12,newest devices=blk-port iommu=intel modules=e1000e timeout=300 check=pcie-remove
set -e
. /scenarios/common.lib
traced - /tmp/rec.err record -o /tmp/rm.gdt --duration 60s
disk=$(ls /sys/bus/pci/devices/$GDT_BLKPORT_BDF/virtio*/block)
( while dd if=/dev/$disk of=/dev/null bs=64k count=64 2>/dev/null; do
      echo 3 > /proc/sys/vm/drop_caches; done ) &
reader=$!
sleep 1
monitor pcie_aer_inject_error vblk1 0x4000
sleep 1
monitor device_del vblk1
# pciehp waits 5 s after the attention button before it powers the slot off.
i=0
while [ -e /sys/bus/pci/devices/$GDT_BLKPORT_BDF ] && [ $i -lt 40 ]; do sleep 0.5; i=$((i + 1)); done
ls /sys/bus/pci/devices
kill $reader 2>/dev/null || true
monitor device_add e1000e,id=nic2,bus=rp1,romfile=
# pciehp powers the slot on 5 s after the button.
sleep 8
kill -INT $tracer
wait $tracer || true
cat /tmp/rec.err
gpudirect-trace report /tmp/rm.gdt | tail -n 20
gpudirect-trace report /tmp/rm.gdt --json
