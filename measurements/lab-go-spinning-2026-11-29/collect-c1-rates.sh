#!/usr/bin/env bash
# The chain of fortio apps alone at one connection and four rates (the idle gap between requests 5 ms to 0.5 ms),
# with Go's default GOMAXPROCS and with GOMAXPROCS=1, interleaved, ROUNDS rounds of 10 s runs: how a forwarding app's
# CPU per request moves with the idle gap its wakes follow.
set -euo pipefail
OUT=${1:?out dir}; ROUNDS=${ROUNDS:-2}; MESHSIM=${MESHSIM:-meshsim}
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for g in default 1; do
    st="$OUT/state-$g"
    if [ "$g" = 1 ]; then GOMAXPROCS=1 $MESHSIM lab up --topology chain3 --mode baseline --state-dir "$st" >/dev/null
    else env -u GOMAXPROCS $MESHSIM lab up --topology chain3 --mode baseline --state-dir "$st" >/dev/null; fi
    for q in 200 500 1000 2000; do
      $MESHSIM lab probe --state-dir "$st" --rps "$q" -c 1 --duration 10 --payload 1024 \
        --out "$OUT/gomaxprocs-$g-r$r" --json | tail -n 1
    done
    $MESHSIM lab down --state-dir "$st" >/dev/null
  done
done
