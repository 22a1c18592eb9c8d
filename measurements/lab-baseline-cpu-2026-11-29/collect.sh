#!/bin/bash
# One session on one host (2026-11-29): held-out rounds before and after the standard plan's calibration, so that the
# host's drift across the session shows in the pair's closed loops of both rounds. MESHSIM names the command.
# Every run 1 KB, 5 s.
set -e
O=${1:-.}
MESHSIM=${MESHSIM:-meshsim}
run() { $MESHSIM lab run --duration 5 --payload 1024 "$@" --json > /dev/null; }
heldout() {  # one round: the pair and chain3 in closed loops (plain, mTLS; chain3 with tracing too), paced at 800
  run --connections 16 --topology single --mode sidecar --rps 20000 --out "$O/closed"
  for mode in sidecar mtls tracing; do
    run --connections 16 --topology chain3 --mode $mode --rps 20000 --out "$O/closed"
  done
  run --connections 16 --topology single --mode mtls --rps 20000 --out "$O/closed"
  for t in single chain3; do
    run --connections 16 --topology $t --mode sidecar --rps 800 --out "$O/paced"
  done
}
# 1. the chain's baselines (the replay derives its forwarding apps from them): one connection, then loaded
run --topology chain3 --mode baseline --connections 1 --rps 500 --out "$O/baselines"
for q in 20000 800; do
  run --topology chain3 --mode baseline --connections 16 --rps $q --out "$O/baselines-loaded"
done
# 2. a held-out round, the calibration, a held-out round
heldout
$MESHSIM calibrate --lab --model-out "$O/envoy-lab.yaml" --lab-out "$O/calibration" > "$O/calibrate.log" 2>&1
heldout
