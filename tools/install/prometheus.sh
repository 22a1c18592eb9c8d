#!/usr/bin/env bash
# Build a real Prometheus server for the `meshsim validate/fit --prometheus` lab test, pinned to module
# github.com/prometheus/prometheus v0.316.0 (the Prometheus 3.16.0 release; `@latest` floats, keep the pin).
# Built without the `builtinassets` tag its Makefile (.promu.yml) uses, so the web UI's assets (an npm build) are left
# out: the HTTP API the tests and meshsim use is all Go; the UI pages answer 404s.
# The version is stamped as the release's own build stamps it, so `prometheus --version` tells a stale binary.
# Idempotent: a binary that is already there with the pinned version is not rebuilt.
# First build: 28 min here under nice -n 19 on 2 busy cores (it is CPU-bound; an idle machine takes a fraction of
# that), a 147 MB binary.
set -euo pipefail

PROMETHEUS_MODULE_VERSION="${PROMETHEUS_MODULE_VERSION:-v0.316.0}"
BIN_DIR="${MESHSIM_BIN:-$HOME/.local/share/meshsim/bin}"

minor="$(echo "$PROMETHEUS_MODULE_VERSION" | cut -d. -f2)"
patch="$(echo "$PROMETHEUS_MODULE_VERSION" | cut -d. -f3)"
release="3.$(( minor - 300 )).$patch"   # module v0.316.0 -> release 3.16.0

command -v go >/dev/null || { echo "prometheus.sh: go is not installed (need Go >= 1.26.7)" >&2; exit 1; }
mkdir -p "$BIN_DIR"

if [ -x "$BIN_DIR/prometheus" ] && "$BIN_DIR/prometheus" --version 2>/dev/null | grep -q "version $release "; then
    echo "prometheus.sh: prometheus $release already in $BIN_DIR"
    exit 0
fi

echo "prometheus.sh: building prometheus $release from github.com/prometheus/prometheus@$PROMETHEUS_MODULE_VERSION (minutes)"
start=$(date +%s)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
GOBIN="$tmp" nice -n 19 go install -tags netgo \
    -ldflags "-X github.com/prometheus/common/version.Version=$release -X github.com/prometheus/common/version.Branch=HEAD" \
    "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_MODULE_VERSION"
mv "$tmp/prometheus" "$BIN_DIR/prometheus"
echo "prometheus.sh: built prometheus $release in $(( $(date +%s) - start )) s"
"$BIN_DIR/prometheus" --version | head -1
