#!/bin/bash
# How the runs here were made (2026-11-29 08:11-08:20 by `date`, one 2-vCPU VM, every lab process on 127.0.0.1),
# from this folder, in this order. Each run folder's manifest.yaml records its commands and processes.
set -e
for m in tracing sidecar; do   # chain-by-rate/: chain3 at 400, 800 and as fast as it goes; the pair at 800 and 1600
    meshsim lab run --topology chain3 --mode $m --rps 400,800,20000 -c 16 --duration 5 --payload 1024 --out chain-by-rate/chain3-$m
done
for m in tracing sidecar; do
    meshsim lab run --topology single --mode $m --rps 800,1600 -c 16 --duration 5 --payload 1024 --out chain-by-rate/single-$m
done
for c in 1 4 16; do for m in tracing sidecar; do   # by-connections/: the pair at 800 rps, 2 workers
    meshsim lab run --topology single --mode $m --rps 800 -c $c --duration 5 --payload 1024 --out by-connections/w2c$c-$m
done; done
for m in tracing sidecar; do   # by-connections/: 1 worker at 1 and 16 connections, 2 workers at 2
    meshsim lab run --topology single --mode $m --workers 1 --rps 800 -c 1 --duration 5 --payload 1024 --out by-connections/w1c1-$m
    meshsim lab run --topology single --mode $m --workers 1 --rps 800 -c 16 --duration 5 --payload 1024 --out by-connections/w1c16-$m
    meshsim lab run --topology single --mode $m --workers 2 --rps 800 -c 2 --duration 5 --payload 1024 --out by-connections/w2c2-$m
done
for i in 1 2 3; do for m in tracing sidecar; do   # repeats-1500/: the calibration plan's loaded rung, three times
    meshsim lab run --topology single --mode $m --rps 1500 -c 16 --duration 3 --payload 1024 --out repeats-1500/$m-$i
done; done
for i in 1 2; do for t in chain3 single; do for m in tracing sidecar; do   # chain-and-single-800/: interleaved
    meshsim lab run --topology $t --mode $m --rps 800 -c 16 --duration 4 --payload 1024 --out chain-and-single-800/$t-$m-$i
done; done; done
find . -name access.jsonl -exec gzip -9 {} \;
python tracing_table.py by-connections chain-by-rate repeats-1500 chain-and-single-800 > tables.txt
