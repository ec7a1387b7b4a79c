#!/bin/sh
# `cargo xtask bench --vm` (and `--workload` alone): issue 28 item 4's
# workload cost. gdt-randread, a fio-like O_DIRECT 4 KiB random-read load
# (GDT_BENCH_THREADS reads in flight, one thread each) on the VM's NVMe for
# GDT_BENCH_SECS, as fast as it completes, run without the tracer and under
# each mode of gpudirect-trace live --json (streaming, aggregate-only,
# aggregate-only --no-lifetimes), interleaved over GDT_BENCH_ROUNDS rounds
# (each round starts one mode later, so no mode always runs first). The
# tracer is attached and idle before the load starts and stopped after it,
# so the load's window holds only its per-event cost and its reader. Prints
# BENCH-VM-WL lines for the host to parse (bench_vm_workload.rs).
set -e
. /scenarios/common.lib
DEV=/dev/nvme0n1
SECS=${GDT_BENCH_SECS:-4}
ROUNDS=${GDT_BENCH_ROUNDS:-5}
THREADS=${GDT_BENCH_THREADS:-4}
echo "BENCH-VM-WL config seconds=$SECS rounds=$ROUNDS threads=$THREADS block=4096 device=$DEV"
# Warm-up, as long as a measured run: after a 1 s warm-up the first
# untraced run of a boot reached 1692 IOPS against 5293 and 5859 in the
# later rounds (6.12 under TCG, whose translation cache is still filling).
gdt-randread --device $DEV --seconds $SECS --threads $THREADS > /dev/null
load() {
    echo "BENCH-VM-WL round=$1 mode=$2 $(gdt-randread --device $DEV --seconds $SECS --threads $THREADS)"
}
load_traced() {
    round=$1
    mode=$2
    shift 2
    # common.lib's `traced`: it starts each tracer with a fresh stderr
    # file. This script once kept its own copy that reused /tmp/wl.err, so
    # wait_for could read the previous tracer's "probes attached": the load
    # ran untraced and the SIGINT came while SIGINT was still ignored (a
    # background job of a script), and the tracer ran on (6.1, one run in
    # three).
    traced /tmp/wl.json /tmp/wl.err live --json "$@" --duration 600s > /dev/null
    t=$tracer
    load $round $mode
    # A tracer that is gone already (it exited on its own during the load)
    # would make `kill` fail and, under `set -e`, end the script without a
    # word: say so, with what it said, and go on.
    if ! kill -INT $t 2> /dev/null; then
        echo "BENCH-VM-WL-GONE round=$round mode=$mode the tracer exited during the load:"
        tail -n 20 /tmp/wl.err
    fi
    # A tracer that does not exit within 60 s of SIGINT (normal: ~4 s under
    # TCG) is reported with where each of its threads is in the kernel and
    # what it last said, then killed, instead of leaving a silent console.
    (
        sleep 60
        if kill -0 $t 2> /dev/null; then
            echo "BENCH-VM-WL-STUCK round=$round mode=$mode the tracer did not exit 60 s after SIGINT"
            for task in /proc/$t/task/*; do
                echo "BENCH-VM-WL-STUCK task ${task##*/} $(cat $task/comm) state $(grep State $task/status)"
                sed 's/^/BENCH-VM-WL-STUCK   /' $task/stack
            done
            tail -n 20 /tmp/wl.err
            kill -9 $t
        fi
    ) &
    w=$!
    wait $t || true
    kill $w 2> /dev/null || true
    echo "BENCH-VM-WL-JSON round=$round mode=$mode $(tail -n 1 /tmp/wl.json)"
}
run_mode() {
    case $2 in
    none) load $1 none ;;
    streaming) load_traced $1 streaming ;;
    aggregate) load_traced $1 aggregate --aggregate-only ;;
    no-lifetimes) load_traced $1 no-lifetimes --aggregate-only --no-lifetimes ;;
    esac
}
round=1
while [ $round -le $ROUNDS ]; do
    set -- none streaming aggregate no-lifetimes
    i=1
    while [ $i -lt $round ]; do
        m=$1
        shift
        set -- "$@" $m
        i=$((i + 1))
    done
    for mode in "$@"; do run_mode $round $mode; done
    round=$((round + 1))
done
echo "BENCH-VM-WL done"
