#!/usr/bin/env bash
# The chain of fortio apps alone (chain3 baseline: the runs a lab chain's replay derives its forwarding apps from) with
# Go's default GOMAXPROCS and with GOMAXPROCS=1, interleaved: one connection at 500 rps and 16 connections in a closed
# loop and paced at 800 rps, 10 s each, ROUNDS rounds.
set -euo pipefail
OUT=${1:?out dir}; ROUNDS=${ROUNDS:-3}; MESHSIM=${MESHSIM:-meshsim}
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for g in default 1; do
    st="$OUT/state-$g"
    if [ "$g" = 1 ]; then GOMAXPROCS=1 $MESHSIM lab up --topology chain3 --mode baseline --state-dir "$st" >/dev/null
    else env -u GOMAXPROCS $MESHSIM lab up --topology chain3 --mode baseline --state-dir "$st" >/dev/null; fi
    for qc in 500:1 800:16 0:16; do
      $MESHSIM lab probe --state-dir "$st" --rps ${qc%%:*} -c ${qc##*:} --duration 10 --payload 1024 --out "$OUT/gomaxprocs-$g-r$r" --json | tail -n 1
    done
    $MESHSIM lab down --state-dir "$st" >/dev/null
  done
done
