#!/bin/bash
# The sidecar pair (single, both sidecars) at c=16 and 1500 rps, 1 KB, 5 s, alone and beside six neighbour processes
# (polluter.c: sleep, then write one byte per cache line of a working set for a burst), each setup twice.
# Usage: gcc -O2 -o polluter polluter.c && bash neighbours.sh [OUT]
set -e
O=${1:-.}/neighbours
run() { # label, working set bytes, burst us, sleep us (no neighbours with bytes 0)
  pids=()
  if [ "$2" != 0 ]; then for k in 1 2 3 4 5 6; do ./polluter "$2" "$3" "$4" & pids+=($!); done; sleep 0.5; fi
  meshsim lab run --topology single --mode sidecar --connections 16 --rps 1500 --duration 5 --payload 1024 \
    --out "$O/$1" > /dev/null
  for p in "${pids[@]}"; do kill "$p"; done; wait 2>/dev/null || true
}
for round in 1 2; do   # 16:02: light neighbours, 0.25 of a core in all
  run alone-1 0; run light-small 16384 100 2000; run light-large 4194304 100 2000
done
for round in 1 2; do   # 16:04: heavy (1.1 cores) and medium (0.5 cores) neighbours
  run alone-2 0; run heavy-small 16384 300 1000; run heavy-large 4194304 300 1000
  run medium-small 16384 100 1000; run medium-large 4194304 100 1000
done
for round in 1 2; do   # 16:05: frequent wakers (20 us every 100 us: 0.7 cores), which preempt the sidecars
  run alone-3 0; run frequent-small 16384 20 100; run frequent-large 1048576 20 100
done
