#!/bin/bash
set -e
M=meshsim
O=${1:-.}
run() { $M lab run --duration 5 --payload 1024 "$@"; }
for round in 1 2; do
  run --topology chain3 --mode sidecar --connections 16 --rps 3000 --out $O/saturated
  run --topology chain3 --mode mtls --connections 16 --rps 3000 --out $O/saturated
  run --topology chain3 --mode tracing --connections 16 --rps 3000 --out $O/saturated
done
