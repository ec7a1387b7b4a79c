# Sourced by the scripts here, after `set -u` and with their own arguments,
# so that each says only what is its own: sets BIN (the first argument,
# required; the usage line is the caller's USAGE), OUT (default ./gpu-out,
# created) and HERE (this folder, for the helpers beside it), and makes BIN
# executable (a binary copied onto the host may have lost its mode).
BIN=${1:?usage: $USAGE}
OUT=${OUT:-./gpu-out}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$OUT"
chmod +x "$BIN"

# start_live JSONL ERR ARGS...: starts `$BIN live --json ARGS` in the
# background, its output in JSONL and its stderr in ERR, leaves its pid in
# LIVE_PID and waits (up to 60 s) for "probes attached". ERR is removed
# first: the redirection truncates it only in the background child, so the
# wait could read an earlier tracer's line and start the workload before
# this one attached (the VM's workload.sh did, 43787c8).
start_live() {
    local jsonl=$1 err=$2
    shift 2
    rm -f "$err"
    "$BIN" live --json "$@" > "$jsonl" 2> "$err" &
    LIVE_PID=$!
    for _ in $(seq 1 120); do
        grep -q "probes attached" "$err" 2> /dev/null && break
        sleep 0.5
    done
}
