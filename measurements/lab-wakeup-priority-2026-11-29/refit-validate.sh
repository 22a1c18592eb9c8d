#!/bin/bash
# The shipped code (cluster.woken_first written by the lab fit, both engines): each collection's calibration fitted
# again (`meshsim calibrate --lab --resume` on a copy: every probe stored, only the fit runs) and its held-out runs
# validated with `meshsim validate` (the fast engine), from inside the collection's folder.
# Usage (from this folder): bash refit-validate.sh OUT_DIR
set -e
out=$(realpath "$1"); here=$(pwd)
for set in lab-baseline-cpu-2026-11-29 lab-baseline-by-rate-2026-11-29; do
    mkdir -p "$out/$set"; rm -rf "$out/$set/calibration"; cp -r "../$set/calibration" "$out/$set/calibration"
    (cd "$out/$set" && meshsim calibrate --lab --resume --lab-out calibration --model-out envoy-lab.yaml \
        --mesh envoy-lab > calibrate-resumed.log 2>&1)
    (cd "../$set" && meshsim validate --model "$out/$set/envoy-lab.yaml" baselines baselines-loaded closed paced \
        > "$out/$set/validation.txt" 2>&1)
    tail -2 "$out/$set/validation.txt"
done
