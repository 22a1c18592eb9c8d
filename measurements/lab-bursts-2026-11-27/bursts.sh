#!/usr/bin/env bash
# Synchronised bursts (fortio without -uniform/-jitter: every connection fires at the same instants) at 1000 rps
# with 1, 16, 32 and 64 connections: does a sidecar's queueing grow with the burst as the model says?
# Two rounds; baseline beside the sidecar modes. Run from this folder: bash bursts.sh
set -euo pipefail
py="${PYTHON:-python}"
for round in round1 round2; do
    for c in 1 16 32 64; do
        for mode in baseline server-sidecar sidecar; do
            "$py" -m meshsim lab run --topology single --mode "$mode" --connections "$c" --rps 1000 \
                --duration 5 --payload 1024 --out "$round"
        done
    done
done
