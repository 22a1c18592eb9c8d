#!/usr/bin/env bash
# The forwarding apps' CPU split into work per request and CPU per wake, as the lab replay derives it from each
# round's chain3 baselines (one connection at 500 rps, 16 paced at 800 rps), with the default GOMAXPROCS and with
# GOMAXPROCS=1, without a spin share (SHARE=0: the wake CPU as a whole). Run from the repository's root.
set -euo pipefail
D=measurements/lab-go-spinning-2026-11-29
W=measurements/lab-wakeup-priority-2026-11-29/woken-first/lab-baseline-cpu-2026-11-29/envoy-lab.yaml
for g in default 1; do
  for r in 1 2 3; do
    printf 'GOMAXPROCS=%s round %s: ' "$g" "$r"
    SHARE=0 python $D/validate_share.py --model $W $D/baseline/gomaxprocs-$g-r$r $D/sidecar-chain/gomaxprocs-$g-r$r \
      | grep -m1 '  note: forwarding apps:' | sed 's/^  note: //'
  done
done
