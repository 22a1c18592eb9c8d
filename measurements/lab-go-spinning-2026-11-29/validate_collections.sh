#!/usr/bin/env bash
# Three earlier collections' held-out runs validated without the spinning threads (SHARE=0: every wake's CPU on the
# request's path, as before) and as shipped, fast engine, each with the model fitted on its own calibration. Run from
# the repository's root; writes validation/COLLECTION-{before,after}.txt.
set -euo pipefail
D=measurements/lab-go-spinning-2026-11-29
W=measurements/lab-wakeup-priority-2026-11-29/woken-first
run() {  # name model run-dirs...
  local name=$1 model=$2; shift 2
  SHARE=0 python $D/validate_share.py --model "$model" "$@" > $D/validation/$name-before.txt 2>/dev/null
  python $D/validate_share.py --model "$model" "$@" > $D/validation/$name-after.txt 2>/dev/null
}
L=measurements/lab-baseline-cpu-2026-11-29
run lab-baseline-cpu $W/lab-baseline-cpu-2026-11-29/envoy-lab.yaml $L/baselines $L/baselines-loaded $L/closed $L/paced
L=measurements/lab-baseline-by-rate-2026-11-29
run lab-baseline-by-rate $W/lab-baseline-by-rate-2026-11-29/envoy-lab.yaml $L/baselines $L/baselines-loaded $L/closed \
  $L/paced
L=measurements/lab-garbage-collection-2026-11-29/session
run lab-garbage-collection $L/envoy-lab.yaml $L/baselines $L/baselines-loaded $L/closed $L/paced
