"""Measured vs predicted, run by run: the library behind ``meshsim validate``.

Every run folder is replayed in the simulator with its own setup and fortio workload (``replay``); the measured
percentiles come from the raw access log when the run has one, else from fortio's histogram interpolated the way
fortio does. A run the model was fitted from (``calibration.fitted_from``), or that its calibration measured past
what the setup carried (``calibration.saturated_runs``), is marked ``fit``, a baseline run that
only supplied a derived topology ``topology``; both are left out of the summary unless asked for, so the summary
speaks about held-out runs only.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from meshsim.calibrate.measure.dataset import Run, distinct_folders, load_run, refuse_same_ids
from meshsim.calibrate.fit.baseline_cpu import has_by_rate
from meshsim.calibrate.fit.model_file import read_model
from meshsim.calibrate.fit.observations import Observation, from_result
from meshsim.catalog import load_mesh, load_topology
from meshsim.errors import FieldError, MeshsimError
from meshsim.topology import Topology
from meshsim.yamlio import input_file_problem

from meshsim.calibrate.validation.column_accuracy import ColumnAccuracy, ScoredRun, column_accuracy
from meshsim.calibrate.validation.compare_metric import Metric
from meshsim.calibrate.validation.proxy_view_check import view_metrics
from meshsim.calibrate.validation.replay import CannotReplay, replay
from meshsim.calibrate.validation.run_queue_check import run_queue_metrics
from meshsim.calibrate.validation.validate_options import LATENCY_KEYS, SUMMARY_KEYS, ValidateOptions
from meshsim.progress import Progress

PERCENTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p999", 0.999))
CDF_POINTS = 400
# a replay that carried less than its requested rate by more than RATE_TOLERANCE saturated the host: it is replayed
# with the baseline's CPU read at the rate it carried, until that rate holds within RATE_TOLERANCE, RATE_PASSES
# replays at most (the CPU falls slowly with the rate: two suffice)
RATE_TOLERANCE = 0.05
RATE_PASSES = 3


@dataclass(frozen=True)
class RunComparison:
    run_id: str
    folder: str
    role: str  # held-out | fit | topology
    status: str  # ok | saturated
    setup: str
    rps: float
    connections: int
    latency_ms: Mapping[str, Metric]
    achieved_rps: Metric
    cpu_cores: Mapping[str, Metric]
    saturation_rps: float | None  # predicted
    bottleneck: str
    measured_cdf: tuple[list[float], list[float]]  # (ms, cumulative fraction)
    predicted_cdf: tuple[list[float], list[float]]
    notes: tuple[str, ...] = ()
    breakdown_ms: Mapping[str, float] = field(default_factory=dict)  # where the predicted time goes, per request
    payload_bytes: int | None = None
    # view -> p50/p90/p99 of a proxy's own histogram (lab runs that recorded them) beside the predicted view
    proxy_latency_ms: Mapping[str, Mapping[str, Metric]] = field(default_factory=dict)
    # component -> run-queue ms per request, the kernel's (lab runs that recorded it) beside the model's core waits
    run_queue_ms: Mapping[str, Metric] = field(default_factory=dict)

    def error(self, key: str) -> float:
        return self.achieved_rps.rel_error if key == "rps" else self.latency_ms[key].rel_error

    def metric(self, key: str) -> Metric:
        return self.achieved_rps if key == "rps" else self.latency_ms[key]

    @property
    def same_setup(self) -> str:
        """The setup with its payload: what two runs must share to be repeats (or a naive copy) of each other."""
        return self.setup if self.payload_bytes is None else f"{self.setup} {self.payload_bytes} B"

    @property
    def cpu_ms_per_request(self) -> dict[str, Metric]:
        """Each component's CPU per completed request (ms), measured and predicted: a saturated run and its replay
        fill the same cores at different rates, so equal cores can hide a different cost per request."""
        a = self.achieved_rps
        return {k: Metric(m.measured / a.measured * 1e3 if a.measured > 0 else math.nan,
                          m.predicted / a.predicted * 1e3 if a.predicted > 0 else math.nan)
                for k, m in self.cpu_cores.items()}

    def scored(self) -> ScoredRun:
        return ScoredRun(self.run_id, self.setup, self.rps, self.connections, self.payload_bytes or 0, self.role,
                         {k: self.metric(k).measured for k in SUMMARY_KEYS},
                         {k: self.metric(k).predicted for k in SUMMARY_KEYS})

    def to_dict(self, cdf: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run": self.run_id, "folder": self.folder, "role": self.role, "status": self.status,
            "setup": self.setup, "payload_bytes": self.payload_bytes, "rps": self.rps, "connections": self.connections,
            "latency_ms": {k: m.to_dict() for k, m in self.latency_ms.items()},
            "achieved_rps": self.achieved_rps.to_dict(),
            "cpu_cores": {k: m.to_dict() for k, m in self.cpu_cores.items()},
            "cpu_ms_per_request": {k: m.to_dict() for k, m in self.cpu_ms_per_request.items()},
            "predicted_saturation_rps": self.saturation_rps, "bottleneck": self.bottleneck,
            "predicted_time_breakdown_ms": dict(self.breakdown_ms), "notes": list(self.notes),
            "proxy_latency_ms": {view: {k: m.to_dict() for k, m in metrics.items()}
                                 for view, metrics in self.proxy_latency_ms.items()},
            "run_queue_ms_per_request": {k: m.to_dict() for k, m in self.run_queue_ms.items()}}
        if cdf:
            out["cdf"] = {"measured": {"ms": self.measured_cdf[0], "q": self.measured_cdf[1]},
                          "predicted": {"ms": self.predicted_cdf[0], "q": self.predicted_cdf[1]}}
        return out


@dataclass(frozen=True)
class SummaryRow:
    key: str
    n: int
    median_abs: float
    worst_abs: float
    worst_run: str


@dataclass
class Validation:
    model: str
    model_name: str
    comparisons: list[RunComparison]
    skipped: list[str] = field(default_factory=list)
    include_fit_runs: bool = False
    settings: dict[str, Any] = field(default_factory=dict)
    interrupted: str = ""  # set when Ctrl-C/SIGTERM stopped the replays: the comparisons are those finished before

    def summarised(self) -> list[RunComparison]:
        return [c for c in self.comparisons if c.role == "held-out" or (self.include_fit_runs and c.role == "fit")]

    def repeatability(self) -> dict[str, SummaryRow]:
        """How far the measurement itself moves when the same setup is measured again: |a - b| / mean(a, b) over
        every pair of runs with the same setup, payload, rate and connections (any role). It is the floor under any model's
        error on these runs: a prediction cannot be expected closer to a run than a repeat of that run is."""
        groups: dict[tuple[str, float, int], list[RunComparison]] = {}
        for c in self.comparisons:
            groups.setdefault((c.same_setup, c.rps, c.connections), []).append(c)
        rows = {}
        for key in SUMMARY_KEYS:
            diffs = []
            for (setup, rps, conns), members in groups.items():
                values = [c.metric(key).measured for c in members]
                for i in range(len(values)):
                    for j in range(i + 1, len(values)):
                        a, b = values[i], values[j]
                        if math.isfinite(a) and math.isfinite(b) and a + b > 0:
                            diffs.append((abs(a - b) / ((a + b) / 2), f"{setup} {rps:g} rps c{conns}"))
            if diffs:
                worst = max(diffs)
                rows[key] = SummaryRow(key, len(diffs), statistics.median(d for d, _ in diffs), worst[0], worst[1])
        return rows

    def by_column(self, column: str) -> list[ColumnAccuracy]:
        """Median |error| per value of ``column`` (connections, rps or payload) beside the naive forecast (column_accuracy)."""
        return column_accuracy([c.scored() for c in self.comparisons], [c.scored() for c in self.summarised()],
                               column, SUMMARY_KEYS)

    def summary(self) -> dict[str, SummaryRow]:
        rows = {}
        chosen = self.summarised()
        for key in SUMMARY_KEYS:
            errs = [(abs(c.error(key)), c.run_id) for c in chosen if math.isfinite(c.error(key))]
            if not errs:
                continue
            worst = max(errs)
            rows[key] = SummaryRow(key, len(errs), statistics.median(e for e, _ in errs), worst[0], worst[1])
        return rows


# -- measured side -------------------------------------------------------------------------------------------------

def measured_cdf(obs: Observation) -> tuple[list[float], list[float]]:
    if obs.raw:
        x = np.sort(obs.samples)  # type: ignore[arg-type]
        idx = np.unique(np.linspace(0, x.size - 1, min(CDF_POINTS, x.size)).astype(int))
        return [round(float(v) * 1e3, 5) for v in x[idx]], [round(float(i + 1) / x.size, 6) for i in idx]
    edges, cum = obs.ecdf_at_edges()
    return [round(float(obs.lo[0]) * 1e3, 5)] + [round(float(v) * 1e3, 5) for v in edges], \
           [0.0] + [round(float(c), 6) for c in cum]


def measured_latency(run: Run) -> tuple[dict[str, float], Observation]:
    obs = from_result(run.result)
    values = {k: obs.quantile(q) * 1e3 for k, q in PERCENTILES}
    values["max"] = (obs.max if obs.raw else run.result.max_s) * 1e3
    return values, obs


# -- the comparison ------------------------------------------------------------------------------------------------

def predicted_latency(pred: Mapping[str, Any], measured: Mapping[str, float],
                      resolution: Mapping[str, tuple[float, float]] | None = None) -> dict[str, Metric]:
    """Measured vs predicted for every latency key (ms), with the simulator's CI and the measurement's bucket."""
    lat = {}
    for key in LATENCY_KEYS:
        ci = pred["latency_ci95_ms"].get(key)
        ci_t = tuple(ci) if ci and all(v is not None for v in ci) else None
        value = pred["latency_ms"].get(key)
        lat[key] = Metric(measured[key], float("nan") if value is None else float(value), ci_t,  # type: ignore[arg-type]
                          (resolution or {}).get(key))
    return lat


def predicted_rate(pred: Mapping[str, Any], measured_rps: float) -> Metric:
    rps_ci = pred.get("achieved_rps_ci95")
    return Metric(measured_rps, float(pred["achieved_rps"]), tuple(rps_ci) if rps_ci else None)


def predicted_cdf(pred: Mapping[str, Any]) -> tuple[list[float], list[float]]:
    q = pred["latency_cdf_ms"]
    return [v for v in q["ms"] if v is not None], [lv for lv, v in zip(q["q"], q["ms"]) if v is not None]


def simulator_notes(pred: Mapping[str, Any]) -> list[str]:
    return [f"simulator: {w}" for w in pred.get("warnings", [])]


def _compare(run: Run, role: str, pred: Mapping[str, Any], notes: Sequence[str]) -> RunComparison:
    measured, obs = measured_latency(run)
    lat = predicted_latency(pred, measured)
    achieved = predicted_rate(pred, run.result.actual_rps)
    duration = run.result.duration_s
    cpu = {}
    for comp, seconds in sorted(run.manifest.cpu_seconds.items()):
        if duration > 0:
            cpu[comp] = Metric(seconds / duration, float(pred["cpu_cores"].get(comp, float("nan"))))
    s = run.manifest.setup
    setup = f"{s.topology} {s.path}" + (f" +{'+'.join(s.features)}" if s.features else "")
    if s.proxy_cpu_limit:
        setup += f" cpu{s.proxy_cpu_limit:g}"
    if s.proxy_workers and s.path != "baseline":
        setup += f" w{s.proxy_workers}"
    status = "saturated" if run.status == "saturated" else "ok"
    notes = list(notes) + [f"run flagged saturated: {r}" for r in run.quality.reasons if status == "saturated"]
    views, view_notes = view_metrics(run, pred)
    waits, wait_notes = run_queue_metrics(run, pred)
    notes += view_notes + wait_notes + simulator_notes(pred)
    return RunComparison(run.id, str(run.folder), role, status, setup, float(run.rps or 0),
                         run.result.num_threads, lat, achieved, cpu, pred.get("saturation_rps"),
                         pred.get("bottleneck", ""), measured_cdf(obs), predicted_cdf(pred), tuple(notes),
                         dict(pred.get("time_breakdown_ms") or {}), s.payload_bytes, views, waits)


def _load(run_dirs: Sequence[str | Path], skipped: list[str], progress: Progress) -> list[Run]:
    runs = []
    for sub in distinct_folders([sub for folder in run_dirs for sub in _run_folders(folder)]):
        try:
            run = load_run(sub)
        except MeshsimError as exc:
            skipped.append(f"{sub}: unreadable: {exc}")
            progress(f"skipped {sub}: {exc}")
            continue
        if run.status == "failed":
            why = "; ".join(run.quality.reasons) or "manifest status failed"
            skipped.append(f"{run.id}: failed run, not validated ({why})")
            progress(f"skipped {run.id}: failed ({why})")
            continue
        runs.append(run)
    refuse_same_ids(runs)
    return runs


def _run_folders(folder: str | Path) -> list[Path]:
    """A run folder, or the run folders one level below it."""
    path = Path(folder)
    if not path.exists():
        raise MeshsimError(f"RUN_DIR {folder}: does not exist")
    subs = [path] if (path / "manifest.yaml").exists() else sorted(
        p for p in path.iterdir() if p.is_dir() and (p / "manifest.yaml").exists()) if path.is_dir() else []
    if not subs:
        raise MeshsimError(f"RUN_DIR {folder}: not a run folder (no manifest.yaml in it or one level below)")
    return subs


def read_validated_model(model: str | Path) -> tuple[Path, dict[str, Any], str]:
    path = Path(model)
    problem = input_file_problem(path)
    if problem:
        raise FieldError("model", f"file {model} {problem}")
    load_mesh(path)  # the simulator's own validation: one line naming the file and key
    data = read_model(path)
    return path, data, str(data.get("name", path.stem))


def validate_runs(options: ValidateOptions, progress: Progress | None = None) -> Validation:
    """Replay every run in the simulator and compare; failed or unreplayable runs are skipped with a note."""
    report_progress = progress or (lambda _m: None)
    topology = options.topology
    model_path, model_data, name = read_validated_model(options.model)
    topo: Topology | None = load_topology(topology) if topology is not None else None
    calibration = model_data.get("calibration") or {}
    # a saturated calibration run was seen by the calibration (a measured capacity), so it is never held-out
    fitted = set(calibration.get("fitted_from") or []) | {
        s.get("run") for s in calibration.get("saturated_runs") or [] if isinstance(s, Mapping)}
    validation = Validation(str(model_path), name, [], include_fit_runs=options.include_fit_runs,
                            settings={"replications": options.replications, "sim_duration_s": options.sim_duration_s,
                                      "run_queues": "per-core" if options.per_core_queues else "shared",
                                      "seed": options.seed, "topology": str(topology) if topology else "from manifests"})
    runs = _load(options.run_dirs, validation.skipped, report_progress)
    plans = []
    topology_runs: set[str] = set()

    def replayed(run: Run, rate: float | None = None) -> tuple[Any, tuple[str, ...]]:
        return replay(model_data, run, runs, topology=topo, sim_duration_s=options.sim_duration_s,
                      replications=options.replications, seed=options.seed, processes=options.processes,
                      per_core_queues=options.per_core_queues, baseline_rate=rate)

    for run in runs:
        try:
            plan, base_ids = replayed(run)
        except CannotReplay as exc:
            validation.skipped.append(f"{run.id}: cannot be replayed: {exc}")
            report_progress(f"skipped {run.id}: {exc}")
            continue
        plans.append((run, plan))
        topology_runs.update(base_ids)
    try:
        for index, (run, plan) in enumerate(plans, 1):
            again = (lambda rate, run=run: replayed(run, rate)[0]) if has_by_rate(model_data) else None
            _compare_one(validation, run, plan, model_path, fitted, topology_runs, f"[{index}/{len(plans)}]",
                         report_progress, again)
    except KeyboardInterrupt:  # keep what is finished: the caller prints it and exits as interrupted
        validation.interrupted = f"interrupted after {len(validation.comparisons)} of {len(plans)} runs"
        report_progress(validation.interrupted)
    return validation


def _compare_one(validation: Validation, run: Run, plan: Any, model_path: Path, fitted: set[str],
                 topology_runs: set[str], counter: str, report_progress: Progress,
                 again: Callable[[float], Any] | None) -> None:
    """Replay one run and append its comparison (or a skip note) to ``validation``. ``again``: the run's replay
    with the baseline's CPU read at a rate (None: the model has one value): a replay that saturates the host is
    repeated at the rate it carried."""
    from meshsim.sim.experiments.predict import predict_options

    role = "fit" if run.id in fitted else "topology" if run.id in topology_runs else "held-out"
    report_progress(f"{counter} simulating {run.id} ({role}) ...")
    try:
        pred = predict_options(plan.options.with_changes(mesh=model_path)).to_dict()
        for _ in range(RATE_PASSES - 1 if again is not None else 0):
            carried, used = float(pred["achieved_rps"]), plan.baseline_rate or float(run.rps or 0.0)
            if not used or abs(carried / used - 1.0) <= RATE_TOLERANCE:
                break
            report_progress(f"    carried {carried:.0f} rps: again with the baseline's CPU at that rate")
            plan = again(carried)
            pred = predict_options(plan.options.with_changes(mesh=model_path)).to_dict()
    except MeshsimError as exc:
        validation.skipped.append(f"{run.id}: the simulator refused it: {exc}")
        report_progress(f"skipped {run.id}: {exc}")
        return
    comparison = _compare(run, role, pred, plan.notes)
    validation.comparisons.append(comparison)
    p = comparison.latency_ms
    report_progress(f"    p50 {p['p50'].measured:.3f} vs {p['p50'].predicted:.3f} ms, p99 {p['p99'].measured:.3f} vs "
        f"{p['p99'].predicted:.3f} ms, rps {comparison.achieved_rps.measured:.0f} vs "
        f"{comparison.achieved_rps.predicted:.0f}")


# -- the gate ------------------------------------------------------------------------------------------------------

def gate(validation: Validation, thresholds: Mapping[str, float]) -> list[str]:
    """One message per threshold the worst held-out error exceeds (empty: the gate passes)."""
    summary = validation.summary()
    if not summary:
        return ["no held-out run to judge (all runs were fit runs, skipped, or failed; --include-fit-runs "
                "judges the fit runs)"]
    failures = []
    for key, limit in thresholds.items():
        row = summary.get(key)
        if row is None:
            failures.append(f"{key}: no run has a comparable {key}")
        elif row.worst_abs > limit:
            failures.append(f"{key}: worst error {row.worst_abs:.1%} (run {row.worst_run}) exceeds {limit:.0%}")
    return failures
