#!/bin/bash
# A fault storm on one CPU, builds interleaved (session 19): the host test
# rare_wakeups injects 2000 IOMMU faults through BPF_PROG_TEST_RUN on the
# real io_page_fault program and counts the reader's wake-ups (edges of an
# edge-triggered epoll on the ring) and the storm's wall time. A build
# without the wake-up limit fails the test's bound after printing its line.
# Usage: session19.sh ROUNDS LABEL=HOSTTEST...; results in $OUT/storm.txt.
set -u
ROUNDS=${1:?usage: session19.sh ROUNDS LABEL=HOSTTEST...}
shift
{ uname -r; nproc; grep -H . /sys/devices/system/cpu/vulnerabilities/{spec_rstack_overflow,spectre_v2} 2>/dev/null; } \
    > "$OUT/host.txt" 2>&1
TEST=rare_wakeups::a_fault_storm_wakes_the_reader_once_a_millisecond_not_per_fault
for round in $(seq 1 "$ROUNDS"); do
    for pair in "$@"; do
        label=${pair%%=*} HT=${pair#*=}
        chmod +x "$HT"
        line=$(timeout 60 "$HT" --exact --nocapture "$TEST" 2>&1 | grep -E '^storm:|test result')
        echo "$label round=$round" $line
    done
done | tee "$OUT/storm.txt"
