#!/usr/bin/env bash
# The forwarding apps' CPU per request with Go's default GOMAXPROCS (2 on this VM) and with GOMAXPROCS=1 (no idle P
# for the runtime to wake a spinning thread on), interleaved: chain3 with both sidecars, 16 connections, paced at
# 800 rps and in a closed loop, 10 s each, ROUNDS rounds.
set -euo pipefail
OUT=${1:?out dir}; ROUNDS=${ROUNDS:-3}; MESHSIM=${MESHSIM:-meshsim}
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for g in default 1; do
    st="$OUT/state-$g"
    if [ "$g" = 1 ]; then GOMAXPROCS=1 $MESHSIM lab up --topology chain3 --mode sidecar --state-dir "$st" >/dev/null
    else env -u GOMAXPROCS $MESHSIM lab up --topology chain3 --mode sidecar --state-dir "$st" >/dev/null; fi
    for q in 800 0; do
      $MESHSIM lab probe --state-dir "$st" --rps $q -c 16 --duration 10 --payload 1024 --out "$OUT/gomaxprocs-$g-r$r" --json | tail -n 1
    done
    $MESHSIM lab down --state-dir "$st" >/dev/null
  done
done
