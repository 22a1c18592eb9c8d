#!/bin/bash
# The held-out lab set, two rounds; every run --payload 1024, 5 s.
set -e
M=meshsim
O=${1:-.}
run() { $M lab run --duration 5 --payload 1024 "$@"; }
run --topology chain3 --mode baseline --connections 1 --rps 500 --out $O/baselines
run --topology chain5 --mode baseline --connections 1 --rps 500 --out $O/baselines
run --topology bookinfo --mode baseline --connections 1 --rps 500 --out $O/baselines
for round in 1 2; do
  run --topology chain3 --mode mtls --connections 16 --rps 1000 --out $O/round$round
  run --topology chain3 --mode tracing --connections 16 --rps 1000 --out $O/round$round
  run --topology chain5 --mode sidecar --connections 4 --rps 600 --out $O/round$round
  run --topology bookinfo --mode sidecar --connections 4 --rps 600 --out $O/round$round
  run --topology lb3 --mode proxy-lb --connections 8 --rps 2000 --out $O/round$round
  run --topology single --mode sidecar --connections 16 --rps 4000 --out $O/round$round
done
