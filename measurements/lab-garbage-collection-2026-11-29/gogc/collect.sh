#!/bin/bash
# How the runs here were made (2026-11-29 09:36-09:43 by `date`, one 2-vCPU VM, every lab process on 127.0.0.1), in
# this order, from this folder. GOGC is Go's collector setting, inherited by every fortio process (the load
# generator and the apps): 100 is Go's default, off collects nothing. Each run folder's manifest.yaml records its
# commands; these runs predate the probe's garbage-collections.json.
set -e
run() { GOGC=$1 meshsim lab run --duration 5 --payload 1024 -c 16 "${@:2}"; }
for i in 1 2 3; do for g in 100 off; do   # the saturated chain, three interleaved pairs
    run $g --topology chain3 --mode sidecar --rps 20000 --out gogc-$g-$i
done; done
for i in 4 5 6 7; do for g in 100 off; do   # four more rounds: the saturated chain, the paced chain, the saturated pair
    run $g --topology chain3 --mode sidecar --rps 20000 --out gogc-$g-$i
    run $g --topology chain3 --mode sidecar --rps 800 --out paced-$g-$i
    run $g --topology single --mode sidecar --rps 20000 --out pair-$g-$i
done; done
for i in 1 2 3; do for g in 100 off; do for q in 800 20000; do   # the chain of fortio apps alone, paced and saturated
    run $g --topology chain3 --mode baseline --rps $q --out base$q-$g-$i
done; done; done
find . -name access.jsonl -exec gzip -9 {} \;
python ../gogc_table.py . > ../gogc-table.txt
