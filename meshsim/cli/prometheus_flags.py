"""The flags that say where and what to read from Prometheus, shared by ``meshsim validate --prometheus`` and
``meshsim fit --prometheus``, and the ``PrometheusSource`` they describe."""

from __future__ import annotations

import argparse
from typing import Any

SOURCE_FLAGS = ("--window", "--end", "--source", "--destination", "--prometheus-credentials", "--prometheus-ca")


def add_source_flags(g: Any) -> None:
    """``--prometheus URL`` and what to read from it, on an argument group."""
    g.add_argument("--prometheus", metavar="URL", help="Prometheus server, e.g. https://prometheus.example:9090; "
                   "credentials only from MESHSIM_PROMETHEUS_TOKEN (or _USERNAME and _PASSWORD) or "
                   "--prometheus-credentials")
    add_window_flags(g, "the window to read, in Prometheus's syntax (10m, 90s, 1h)", "default now")
    g.add_argument("--source", metavar="WORKLOAD", help="the calling workload (the metric set's source label)")
    g.add_argument("--destination", metavar="WORKLOAD", help="the called workload (the metric set's destination "
                   "label)")


def add_window_flags(g: Any, window_help: str, end_default: str) -> None:
    """The window, metric set and credentials flags of a Prometheus read, on an argument group."""
    g.add_argument("--window", metavar="DURATION", help=window_help)
    g.add_argument("--end", metavar="TIME", help=f"the window's end: Unix seconds or ISO 8601 ({end_default})")
    g.add_argument("--metrics", default="istio", help="the mesh's metric set: istio, linkerd, envoy (the entry "
                   "listener's downstream time) or envoy-upstream (default %(default)s)")
    g.add_argument("--prometheus-credentials", metavar="FILE", help="YAML file with token: ..., or username: ... "
                   "and password: ...")
    g.add_argument("--prometheus-ca", metavar="FILE", help="a CA (PEM) to trust besides the system's")


def given_without_url(args: argparse.Namespace, more: dict[str, Any]) -> str | None:
    """The first Prometheus-only flag given without --prometheus (``more``: the command's own), else None."""
    values = {flag: getattr(args, flag[2:].replace("-", "_")) for flag in SOURCE_FLAGS} | more
    return next((flag for flag, value in values.items() if value is not None), None)


def source_of(args: argparse.Namespace) -> Any:
    """The ``PrometheusSource`` the flags describe (checked when built: a bad --window fails before any work)."""
    from meshsim.calibrate.measure.prometheus.prom_source import PrometheusSource
    from meshsim.errors import MeshsimError

    if not args.window:
        raise MeshsimError("--prometheus: give --window (e.g. 10m)")
    return PrometheusSource(args.prometheus, args.window, args.end, args.metrics, args.source, args.destination,
                            args.prometheus_credentials, args.prometheus_ca)
