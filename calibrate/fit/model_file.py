"""Writing a fitted mesh model (schema meshsim/mesh/v1) with provenance on every number, atomically.

The written file is read back with the simulator's own loader before it replaces anything, so a model that the
simulator would refuse is never left on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from meshsim.errors import ModelError
from meshsim.outputs import write_file
from meshsim.yamlio import read_yaml

PROXY_KINDS = {"istio": "envoy", "envoy": "envoy", "linkerd": "linkerd2-proxy", "traefik": "traefik"}
SHARED_DISPATCH = ("linkerd2-proxy", "traefik")


_EXACT = ("weight", "aic", "loglik", "chi2")


def four_digits(value: Any) -> Any:
    """Four significant digits are plenty for fitted parameters and keep the file readable."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):  # weights must sum to 1; AIC-like figures are compared by difference
        return {k: (v if k in _EXACT else four_digits(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [four_digits(v) for v in value]
    return value


def proxy_skeleton(mesh: str, workers: int, cpu_limit: float | None, source: str) -> dict[str, Any]:
    kind = PROXY_KINDS.get(mesh.split("-")[0], "other")
    return {
        "kind": kind,
        "placement": "node" if kind == "traefik" else "sidecar",
        "dispatch": "shared" if kind in SHARED_DISPATCH else "pinned",
        "connection_balance": "hash",
        "workers": workers,
        "cpu_limit": cpu_limit,
        "header_bytes": 0,
        "per_kb_ms": 0.0,
        "source": source,
    }


def build_model(
    name: str,
    version: str,
    description: str,
    sources: Mapping[str, str],
    proxy: Mapping[str, Any] | None,
    features: Mapping[str, Any],
    load_balancer: Mapping[str, Any] | None,
    calibration: Mapping[str, Any],
) -> dict[str, Any]:
    model: dict[str, Any] = {
        "schema": "meshsim/mesh/v1",
        "name": name,
        "version": version,
        "description": description,
        "sources": dict(sources),
        "proxy": four_digits(dict(proxy)) if proxy else None,
    }
    if features:
        model["features"] = four_digits({k: dict(v) for k, v in features.items()})
    if load_balancer:
        model["load_balancer"] = four_digits(dict(load_balancer))
    model["calibration"] = four_digits(dict(calibration))
    return model


def validate(model: Mapping[str, Any], where: str) -> None:
    """Parse with the simulator's loader (raises ModelError naming the key)."""
    from meshsim.mesh import mesh_from_data

    mesh_from_data(model, where)


def write_model(model: Mapping[str, Any], out: str | Path) -> Path:
    """Validate, then write atomically (only onto a regular file; its folder is made)."""
    out = Path(out)
    validate(model, str(out))
    text = yaml.safe_dump(dict(model), sort_keys=False, allow_unicode=True, width=110)
    return write_file(out, text, "out", parents=True)


def read_model(path: str | Path) -> dict[str, Any]:
    data, _ = read_yaml(Path(path))  # the strict loader: one line on duplicate keys, deep nesting, bad bytes
    if not isinstance(data, dict):
        raise ModelError(f"{path}: not a mesh model (top level is not a mapping)")
    return data
