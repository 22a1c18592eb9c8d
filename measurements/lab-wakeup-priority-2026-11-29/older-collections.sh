#!/bin/bash
# Three older collections fitted again with the code of this day, first come, first served (fcfs_meshsim.py) and
# with a woken thread first (meshsim as shipped), and their held-out runs validated with each (the fast engine).
# Usage (from this folder): bash older-collections.sh OUT_DIR
set -e
out=$(realpath "$1"); mkdir -p "$out"
for v in fcfs woken; do
    run=(meshsim); [ $v = fcfs ] && run=(python "$(pwd)/fcfs_meshsim.py")
    for set in lab-chain-cpu-2026-11-28 lab-chain-rung-2026-11-28; do
        d="$out/$set/$v"; mkdir -p "$d"; rm -rf "$d/calibration"; cp -r "../$set/calibration" "$d/calibration"
        (cd "$d" && "${run[@]}" calibrate --lab --resume --lab-out calibration --model-out envoy-lab.yaml \
            --mesh envoy-lab > calibrate-resumed.log 2>&1 && rm -rf calibration)
    done
    d="$out/lab-heldout-2026-11-27/$v"; mkdir -p "$d"
    (cd ../lab-heldout-2026-11-27 && "${run[@]}" fit calibration/* mtls-rung/* --mesh envoy-lab \
        --out "$d/envoy-lab.yaml" > "$d/fit.log" 2>&1)
done
for v in fcfs woken; do
    (cd ../lab-chain-cpu-2026-11-28 && meshsim validate --model "$out/lab-chain-cpu-2026-11-28/$v/envoy-lab.yaml" \
        baselines baselines-loaded paced closed > "$out/lab-chain-cpu-2026-11-28/$v/validation.txt" 2>&1)
    (cd ../lab-chain-rung-2026-11-28 && meshsim validate --model "$out/lab-chain-rung-2026-11-28/$v/envoy-lab.yaml" \
        baselines chain2-closed chain2-paced chain3-closed chain3-paced chain3-features chain5-closed \
        > "$out/lab-chain-rung-2026-11-28/$v/validation.txt" 2>&1)
    (cd ../lab-heldout-2026-11-27 && meshsim validate --model "$out/lab-heldout-2026-11-27/$v/envoy-lab.yaml" \
        calibration mtls-rung baselines round1 round2 --by connections \
        > "$out/lab-heldout-2026-11-27/$v/validation.txt" 2>&1)
    (cd ../lab-heldout-2026-11-27 && meshsim validate --model "$out/lab-heldout-2026-11-27/$v/envoy-lab.yaml" \
        baselines saturated > "$out/lab-heldout-2026-11-27/$v/validation-saturated.txt" 2>&1)
done
for f in "$out"/*/*/validation*.txt; do echo "$f"; grep "^summary" "$f"; done
