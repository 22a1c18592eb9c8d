#!/bin/bash
# Whether Envoy's workers sleep so often on a saturated host because a woken worker preempts the running thread
# (the kernel's wakeup preemption) and handles what is ready before it sleeps again: the same running lab probed in
# closed loops (16 connections) with its Envoy processes' threads as SCHED_OTHER (the default) and as SCHED_BATCH
# (a woken SCHED_BATCH thread never preempts: kernel/sched/fair.c, check_preempt_wakeup_fair), alternating, three
# rounds each for the pair and chain3. MESHSIM names the command; run as root (chrt on the lab's processes).
set -e
O=${1:-.}
MESHSIM=${MESHSIM:-meshsim}
STATE=$(mktemp -d)
envoys() { pgrep -f "envoy -c $STATE/"; }
for t in single chain3; do
  $MESHSIM lab up --topology $t --mode sidecar --state-dir "$STATE" > /dev/null
  for round in 1 2 3; do
    for policy in other batch; do
      if [ $policy = batch ]; then chrt -b -a -p 0 $(envoys) > /dev/null; else chrt -o -a -p 0 $(envoys) > /dev/null; fi
      $MESHSIM lab probe --rps 20000 --connections 16 --duration 5 --payload 1024 --state-dir "$STATE" \
        --json --out "$O/preemption/$t-$policy" > /dev/null
    done
  done
  $MESHSIM lab down --state-dir "$STATE" > /dev/null
done
rm -rf "$STATE"
