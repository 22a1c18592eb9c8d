#!/bin/bash
# The sidecar pair at 16 connections past what the host carries: paced at 9 000 rps (the standard plan's top rung)
# and a closed loop (20 000 requested), interleaved, three rounds. MESHSIM names the command. Every run 1 KB, 5 s.
set -e
O=${1:-.}
MESHSIM=${MESHSIM:-meshsim}
for round in 1 2 3; do
  for q in 9000 20000; do
    $MESHSIM lab run --duration 5 --payload 1024 --connections 16 --topology single --mode sidecar --rps $q \
      --json --out "$O/shape/$q" > /dev/null
  done
done
