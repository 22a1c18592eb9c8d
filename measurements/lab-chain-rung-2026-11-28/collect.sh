#!/bin/bash
# One session on one host: the standard plan's calibration, a loaded chain2 (the rung a chain-dependent wake cost
# would be fitted on), and held-out loaded chains; every run 1 KB, 5 s. MESHSIM names the command.
set -e
O=${1:-.}
MESHSIM=${MESHSIM:-meshsim}
run() { $MESHSIM lab run --duration 5 --payload 1024 "$@"; }
carried() { python3 -c 'import json,sys; print(json.load(sys.stdin)["runs"][0]["achieved_rps"])'; }
$MESHSIM calibrate --lab --model-out "$O/envoy-lab.yaml" --lab-out "$O/calibration" > "$O/calibrate.log" 2>&1
for t in chain2 chain3 chain5; do
  run --topology $t --mode baseline --connections 1 --rps 500 --out "$O/baselines" > /dev/null
done
for round in 1 2; do
  for t in chain2 chain3; do  # closed loop past what the host carries, then paced at 90 % of it
    c=$(run --topology $t --mode sidecar --connections 16 --rps 20000 --out "$O/$t-closed" --json | carried)
    run --topology $t --mode sidecar --connections 16 --rps "$(python3 -c "print(round(0.9 * $c))")" \
      --out "$O/$t-paced" --json > /dev/null
    echo "$t round $round: closed loop carried $c rps"
  done
  run --topology chain3 --mode mtls --connections 16 --rps 20000 --out "$O/chain3-features" > /dev/null
  run --topology chain3 --mode tracing --connections 16 --rps 20000 --out "$O/chain3-features" > /dev/null
  run --topology chain5 --mode sidecar --connections 16 --rps 20000 --out "$O/chain5-closed" > /dev/null
done
