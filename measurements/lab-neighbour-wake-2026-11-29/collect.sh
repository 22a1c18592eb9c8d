#!/bin/bash
# The sidecar pair at 1 500 rps and 16 connections beside k neighbour processes that each wake every SLEEP seconds
# and copy BYTES (a working set of twice that) before sleeping again; two rounds, conditions interleaved.
# MESHSIM names the command. Every run 1 KB, 5 s.
set -e
O=${1:-.}
MESHSIM=${MESHSIM:-meshsim}
run() { $MESHSIM lab run --duration 5 --payload 1024 --connections 16 --topology single --mode sidecar --rps 1500 \
          --json --out "$@" > /dev/null; }
neighbour() {  # SLEEP_S BYTES: wake, copy BYTES from one private buffer to another, sleep; until killed
  python3 -c "import sys, time
sleep, size = float(sys.argv[1]), int(sys.argv[2])
src, dst = bytearray(max(size, 1)), bytearray(max(size, 1))
while True:
    time.sleep(sleep)
    if size:
        dst[:] = src" "$1" "$2" &
}
beside() {  # K SLEEP_S BYTES DIR
  local pids=()
  for _ in $(seq "$1"); do neighbour "$2" "$3"; pids+=($!); done
  sleep 0.5
  run "$O/$4"
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
}
for round in 1 2; do
  run "$O/quiet"
  beside 2 0.001 262144 k2
  beside 4 0.001 262144 k4
  beside 8 0.001 262144 k8
  beside 8 0.001 0 k8-nocopy
  beside 2 0.00025 262144 k2-fast
done
