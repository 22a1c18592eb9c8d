#!/usr/bin/env bash
# Build Jaeger v2 (the all-in-one `jaeger` binary: Zipkin receiver, in-memory storage, query API) for the
# lab-capture test of `meshsim topology from-traces`. Pinned to the Go module version v1.76.0 of
# github.com/jaegertracing/jaeger (the module keeps v1 tags; its cmd/jaeger is Jaeger v2). Built from a scratch module
# (`go get -tool`), since `go install` refuses the module's replace directives.
# Idempotent: a binary whose build info records the pinned module version is kept.
# First build: minutes on 2 cores (run under nice), ~1.5 GB of Go caches; the binary is ~150 MB.
set -euo pipefail

JAEGER_VERSION="${JAEGER_VERSION:-v1.76.0}"
BIN_DIR="${MESHSIM_BIN:-$HOME/.local/share/meshsim/bin}"
BUILD_DIR="${MESHSIM_JAEGERBUILD:-$HOME/.cache/meshsim/jaegerbuild}"
module="github.com/jaegertracing/jaeger"

command -v go >/dev/null || { echo "jaeger.sh: go is not installed (need Go >= 1.24)" >&2; exit 1; }
mkdir -p "$BIN_DIR" "$BUILD_DIR"

# `go version -m` prints the module versions a binary was built from: "mod <module> <version> <sum>" (the module
# holding the built command; "dep" for the others)
if [ -x "$BIN_DIR/jaeger" ] && go version -m "$BIN_DIR/jaeger" 2>/dev/null | grep -qE "^\s+(mod|dep)\s+$module\s+$JAEGER_VERSION\s"; then
    echo "jaeger.sh: jaeger ($module $JAEGER_VERSION) already in $BIN_DIR"
    exit 0
fi

cd "$BUILD_DIR"
if [ ! -f go.mod ] || ! grep -q "$module $JAEGER_VERSION" go.mod; then
    echo "jaeger.sh: writing scratch module in $BUILD_DIR"
    rm -f go.mod go.sum
    go mod init local/jaegerbuild >/dev/null 2>&1
    go get -tool "$module/cmd/jaeger@$JAEGER_VERSION"
fi
echo "jaeger.sh: building jaeger $JAEGER_VERSION (minutes)"
start=$(date +%s)
# the version stamp `jaeger version` and its start-up log print (a release build sets it the same way)
nice -n 19 go build -ldflags "-X $module/internal/version.latestVersion=$JAEGER_VERSION" \
    -o "$BIN_DIR/jaeger.tmp" "$module/cmd/jaeger"
mv "$BIN_DIR/jaeger.tmp" "$BIN_DIR/jaeger"
echo "jaeger.sh: built jaeger in $(( $(date +%s) - start )) s; binary in $BIN_DIR"
