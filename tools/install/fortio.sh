#!/usr/bin/env bash
# Install fortio (load generator, echo server and forwarding hop of `meshsim lab`), pinned to v1.68.2.
# Releases from v1.69.0 need a module the Go proxy refuses here, and `@latest` floats: keep the pin.
# Installs into $(go env GOPATH)/bin (meshsim.calibrate.measure.lab.binaries.find_binary looks there), ~40 s, 22 MB.
# Idempotent: an installed fortio reporting the pinned version is kept.
set -euo pipefail

FORTIO_VERSION="${FORTIO_VERSION:-v1.68.2}"

command -v go >/dev/null || { echo "fortio.sh: go is not installed (need Go >= 1.23; apt-get install -y golang-go may be too old)" >&2; exit 1; }
gobin="$(go env GOBIN)"
[ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"

if [ -x "$gobin/fortio" ] && [ "$("$gobin/fortio" version 2>/dev/null | cut -d' ' -f1)" = "${FORTIO_VERSION#v}" ]; then
    echo "fortio.sh: fortio ${FORTIO_VERSION} already in $gobin"
    exit 0
fi
echo "fortio.sh: go install fortio.org/fortio@${FORTIO_VERSION}"
go install "fortio.org/fortio@${FORTIO_VERSION}"
"$gobin/fortio" version
