#!/bin/bash
# Envoy's workers' sleeps traced: one running lab (the sidecar pair, then chain3), probed paced at 800 rps and in a
# closed loop (20 000 requested), 16 connections, 5 s, with `perf record` on the lab's Envoy processes for 2 s in
# the middle of each probe: every context switch of their threads (sched:sched_switch, whose prev_state says sleep
# or preemption), every wake-up of them (sched:sched_wakeup) and every epoll_wait return (its event count), host-wide (a switch into an Envoy thread is recorded in the context of the thread it replaces). Two
# rounds. MESHSIM names the command; run as root (perf system-wide).
set -e
O=${1:-.}
MESHSIM=${MESHSIM:-meshsim}
STATE=$(mktemp -d)
envoys() { pgrep -d, -f "envoy -c $STATE/"; }
for t in single chain3; do
  $MESHSIM lab up --topology $t --mode sidecar --state-dir "$STATE" > /dev/null
  pgrep -a -f "envoy -c $STATE/" | sed "s|$STATE/||; s|[^ ]*/envoy |envoy |" > "$O/$t-envoys.txt"  # pid -> its config (which sidecar)
  for round in 1 2; do
    for rps in 800 20000; do
      out="$O/$t-q$rps/round$round"
      mkdir -p "$out"
      (sleep 2; perf record -q -o "$out/perf.data" -e sched:sched_switch -e sched:sched_wakeup \
         -e syscalls:sys_exit_epoll_wait -a -- sleep 2 > /dev/null 2>&1) &
      tracer=$!
      $MESHSIM lab probe --rps $rps --connections 16 --duration 5 --payload 1024 --state-dir "$STATE" \
        --json --out "$out" > /dev/null
      wait $tracer
      perf script -i "$out/perf.data" -F comm,pid,tid,time,event,trace 2>/dev/null | gzip > "$out/perf-script.txt.gz"
      rm -f "$out/perf.data"
      echo "$t $rps round $round done $(date -u +%H:%M:%S)"
    done
  done
  $MESHSIM lab down --state-dir "$STATE" > /dev/null
done
rm -rf "$STATE"
