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
