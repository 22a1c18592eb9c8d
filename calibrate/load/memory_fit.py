"""Fitting a proxy's memory model (``meshsim.mesh.Memory`` and each feature's ``memory_mb``) by least squares.

One observation is a proxy's resident memory with its open connections, its mean requests in flight and the
features it runs. The model is linear in its coefficients:

    resident_mb = base_mb + per_connection_mb x connections + per_in_flight_mb x in_flight + sum(feature_mb)

so ordinary least squares fits it, with every coefficient kept in [0, MAX_MEMORY_MB] (memory does not shrink when a
connection opens; a negative fit is noise and would be refused by the model). A coefficient the data cannot
identify (a column constant or a combination of others, e.g. a feature present in every row together with the
base) is an error naming it: fix it from other data (``fixed``), it is then subtracted before the fit.

Two sources, both read here: the Istio 1.7 pipeline's memory columns (``measurements/istio-1.7``) and the lab's RSS
under load (``measurements/lab-memory-*``, ``rss.csv``).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
from scipy.optimize import lsq_linear

from meshsim.errors import ModelError
from meshsim.limits import MAX_MEMORY_MB
from meshsim.mesh import Memory

from meshsim.calibrate.measure.dataset import Run
from meshsim.calibrate.measure.lab.rss_under_load import read_rows
from meshsim.calibrate.measure.tables import load_table, measurements_dir

TERMS = ("base_mb", "per_connection_mb", "per_in_flight_mb")
OUTLIER_Z = 3.5  # Iglewicz and Hoaglin's cut for the modified z-score (robust SDs from the median)


@dataclass(frozen=True)
class MemoryObservation:
    """One proxy's resident memory (MB) with ``connections`` open, ``in_flight`` requests held on average and
    ``features`` on; ``setup``: rows of the same setup differ only by noise (and rate), their spread is the noise."""

    resident_mb: float
    connections: float
    in_flight: float
    features: frozenset[str] = frozenset()
    setup: str = ""

    def __post_init__(self) -> None:
        for name in ("resident_mb", "connections", "in_flight"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ModelError(f"memory observation {self.setup!r}: {name} must be finite and >= 0, got {value}")


@dataclass(frozen=True)
class MemoryFit:
    """Fitted coefficients (MB) with one standard error each; ``fixed`` ones were given, not fitted."""

    coefficients: Mapping[str, float]  # base_mb, per_connection_mb, per_in_flight_mb, feature:<name>
    std_errors: Mapping[str, float]
    fixed: Mapping[str, float] = field(default_factory=dict)
    rows: int = 0
    residual_sd: float = float("nan")
    rejected: tuple[MemoryObservation, ...] = ()  # rows left out as outliers (``reject_outliers``)

    def value(self, name: str) -> float:
        return self.fixed[name] if name in self.fixed else self.coefficients[name]

    def memory(self) -> Memory:
        return Memory(*(self.value(t) for t in TERMS))

    def feature_mb(self, name: str) -> float:
        return self.value(f"feature:{name}")

    def predict(self, obs: MemoryObservation) -> float:
        return self.memory().resident_mb(obs.connections, obs.in_flight,
                                         sum(self.feature_mb(f) for f in obs.features))


def _design(observations: Sequence[MemoryObservation], features: Sequence[str]) -> dict[str, np.ndarray]:
    return {"base_mb": np.ones(len(observations)),
            "per_connection_mb": np.array([o.connections for o in observations], dtype=float),
            "per_in_flight_mb": np.array([o.in_flight for o in observations], dtype=float),
            **{f"feature:{f}": np.array([1.0 if f in o.features else 0.0 for o in observations]) for f in features}}


def _unidentified(x: np.ndarray, names: Sequence[str]) -> list[str]:
    """Columns that are combinations of the others (each could move without changing the fit)."""
    rank = np.linalg.matrix_rank(x)
    return [n for j, n in enumerate(names) if np.linalg.matrix_rank(np.delete(x, j, axis=1)) == rank]


def fit_memory(observations: Sequence[MemoryObservation], features: Sequence[str] = (),
               fixed: Mapping[str, float] | None = None, reject_outliers: bool = False) -> MemoryFit:
    """Least squares of the memory model on ``observations``; ``features``: the feature constants to fit (a feature
    of an observation not listed here and not in ``fixed`` is an error); ``fixed``: coefficients given.

    ``reject_outliers``: fit, leave out the rows whose residual is more than OUTLIER_Z robust SDs (1.4826 x the
    median absolute deviation of the residuals) from the median residual, fit again once; the rows left out are
    in ``rejected``. One gross row (a pod that kept memory from an earlier run) otherwise moves a constant by its
    excess over the number of rows that share it."""
    fit = _least_squares(observations, features, dict(fixed or {}))
    if not reject_outliers:
        return fit
    residuals = np.array([o.resident_mb - fit.predict(o) for o in observations])
    centre = float(np.median(residuals))
    scale = 1.4826 * float(np.median(np.abs(residuals - centre)))
    keep = [o for o, r in zip(observations, residuals) if scale == 0 or abs(r - centre) <= OUTLIER_Z * scale]
    if len(keep) == len(observations):
        return fit
    refit = _least_squares(keep, features, dict(fixed or {}))
    return replace(refit, rejected=tuple(o for o in observations if o not in keep))


def _least_squares(observations: Sequence[MemoryObservation], features: Sequence[str],
                   fixed: dict[str, float]) -> MemoryFit:
    known = {*TERMS, *(f"feature:{f}" for f in features)}
    for name in fixed:
        if name not in known and not name.startswith("feature:"):
            raise ModelError(f"memory fit: unknown fixed coefficient {name!r} (known: {', '.join(sorted(known))})")
    stray = {f for o in observations for f in o.features} - set(features) - {n[8:] for n in fixed}
    if stray:
        raise ModelError(f"memory fit: observations have feature(s) {', '.join(sorted(stray))} "
                         "neither fitted nor fixed")
    columns = _design(observations, sorted({*features, *(n[8:] for n in fixed if n.startswith("feature:"))}))
    y = np.array([o.resident_mb for o in observations], dtype=float)
    for name, value in fixed.items():
        y = y - value * columns.pop(name)
    names = list(columns)
    x = np.column_stack([columns[n] for n in names]) if names else np.zeros((len(y), 0))
    if len(y) <= len(names):
        raise ModelError(f"memory fit: {len(y)} observation(s) for {len(names)} coefficient(s); need more rows")
    loose = _unidentified(x, names)
    if loose:
        raise ModelError(f"memory fit: these rows cannot separate {', '.join(loose)}: fix one of them from other data")
    solution = lsq_linear(x, y, bounds=(0.0, MAX_MEMORY_MB), method="bvls")  # active set: exact on the bounds
    coef = solution.x
    residuals = y - x @ coef
    dof = len(y) - len(names)
    sigma2 = float(residuals @ residuals) / dof
    cov = sigma2 * np.linalg.inv(x.T @ x)
    return MemoryFit({n: float(c) for n, c in zip(names, coef)},
                     {n: float(math.sqrt(max(v, 0.0))) for n, v in zip(names, np.diag(cov))},
                     fixed, len(y), math.sqrt(sigma2))


def setup_noise(observations: Iterable[MemoryObservation]) -> dict[str, float]:
    """Per setup, the standard deviation of its rows around their mean (setups with one row are left out)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for o in observations:
        groups[o.setup].append(o.resident_mb)
    return {k: float(np.std(v, ddof=1)) for k, v in groups.items() if len(v) > 1}


# -- the Istio 1.7 pipeline's memory columns -----------------------------------------------------------------------

# Labels' telemetry/mTLS part -> the istio model's features. *_baseline rows: the sidecars run (their configuration
# loaded) but traffic bypasses them: no connection, nothing in flight, no per-request stats series, so a bypassed
# v2-sd-full sidecar is an idle mTLS sidecar like none_mtls_baseline. Traversed Stackdriver and Wasm telemetry rows
# are left out: neither is a feature of the model.
ISTIO17_FEATURES = {"none_mtls": frozenset({"mtls"}), "v2-stats-nullvm": frozenset({"mtls", "telemetry"}),
                    "v2-sd-full-nullvm": frozenset({"mtls"})}
ISTIO17_PODS = ("fortioclient", "fortioserver")
_LABEL = re.compile(r"^[0-9a-f]+_qps_(?P<qps>[0-9]+)_c_(?P<c>[0-9]+)_(?P<size>[0-9]+)_"
                    r"(?P<setup>.+)_(?P<scope>both|baseline)$")


def _istio17_row(row: Mapping, pod: str) -> MemoryObservation | None:
    match = _LABEL.match(str(row["Labels"]))
    if match is None:
        raise ModelError(f"istio 1.7 table: unexpected label {row['Labels']!r}")
    setup, both = match["setup"], match["scope"] == "both"
    if setup not in ISTIO17_FEATURES or (setup == "v2-sd-full-nullvm" and both):
        return None
    # a bypassed sidecar has no connection and holds nothing; a traversed one holds each request about its whole
    # call (Little's law with the median latency as the hold time: the table has no mean)
    in_flight = float(row["ActualQPS"]) * float(row["p50"]) * 1e-6 if both else 0.0
    return MemoryObservation(float(row[f"mem_Mi_avg_istio_proxy_{pod}"]),
                             float(match["c"]) if both else 0.0, in_flight,
                             ISTIO17_FEATURES[setup], f"{setup}_{match['scope']}")


def istio17_observations(folder: str | Path | None = None) -> list[MemoryObservation]:
    """The client and server istio-proxy memory of every Istio 1.7 row the istio model can describe (MiB, as
    the lab's /proc readings: meshsim's "MB" of memory is 2^20 bytes)."""
    table = load_table("istio17_telemetry_lowrate", folder or measurements_dir() / "istio-1.7")
    out = [_istio17_row(row, pod) for row in table.rows for pod in ISTIO17_PODS]
    return [o for o in out if o is not None]


# -- the lab's RSS under load --------------------------------------------------------------------------------------

def lab_observations(rss_csv: str | Path, idle: bool = True) -> list[MemoryObservation]:
    """Both sidecars of every lab probe (VmRSS kB / 1024); with ``idle`` also each
    fresh lab's reading before its load (no connection, nothing in flight, the same features)."""
    out = []
    for r in read_rows(Path(rss_csv)):
        feats = frozenset({"mtls"}) if r.mode == "mtls" else frozenset()
        for side in ("client", "server"):
            point = f"{r.mode}-q{r.rps:g}-c{r.connections}-{side}"
            out.append(MemoryObservation(getattr(r, f"{side}_sidecar_mb"), r.connections, r.in_flight, feats, point))
            if idle:
                out.append(MemoryObservation(getattr(r, f"{side}_sidecar_idle_mb"), 0.0, 0.0, feats,
                                             f"{r.mode}-idle-{side}"))
    return out


# -- run folders (meshsim fit, lab calibration) --------------------------------------------------------------------

def run_observations(runs: Iterable[Run]) -> list[MemoryObservation]:
    """Each sidecar's resident memory in runs that recorded it (``memory_mb``), with the run's connections, features
    and requests held (achieved rps x mean latency: Little's law with the whole call as the hold, an upper bound
    for a sidecar deeper in a chain). Runs with replicas are left out (their sidecars' memory adds up)."""
    out = []
    for run in runs:
        setup, load = run.manifest.setup, run.manifest.load
        if (setup.replicas or 1) > 1:
            continue
        connections = load.connections or run.result.num_threads
        in_flight = run.result.actual_rps * run.result.mean_s
        for component, mb in run.manifest.memory_mb.items():
            if component.endswith("/sidecar") and mb > 0:
                out.append(MemoryObservation(float(mb), float(connections), in_flight, run.features,
                                             f"{setup.path}-q{run.rps}-c{connections}-{component}"))
    return out


def identified_fit(observations: Sequence[MemoryObservation],
                   features: Sequence[str]) -> tuple[MemoryFit, list[str]]:
    """The fit with every term these rows cannot identify fixed at 0 (one connection count: no per-connection
    term); returns the fit and a note per term so fixed."""
    fixed: dict[str, float] = {}
    notes = []
    while True:
        try:
            return fit_memory(observations, [f for f in features if f"feature:{f}" not in fixed], fixed), notes
        except ModelError as exc:
            loose = [t for t in (*TERMS[::-1], *(f"feature:{f}" for f in features))
                     if t != "base_mb" and t not in fixed and t in str(exc)]
            if not loose:
                raise
            fixed[loose[0]] = 0.0
            notes.append(f"memory: {loose[0]} not identified by these runs, set to 0")


def memory_from_runs(runs: Sequence[Run]) -> tuple[dict | None, dict[str, float], list[str]]:
    """The proxy's ``memory`` block (with its source) and each feature's memory_mb from runs' sidecar RSS; None
    when fewer than 4 sidecar readings were recorded."""
    observations = run_observations(runs)
    if len(observations) < 4:
        return None, {}, ["memory: fewer than 4 sidecar RSS readings in the runs: no memory block written"]
    features = sorted({f for o in observations for f in o.features})
    fit, notes = identified_fit(observations, features)
    block = {t: round(fit.value(t), 4) for t in TERMS}
    block["source"] = (f"least squares (meshsim.calibrate.load.memory_fit) over {fit.rows} sidecar RSS readings "
                       f"of the runs; +- {', '.join(f'{k} {v:.3g}' for k, v in fit.std_errors.items())}; "
                       f"residual SD {fit.residual_sd:.3g} MB")
    return block, {f: round(fit.feature_mb(f), 4) for f in features}, notes
