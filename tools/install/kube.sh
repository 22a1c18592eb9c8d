#!/usr/bin/env bash
# Build a real Kubernetes control plane for `meshsim calibrate --kube` tests:
# kube-apiserver, kube-scheduler, kube-controller-manager (pinned v1.37.1, built from
# k8s.io/kubernetes through a wrapper go.mod, since `go install` refuses its replace
# directives) and kwok v0.8.0 (fake nodes so pods reach Running).
# etcd comes from Debian: apt-get install -y etcd-server.
#
# Idempotent: a binary that is already there with the right version is not rebuilt.
# First build: ~6 min on 2 cores, ~3.3 GB of Go caches, ~2.8 GB peak memory.
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.1}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
BIN_DIR="${MESHSIM_BIN:-$HOME/.local/share/meshsim/bin}"
BUILD_DIR="${MESHSIM_KUBEBUILD:-$HOME/.cache/meshsim/kubebuild}"

staging_version="v0${KUBE_VERSION#v1}"   # v1.37.1 -> v0.37.1
minor="$(echo "$KUBE_VERSION" | cut -d. -f2)"

command -v go >/dev/null || { echo "kube.sh: go is not installed (need Go >= 1.26)" >&2; exit 1; }
mkdir -p "$BIN_DIR" "$BUILD_DIR"

if ! command -v etcd >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "kube.sh: installing etcd from Debian (etcd-server)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server
    else
        echo "kube.sh: etcd missing; install it with: apt-get install -y etcd-server" >&2
    fi
fi

have_version() {  # $1 = binary name; true when it exists and reports KUBE_VERSION
    [ -x "$BIN_DIR/$1" ] && "$BIN_DIR/$1" --version 2>/dev/null | grep -q "$KUBE_VERSION"
}

need=()
for b in kube-apiserver kube-scheduler kube-controller-manager; do
    if have_version "$b"; then
        echo "kube.sh: $b $KUBE_VERSION already in $BIN_DIR"
    else
        need+=("$b")
    fi
done

if [ "${#need[@]}" -gt 0 ]; then
    cd "$BUILD_DIR"
    if [ ! -f go.mod ] || ! grep -q "k8s.io/kubernetes $KUBE_VERSION" go.mod; then
        echo "kube.sh: writing wrapper module in $BUILD_DIR"
        GOFLAGS=-mod=mod go mod download "k8s.io/kubernetes@$KUBE_VERSION"
        modfile="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$KUBE_VERSION.mod"
        {
            echo "module local/kubebuild"
            echo
            echo "go 1.26.0"
            echo
            echo "require k8s.io/kubernetes $KUBE_VERSION"
            echo
            echo "replace ("
            grep "=> ./staging" "$modfile" | awk -v v="$staging_version" '{print "\t"$1" => "$1" "v}'
            echo ")"
        } > go.mod.new
        mv go.mod.new go.mod
        # tools.go keeps the commands' packages in the module graph for `go mod tidy`.
        cat > tools.go <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
EOF
        GOFLAGS=-mod=mod go mod tidy
    fi
    ldflags="-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
    for b in "${need[@]}"; do
        echo "kube.sh: building $b $KUBE_VERSION (minutes)"
        start=$(date +%s)
        GOFLAGS=-mod=mod go build -ldflags "$ldflags" -o "$BIN_DIR/$b.tmp" "k8s.io/kubernetes/cmd/$b"
        mv "$BIN_DIR/$b.tmp" "$BIN_DIR/$b"
        echo "kube.sh: built $b in $(( $(date +%s) - start )) s"
    done
fi

if [ -x "$BIN_DIR/kwok" ] && "$BIN_DIR/kwok" --version 2>/dev/null | grep -q "${KWOK_VERSION#v}"; then
    echo "kube.sh: kwok $KWOK_VERSION already in $BIN_DIR"
else
    echo "kube.sh: installing kwok $KWOK_VERSION"
    GOBIN="$BIN_DIR" go install "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
fi

echo "kube.sh: done; binaries in $BIN_DIR"
