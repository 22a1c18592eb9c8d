#!/usr/bin/env bash
# The whole test suite, in two phases (extra arguments go to every pytest run):
# 1. everything that measures nothing: the simulations on 2 pytest-xdist workers and, beside them in a pytest process
#    of its own, the Kubernetes tests (one real kube-apiserver for the session; they wait on it and time nothing, so
#    their 2 minutes of waits overlap the simulations) and the real-process tests marked `unmeasured` (lab and
#    browser tests that assert counts, files and signals, never a time or a CPU). Not one xdist worker for them:
#    --dist loadgroup does not keep a group on one worker with this pytest-xdist (checked 2026-11-28), and two
#    control planes' network namespaces on one host made the end-to-end test fail ("no route to host").
# 2. the tests that measure on real processes (the lab's fortio and Envoys, Prometheus, Jaeger), one after another,
#    on an otherwise quiet machine: their measurements must not compete with simulations for the cores.
# Fails when any run fails or collects no tests.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
# Python may cache bytecode here (a sandbox's PYTHONDONTWRITEBYTECODE=1 made every pytest process rewrite the asserts
# of all 400 test modules, 6-7 s each, and every `python -m meshsim` a test starts compile the checkout afresh)
unset PYTHONDONTWRITEBYTECODE
kube_log=$(mktemp)
trap 'rm -f "$kube_log"' EXIT
"$PY" -m pytest -m "(kube and not lab and not browser) or ((lab or browser) and unmeasured)" -p no:xdist "$@" \
    >"$kube_log" 2>&1 &
kube_pid=$!
"$PY" -m pytest -m "not lab and not browser and not kube" -n 2 "$@"
simulated=$?
wait "$kube_pid"
kube=$?
echo "--- the Kubernetes tests and the unmeasured real-process tests (run beside the simulations) ---"
cat "$kube_log"
"$PY" -m pytest -m "(lab or browser) and not unmeasured" -p no:xdist "$@"
real=$?
for rc in "$simulated" "$kube" "$real"; do
    if [ "$rc" -eq 5 ]; then
        echo "tests: a run collected no tests" >&2
        exit 1
    fi
done
for rc in "$simulated" "$kube"; do
    [ "$rc" -ne 0 ] && exit "$rc"
done
exit "$real"
