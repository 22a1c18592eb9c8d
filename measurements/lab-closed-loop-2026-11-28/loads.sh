#!/bin/bash
# Each topology with both sidecars (1 KB, 5 s, 16 connections): in a closed loop past what the host carries
# (20 000 rps requested), then paced at 90 % of what that run carried; two rounds.
set -e
O=${1:-.}
MESHSIM=${MESHSIM:-meshsim}
run() { $MESHSIM lab run --duration 5 --payload 1024 --mode sidecar --connections 16 "$@"; }
for round in 1 2; do
  for t in single chain2 chain3; do
    carried=$(run --topology $t --rps 20000 --out "$O/$t-closed" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["runs"][0]["achieved_rps"])')
    paced=$(python3 -c "print(round(0.9 * $carried))")
    run --topology $t --rps "$paced" --out "$O/$t-paced" --json > /dev/null
    echo "$t round $round: closed loop carried $carried rps, paced at $paced"
  done
done
