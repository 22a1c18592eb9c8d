#!/bin/bash
# The sidecar pair paced at 1 500 rps and 16 connections beside two neighbour processes that copy 256 KB between
# two private buffers (a 512 KB working set) for DUTY x 4 ms of every 4 ms and sleep the rest: the host's foreign
# busy share grows with DUTY while the pair's own load stays the same. Four rounds, the conditions interleaved.
# MESHSIM names the command. Every run 1 KB, 5 s.
set -e
O=${1:-.}
MESHSIM=${MESHSIM:-meshsim}
run() { $MESHSIM lab run --duration 5 --payload 1024 --connections 16 --topology single --mode sidecar --rps 1500 \
          --json --out "$@" > /dev/null; }
neighbour() {  # DUTY: copy 256 KB repeatedly for DUTY x 4 ms, sleep the rest of the 4 ms period; until killed
  python3 -c "import sys, time
duty, period = float(sys.argv[1]), 0.004
src, dst = bytearray(262144), bytearray(262144)
while True:
    end = time.monotonic() + duty * period
    while time.monotonic() < end:
        dst[:] = src
    if duty < 1.0:
        time.sleep((1.0 - duty) * period)" "$1" &
}
beside() {  # DUTY DIR
  local pids=()
  for _ in 1 2; do neighbour "$1"; pids+=($!); done
  sleep 0.5
  run "$O/$2"
  kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
}
for round in 1 2 3 4; do
  echo "round $round $(date -u +%H:%M:%S)"
  run "$O/duty-0"
  beside 0.25 duty-25
  beside 0.5 duty-50
  beside 1.0 duty-100
done
