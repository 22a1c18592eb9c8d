"""Simulating summary rows: one row's fortio load on a candidate model, its p50/p90/p99 and each sidecar's CPU.

The summary fit (``summary_fit``) compares candidates with rows by simulation: a model dict (schema meshsim/mesh/v1)
and the cluster's facts are turned into a scenario on the rows' topology, the row's own load is replayed (rate,
connections, fortio's pacing and version) and the simulated percentiles and CPU come back. Every candidate of a
stage draws the same random numbers (one seed): the objective then moves smoothly with the parameters.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import yaml

from meshsim.calibrate.measure.summary_rows import SummaryRow
from meshsim.errors import ModelError

SCOPE_OF_PATH = {"baseline": "none", "server-sidecar": "server", "both-sidecars": "both"}
LEVELS = (0.5, 0.9, 0.99)
SIDECARS = ("client/sidecar", "server/sidecar")


@dataclass(frozen=True)
class RowSettings:
    """How the rows were made beyond what a row says (given by the caller, each with its source)."""

    topology: str = "single"
    jitter: bool = False
    uniform: bool = False
    fortio_version: str | None = None
    fortio_warmup: str | None = None  # parallel | sequential (default: the version's)
    workers: int = 2
    requests: int = 3000  # simulated per row and candidate
    seed: int = 1


@dataclass(frozen=True)
class SimulatedRow:
    quantiles_s: tuple[float, ...]  # at LEVELS
    cpu_cores: Mapping[str, float]


def row_features(row: SummaryRow, model: Mapping[str, Any]) -> tuple[str, ...]:
    """The row's features for a prediction: its own, and no-F for every default-on feature it did not run."""
    if row.path == "baseline":
        return ()
    defaults = {n for n, f in (model.get("features") or {}).items() if f.get("default") and not f.get("fixed")}
    return tuple(sorted(set(row.features) & set(model.get("features") or {}))) + tuple(
        f"no-{n}" for n in sorted(defaults - set(row.features)))


class RowSimulator:
    """Simulates rows on candidate models; keeps one scratch folder for the model files it writes."""

    def __init__(self, settings: RowSettings) -> None:
        self.settings = settings
        self._work = tempfile.TemporaryDirectory(prefix="meshsim-rows-")
        self.calls = 0

    def close(self) -> None:
        self._work.cleanup()

    def simulate(self, model: Mapping[str, Any], row: SummaryRow) -> SimulatedRow:
        from meshsim.catalog import load_mesh, load_topology
        from meshsim.fortio_warmup import DEFAULT_VERSION
        from meshsim.scenario import build_scenario
        from meshsim.sim.engine.replication_result import Horizon
        from meshsim.sim.engine_choice import run_on_chosen_engine
        from meshsim.workload import FortioLoad, Workload

        s = self.settings
        path = Path(self._work.name) / "candidate.yaml"
        path.write_text(yaml.safe_dump(dict(model), sort_keys=False), encoding="utf-8")
        mesh = load_mesh(str(path))
        topology = load_topology(s.topology)
        if mesh.cluster is not None:
            topology = mesh.cluster.applied_to(topology)
        scenario = build_scenario(topology, mesh, row_features(row, model), scope=SCOPE_OF_PATH[row.path])
        load = FortioLoad(row.rps, row.connections, s.uniform, s.jitter, False,
                          version=s.fortio_version or DEFAULT_VERSION, warmup=s.fortio_warmup)
        duration = max(s.requests / row.rps, 20.0 * row.connections / row.rps)
        result = run_on_chosen_engine(scenario, Workload(load), Horizon(duration, 0.0), s.seed, 0)
        self.calls += 1
        quantiles = _row_quantiles(result, row)
        window = result.busy_window or 1.0
        cpu = {c: result.usage[c].cpu_seconds / window + result.usage[c].idle_cores
               for c in SIDECARS if c in result.usage}
        return SimulatedRow(quantiles, cpu)


def _row_quantiles(result: Any, row: SummaryRow) -> tuple[float, ...]:
    """The simulated percentiles of the span the row's percentiles time: its reporting proxy's own calls (a row
    from a sidecar's histogram: the reporter's sidecar's one outbound view) or the caller's latency."""
    from meshsim.sim.engine import proxy_views

    if row.reporter and not row.bypassed:
        usage = result.usage.get(f"{row.reporter}/sidecar")
        sent = [name for name in usage.views if name.startswith(proxy_views.outbound(""))] if usage else []
        if len(sent) != 1:
            raise ModelError(f"{row.source}: column Reporter: {row.reporter!r} has no sidecar with one outbound view "
                             f"in the rows' topology (a proxy's percentiles are compared with its own view)")
        return tuple(proxy_views.quantile(usage.views[sent[0]], level) for level in LEVELS)
    lat = result.latencies
    return tuple(float(q) for q in np.quantile(lat, LEVELS)) if lat.size else tuple(math.nan for _ in LEVELS)


def log_errors(row: SummaryRow, sim: SimulatedRow, latency: bool = True, cpu: bool = True) -> list[float]:
    """log(simulated / measured) of each percentile and each sidecar's CPU the row has (nan-safe: a large error)."""
    out: list[float] = []
    if latency:
        for level, value in zip(LEVELS, sim.quantiles_s):
            measured = row.quantiles_s[level]
            out.append(math.log(value / measured) if value > 0 and math.isfinite(value) else 5.0)
    if cpu and row.path != "baseline":
        for side in SIDECARS:
            if side in row.cpu_cores and row.cpu_cores[side] > 0:
                value = sim.cpu_cores.get(side, 0.0)
                out.append(math.log(value / row.cpu_cores[side]) if value > 0 else 5.0)
    return out
