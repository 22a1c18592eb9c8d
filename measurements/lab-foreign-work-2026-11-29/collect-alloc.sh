#!/bin/bash
# The 2026-11-28 neighbours again (../lab-chain-cpu-2026-11-28/collect.sh, steps 4-5), this time interleaved with
# the quiet runs: the sidecar pair paced at 1 500 rps and 16 connections alone, beside two loops that copy a 256 KB
# buffer into a fresh bytes object every pass (`c = bytes(b)`: an allocation and a free per copy), beside two such
# loops over 64 MB (each allocation mmaps and faults in fresh pages). Three rounds. Every run 1 KB, 5 s.
set -e
O=${1:-.}
MESHSIM=${MESHSIM:-meshsim}
run() { $MESHSIM lab run --duration 5 --payload 1024 --connections 16 --topology single --mode sidecar --rps 1500 \
          --json --out "$@" > /dev/null; }
alloc() {  # BYTES: copy BYTES into a fresh object, again and again; until killed
  python3 -c "import sys
b = bytearray(int(sys.argv[1]))
while True:
    c = bytes(b)" "$1" &
}
beside() {  # BYTES DIR
  local pids=()
  for _ in 1 2; do alloc "$1"; pids+=($!); done
  sleep 0.5
  run "$O/$2"
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
}
for round in 1 2 3; do
  echo "round $round $(date -u +%H:%M:%S)"
  run "$O/alloc-quiet"
  beside 262144 alloc-256k
  beside 67108864 alloc-64m
done
