#!/usr/bin/env bash
# The whole test suite, in two phases (extra arguments go to both pytest runs):
# 1. everything that does not start real processes, on 2 pytest-xdist workers;
# 2. the tests that start real processes (the lab's fortio and Envoys, the kube-apiserver, Chromium), one after
#    another, on an otherwise quiet machine: their measurements must not compete with simulations for the cores.
# Fails when either phase fails or collects no tests.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
"$PY" -m pytest -m "not lab and not kube and not browser" -n 2 --dist loadgroup "$@"
simulated=$?
"$PY" -m pytest -m "lab or kube or browser" -p no:xdist "$@"
real=$?
for rc in "$simulated" "$real"; do
    if [ "$rc" -eq 5 ]; then
        echo "tests: a phase collected no tests" >&2
        exit 1
    fi
done
[ "$simulated" -ne 0 ] && exit "$simulated"
exit "$real"
