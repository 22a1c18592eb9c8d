"""Does a fitted model reproduce its calibration runs? Percentiles of each mode, measured vs model.

The model side convolves the measured baseline with the model's passes (and feature increments) for the run's path,
on the same grid as the fit: no queueing (right for one connection far from saturation). The simulator-based check
(:mod:`meshsim.calibrate.fit.sim_check`) adds queueing and the fortio workload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from meshsim.calibrate.fit.convolution import Grid, GridPmf, from_cdf, from_observation
from meshsim.calibrate.measure.dataset import Run
from meshsim.calibrate.fit.observations import Observation, from_result
from meshsim.distributions import Distribution
from meshsim.mesh import MeshModel

QUANTILES = (0.5, 0.9, 0.99)
PASSES_OF_PATH = {"baseline": (), "server-sidecar": ("inbound_request", "inbound_response"),
                  "both-sidecars": ("inbound_request", "inbound_response", "outbound_request", "outbound_response")}


@dataclass(frozen=True)
class ModeCheck:
    run_id: str
    measured_ms: tuple[float, ...]
    model_ms: tuple[float, ...]
    measured_ci_ms: tuple[tuple[float, float], ...] = ()  # 95 % interval of each measured percentile

    @property
    def worst_rel_error(self) -> float:
        return max(abs(m - o) / o for m, o in zip(self.model_ms, self.measured_ms))

    def within(self, rel: float) -> bool:
        """Each model percentile within ``rel`` of the measured one, or of the measured one's own 95 % interval
        when that is wider: where the measured CDF is flat (a gap between a body and a far tail) the data do
        not fix the percentile to 10 % themselves."""
        cis = self.measured_ci_ms or tuple((m, m) for m in self.measured_ms)
        return all(min(lo, o) * (1 - rel) <= m <= max(hi, o) * (1 + rel)
                   for m, o, (lo, hi) in zip(self.model_ms, self.measured_ms, cis))


def percentile_ci(obs: Observation, q: float) -> tuple[float, float]:
    """Distribution-free 95 % interval of a percentile: the quantiles at q -/+ 1.96 sqrt(q(1-q)/n)."""
    half = 1.96 * math.sqrt(q * (1 - q) / obs.n)
    return obs.quantile(max(q - half, 0.0)), obs.quantile(min(q + half, 1.0))


def measured(obs: Observation) -> tuple[tuple[float, ...], tuple[tuple[float, float], ...]]:
    values = tuple(obs.quantile(q) * 1e3 for q in QUANTILES)
    cis = tuple((lo * 1e3, hi * 1e3) for lo, hi in (percentile_ci(obs, q) for q in QUANTILES))
    return values, cis


def pass_distributions(mesh: MeshModel, path: str, features: Sequence[str]) -> list[Distribution]:
    assert mesh.proxy is not None
    dists: list[Distribution] = []
    for kind in PASSES_OF_PATH[path]:
        dists.append(mesh.proxy.passes[kind])
        for f in features:
            extra = mesh.features[f].per_pass.get(kind)
            if extra is not None:
                dists.append(extra)
    return dists


def check_runs(mesh: MeshModel, runs: Sequence[Run], baseline: Run) -> list[ModeCheck]:
    """Model vs measured p50/p90/p99 for every run whose path the proxy model covers."""
    base_obs = from_result(baseline.result)
    observations = {r.id: from_result(r.result) for r in runs}
    grid = Grid.covering([base_obs, *observations.values()])
    base = from_observation(grid, base_obs)
    out = []
    for run in runs:
        path = run.manifest.setup.path
        if path not in PASSES_OF_PATH:
            continue
        total: GridPmf = base
        for dist in pass_distributions(mesh, path, sorted(run.features)):
            total = total.plus(from_cdf(grid, dist.cdf))
        values, cis = measured(observations[run.id])
        model = tuple(total.quantile(q) * 1e3 for q in QUANTILES)
        out.append(ModeCheck(run.id, values, model, cis))
    return out
