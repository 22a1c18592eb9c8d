#!/bin/sh
# The held-out validations of this folder, with the cores shared as one run queue (the default) and per core.
M=../lab-cpu-at-load-2026-11-27
P=../lab-proxy-views-2026-11-27
V=${MESHSIM:-meshsim}
for q in shared per-core; do
  $V validate --run-queues $q --model $M/envoy-lab.yaml $M/sitting-0359/chain-baseline $M/sitting-0359/saturated > validation/saturated-0359-$q.txt
  $V validate --run-queues $q --model $M/envoy-lab.yaml $M/sitting-0356/chain-baseline $M/sitting-0356/saturated > validation/saturated-0356-$q.txt
  $V validate --run-queues $q --model $M/envoy-lab.yaml $M/sitting-0359/chain-baseline $P/runs > validation/proxy-views-$q.txt
  $V validate --run-queues $q --model $M/envoy-lab.yaml $M/sitting-0359/chain-baseline runs/* > validation/runqueue-$q.txt
done
