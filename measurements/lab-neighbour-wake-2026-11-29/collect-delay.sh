#!/bin/bash
# The sidecar pair at 800 rps and 16 connections with the leaf app waiting 0, 2, 5 and 10 ms per request (fortio
# echo delay): the host does the same work per second, each request's state waits longer in the sidecars between
# its request and response passes. Two rounds, delays interleaved. MESHSIM names the command. Every run 1 KB, 5 s.
set -e
O=${1:-.}
MESHSIM=${MESHSIM:-meshsim}
for round in 1 2; do
  for d in 0 2 5 10; do
    $MESHSIM lab run --duration 5 --payload 1024 --connections 16 --topology single --mode sidecar --rps 800 \
      --leaf-delay $d --json --out "$O/delay/$d" > /dev/null
  done
done
