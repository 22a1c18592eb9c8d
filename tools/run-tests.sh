#!/usr/bin/env bash
# The whole test suite, in two phases (extra arguments go to both pytest runs):
# 1. everything that measures nothing, on 2 pytest-xdist workers: the simulations, and the Kubernetes tests on one
#    worker of their own (a real kube-apiserver; they wait on it and time nothing, 2.5 minutes of waits that overlap
#    the simulations on the other worker);
# 2. the tests that measure on real processes (the lab's fortio and Envoys, Chromium), one after another, on an
#    otherwise quiet machine: their measurements must not compete with simulations for the cores.
# Fails when either phase fails or collects no tests.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
"$PY" -m pytest -m "not lab and not browser" -n 2 --dist loadgroup "$@"
simulated=$?
"$PY" -m pytest -m "lab or browser" -p no:xdist "$@"
real=$?
for rc in "$simulated" "$real"; do
    if [ "$rc" -eq 5 ]; then
        echo "tests: a phase collected no tests" >&2
        exit 1
    fi
done
[ "$simulated" -ne 0 ] && exit "$simulated"
exit "$real"
