#!/bin/sh
# The runs of this folder: two rounds of four setups, un-niced (the manifests record the host's load).
M=${MESHSIM:-meshsim}
for round in 1 2; do
  for spec in "chain3 sidecar 16 700" "chain3 sidecar 16 950" "single sidecar 1 200" "single sidecar 16 2000"; do
    set -- $spec
    echo "$(date -u +%H:%M:%S) round $round: $M lab run --topology $1 --mode $2 --connections $3 --rps $4 --duration 5 --payload 1024 --out runs/$1-c$3-q$4"
    $M lab run --topology $1 --mode $2 --connections $3 --rps $4 --duration 5 --payload 1024 --out runs/$1-c$3-q$4 2>&1 | tail -4
  done
done
