#!/bin/sh
# End-to-end check of the fault decoder against a real kernel: boots Debian's
# 6.1 kernel under qemu with an emulated Intel IOMMU and the `edu` device,
# makes edu DMA to an unmapped IOVA (a real VT-d fault), and runs
#  - the opt-in /dev/kmsg follower self-test (writes one marker line into the
#    VM's kernel log; never run that test on a shared host), and
#  - `gpudirect-trace explain` on the VM's /dev/kmsg (snapshot mode).
# Expected: the follower test passes and explain reports a vtd fault for
# 0000:00:03.0 at 0x123000, reason 0x05, access write.
#
# Usage: tests/vm/faults_vtd_kmsg.sh   (needs qemu-system-x86_64, busybox,
# apt-get; CARGO_TARGET_DIR honoured). Steps from docs/faults.md.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T=${CARGO_TARGET_DIR:-$ROOT/target}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cd "$ROOT"
cargo build -p gpudirect-trace
TESTBIN=$(cargo test -p gpudirect-trace --lib --no-run --message-format=json 2>/dev/null \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
cd "$W"
apt-get download "$(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | sort -V | tail -1 | cut -d' ' -f1)"
dpkg-deb -x linux-image-*.deb root
mkdir -p initrd/bin initrd/proc initrd/sys initrd/dev initrd/tmp initrd/lib64 initrd/lib/x86_64-linux-gnu
cp "$(command -v busybox)" initrd/bin/
cp /lib64/ld-linux-x86-64.so.2 initrd/lib64/
cp /lib/x86_64-linux-gnu/libc.so.6 /lib/x86_64-linux-gnu/libgcc_s.so.1 initrd/lib/x86_64-linux-gnu/
cp "$T/debug/gpudirect-trace" initrd/bin/
cp "$TESTBIN" initrd/bin/faults-tests
cat > initrd/init <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
GPUDIRECT_TRACE_KMSG_SELFTEST=1 /bin/faults-tests faults::kmsg --include-ignored 2>&1 | tail -3
for d in /sys/bus/pci/devices/*; do
  [ "$(cat $d/vendor)" = 0x1234 ] && [ "$(cat $d/device)" = 0x11e8 ] && E=$d
done
# Bus master + memory decode (PCI command register), then edu BAR0 DMA
# registers: source 0x40000 (edu buffer), destination IOVA 0x123000 (unmapped),
# length 64, command 3 = start, device to RAM.
printf '\006\001' | dd of=$E/config bs=1 seek=4 count=2 conv=notrunc 2>/dev/null
B=$(($(head -1 $E/resource | cut -d' ' -f1)))
devmem $((B+0x80)) 64 0x40000; devmem $((B+0x88)) 64 0x123000
devmem $((B+0x90)) 64 64; devmem $((B+0x98)) 64 3
sleep 1
/bin/gpudirect-trace explain --json | grep -E '"(source|device|address|reason_code|access)"'
poweroff -f
INIT
chmod +x initrd/init
(cd initrd && find . | cpio -o -H newc 2>/dev/null | gzip -1 > ../initrd.gz)
timeout 300 qemu-system-x86_64 -M q35,kernel-irqchip=split -m 1024 -nographic -no-reboot \
  -device intel-iommu,intremap=on,caching-mode=on -device edu \
  -kernel root/boot/vmlinuz-* -initrd initrd.gz \
  -append "console=ttyS0 intel_iommu=on iommu.strict=1 quiet panic=-1"
