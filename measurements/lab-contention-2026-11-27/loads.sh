#!/bin/bash
# Without neighbours: a leaf delay, chain3 below and at saturation, the sidecar pair at 600 rps (1 KB, 5 s).
set -e
O=${1:-.}
run() { meshsim lab run --duration 5 --payload 1024 "$@" > /dev/null; }
for round in 1 2; do   # 16:06
  run --topology single --mode sidecar --connections 16 --rps 1000 --out "$O/leaf-delay/d0"
  run --topology single --mode sidecar --connections 16 --rps 1000 --leaf-delay 10 --out "$O/leaf-delay/d10"
done
for q in 600 900 3000; do   # 16:07
  run --topology chain3 --mode sidecar --connections 16 --rps $q --out "$O/chain3/q$q"
done
for round in 1 2; do   # 16:08
  run --topology single --mode sidecar --connections 16 --rps 600 --out "$O/single-600/c16"
  run --topology single --mode sidecar --connections 16 --rps 600 --uniform --out "$O/single-600/c16u"
  run --topology single --mode sidecar --connections 1 --rps 600 --out "$O/single-600/c1"
done
