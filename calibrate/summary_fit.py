"""``fit_summary_rows``: a mesh model and its cluster from a pipeline's summary rows (``meshsim fit --rows``).

Summary rows (``calibrate/measure/summary_rows.py``) give each run's p50/p90/p99 and each sidecar's CPU and memory
at one connection count and a ladder of rates. Every quantity below is fitted by simulating the rows' own fortio
load (``calibrate/fit/row_simulation.py``) on the rows' topology, least squares on log errors, common random numbers:

1. **the cluster** (baseline rows: sidecars bypassed): the cross-node hop (lognormal, two per request) and how the
   apps wake after idling (``cluster.wakeup``: delay, tau, Weibull shape), from the baseline's p50/p90/p99 at every
   rate -- the latency falls with the rate as the idle gaps shorten;
2. **the proxy** (the reference mode's rows, both sidecars): one pass distribution (lognormal; the four passes
   alike), the proxy's wake-up (cold delay and CPU, tau, the CPU of resuming from any idle gap) and each side's
   held fraction, from p50/p90/p99 at every rate and each sidecar's CPU. A pass holds its worker only for its CPU:
   the held part of the passes *is* the CPU the model books, so matching the measured CPU at every rate bounds
   what holds a worker, and the latency at the high rates (16 connections firing close together) tests it;
3. **each feature beyond the reference** (telemetry): its increment per pass, its work after the response and its
   part of a cold wake, from its rows with the proxy held fixed;
4. **idle CPU** of a proxy from the bypassed sidecars of the baseline rows, and **memory** from every row.

How connections reach workers is a fact of the proxy's version (``meshsim.mesh.BALANCE``); the fit runs stage 2
under each candidate balance given and keeps the one the rows fit best, reporting both.

What summary rows cannot identify (said in the model's notes): the request and response passes apart, the inbound
and outbound passes' latencies apart (only their CPU is measured per side), the pass distribution's shape beyond
three percentiles, the per-KB cost (one payload), memory per connection (one connection count), and a feature that
every row had on (mTLS here): it is part of the passes, and a prediction without it is refused.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from meshsim.calibrate.fit.bounded_search import Param, minimise
from meshsim.calibrate.fit.model_file import write_model
from meshsim.calibrate.fit.run_load import load_block
from meshsim.calibrate.fit.row_simulation import RowSettings, RowSimulator, log_errors
from meshsim.calibrate.measure.summary_rows import SummaryRow, read_rows
from meshsim.errors import MeshsimError
from meshsim.progress import Progress

METHOD = ("simulation of each summary row's own fortio load on the rows' topology, least squares on log errors of "
          "p50/p90/p99 and of each sidecar's CPU, Nelder-Mead over bounded parameters with common random numbers "
          "(calibrate/summary_fit.py)")
CV_FEATURE = 0.6  # a feature's increment per pass: its mean is identified, its spread (cv) is an assumption


@dataclass
class RowsFit:
    mesh: str
    out: Path | None
    model: dict[str, Any]
    rows: list[tuple[SummaryRow, tuple[float, ...], dict[str, float]]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        head = f"{'row':48} {'p50 meas/sim ms':>18} {'p99 meas/sim ms':>18} {'CPU c/s meas':>14} {'CPU c/s sim':>14}"
        lines = [head, "-" * len(head)]
        for row, q, cpu in self.rows:
            mc = "/".join(f"{row.cpu_cores.get(k, math.nan) * 1e3:.0f}" for k in ("client/sidecar", "server/sidecar"))
            sc = "/".join(f"{cpu.get(k, math.nan) * 1e3:.0f}" for k in ("client/sidecar", "server/sidecar"))
            lines.append(f"{row.id[:48]:48} {row.quantiles_s[0.5] * 1e3:8.3f}/{q[0] * 1e3:<9.3f} "
                         f"{row.quantiles_s[0.99] * 1e3:8.3f}/{q[2] * 1e3:<9.3f} {mc:>14} {sc:>14}")
        lines += [f"note: {n}" for n in self.notes]
        if self.out is not None:
            lines.append(f"wrote {self.out}")
        return "\n".join(lines)


def _lognormal(median_ms: float, sigma: float, source: str) -> dict[str, Any]:
    return {"family": "lognormal", "median_ms": round(median_ms, 5), "sigma": round(sigma, 4), "source": source}


def _skeleton(mesh: str, settings: RowSettings, balance: str, idle_mc: float, reference: Sequence[str],
              features: Sequence[str]) -> dict[str, Any]:
    """A model of the rows' mesh with neutral proxy numbers; the stages fill them in."""
    passes = {k: _lognormal(0.1, 0.4, "stage 2") for k in ("inbound_request", "inbound_response", "outbound_request",
                                                            "outbound_response")}
    fixed = {f: {"default": True, "fixed": True, "per_pass": {"family": "deterministic", "value_ms": 0.0},
                 "description": f"{f}: on in every row the model was fitted from, so part of the fitted passes",
                 "source": "summary rows: every modelled row had it on"} for f in reference}
    extra = {f: {"default": True, "per_pass": {"family": "lognormal", "mean_ms": 0.01, "cv": CV_FEATURE},
                 "description": f"{f} (fitted increment over the reference rows)", "source": "stage 3"}
             for f in features}
    return {"schema": "meshsim/mesh/v1", "name": mesh, "version": "", "description": "", "sources": {},
            "proxy": {"kind": "envoy", "placement": "sidecar", "dispatch": "pinned", "connection_balance": balance,
                      "workers": settings.workers, "cpu_limit": None, "header_bytes": 0, "per_kb_ms": 0.0,
                      "source": "", "passes": passes, "idle_millicores": round(idle_mc, 3),
                      "cpu_fraction": 0.5, "sides": {"inbound": {"cpu_fraction": 0.5},
                                                     "outbound": {"cpu_fraction": 0.5}}},
            "features": {**fixed, **extra}, "cluster": {}}


# -- stage 1: the cluster --------------------------------------------------------------------------------------------

CLUSTER_PARAMS = (Param("hop_ms", 0.02, 1.0, 0.1), Param("hop_sigma", 0.02, 1.5, 0.3),
                  Param("delay_ms", 0.005, 2.0, 0.15), Param("tau_ms", 0.5, 1000.0, 20.0),
                  Param("shape", 1.0, 6.0, 2.0))


def _with_cluster(model: dict[str, Any], v: Mapping[str, float]) -> dict[str, Any]:
    cluster = {"cross_node": _lognormal(v["hop_ms"], v["hop_sigma"], "stage 1"),
               "wakeup": {"delay_ms": round(v["delay_ms"], 5), "tau_ms": round(v["tau_ms"], 4),
                          "shape": round(v["shape"], 3), "source": "stage 1"}}
    return {**model, "cluster": cluster}


def _stage(sim: RowSimulator, rows: Sequence[SummaryRow], build: Callable[[Mapping[str, float]], dict[str, Any]],
           params: Sequence[Param], evaluations: int, report_progress: Progress, label: str, *, cpu: bool = True) -> Any:
    def objective(v: Mapping[str, float]) -> float:
        model = build(v)
        simulated: dict[tuple, Any] = {}  # rows of one setup and load (repeats, other builds) simulate alike
        total = 0.0
        for row in rows:
            key = (row.path, row.features, row.rps, row.connections)
            if key not in simulated:
                simulated[key] = sim.simulate(model, row)
            total += sum(e * e for e in log_errors(row, simulated[key], cpu=cpu))
        return total

    report_progress(f"{label}: {len(params)} parameters over {len(rows)} rows ...")
    return minimise(objective, params, evaluations, progress=report_progress, label=label)


# -- stage 2: the proxy ----------------------------------------------------------------------------------------------

PROXY_PARAMS = (Param("pass_ms", 0.01, 2.0, 0.1), Param("pass_sigma", 0.05, 1.5, 0.4),
                Param("fraction_in", 0.02, 1.0, 0.5), Param("fraction_out", 0.02, 1.0, 0.5),
                Param("cold_delay_ms", 0.001, 2.0, 0.1), Param("cold_cpu_ms", 0.001, 2.0, 0.1),
                Param("tau_ms", 0.5, 1000.0, 20.0), Param("resume_cpu_ms", 0.0005, 0.5, 0.02))


def _with_proxy(model: dict[str, Any], v: Mapping[str, float]) -> dict[str, Any]:
    proxy = dict(model["proxy"])
    proxy["passes"] = {k: _lognormal(v["pass_ms"], v["pass_sigma"], "stage 2") for k in proxy["passes"]}
    proxy["wakeup"] = {"delay_ms": round(v["cold_delay_ms"], 5), "tau_ms": round(v["tau_ms"], 4),
                       "cpu_ms": round(v["cold_cpu_ms"], 5), "resume_cpu_ms": round(v["resume_cpu_ms"], 5),
                       "source": "stage 2"}
    proxy["cpu_fraction"] = round(v["fraction_in"], 4)
    proxy["sides"] = {"inbound": {"cpu_fraction": round(v["fraction_in"], 4)},
                      "outbound": {"cpu_fraction": round(v["fraction_out"], 4)}}
    return {**model, "proxy": proxy}


# -- stage 3: a feature ----------------------------------------------------------------------------------------------

FEATURE_PARAMS = (Param("per_pass_ms", 0.001, 2.0, 0.03), Param("post_ms", 0.0005, 2.0, 0.02),
                  Param("cold_delay_ms", 0.0005, 2.0, 0.05), Param("cold_cpu_ms", 0.0005, 2.0, 0.05))


def _with_feature(model: dict[str, Any], name: str, v: Mapping[str, float]) -> dict[str, Any]:
    feature = {**model["features"][name],
               "per_pass": {"family": "lognormal", "mean_ms": round(v["per_pass_ms"], 5), "cv": CV_FEATURE},
               "post_response": {"family": "lognormal", "mean_ms": round(v["post_ms"], 5), "cv": CV_FEATURE},
               "cold_wake": {"delay_ms": round(v["cold_delay_ms"], 5), "cpu_ms": round(v["cold_cpu_ms"], 5)}}
    return {**model, "features": {**model["features"], name: feature}}


def _idle_millicores(baselines: Sequence[SummaryRow]) -> float:
    values = [c for r in baselines for c in r.cpu_cores.values()]
    return statistics.median(values) * 1e3 if values else 0.0


def _origin(rows: Sequence[SummaryRow]) -> str:
    return "; ".join(sorted({r.origin for r in rows}))


def _memory(rows: Sequence[SummaryRow], reference: Sequence[SummaryRow]) -> dict[str, Any] | None:
    values = [m for r in reference for m in r.memory_mb.values()]
    if not values:
        return None
    return {"base_mb": round(statistics.median(values), 2), "per_connection_mb": 0.0, "per_in_flight_mb": 0.0,
            "source": f"median istio-proxy memory of the {len(reference)} reference rows of {_origin(reference)} "
                      "(both pods; MiB x 1.048576): "
                      f"every row ran {sorted({r.connections for r in rows})} connections, so memory per connection "
                      "and per request held are not identified (0 written)"}


def fit_summary_rows(paths: Sequence[str | Path], mesh: str, out: str | Path | None, settings: RowSettings,
                     progress: Progress | None = None, *, reference_mode: str, balances: Sequence[str] = ("hash",),
                     evaluations: int = 240, description: str = "", version: str = "",
                     sources: Mapping[str, str] | None = None) -> RowsFit:
    """Fit ``mesh`` from summary rows (``reference_mode``: the mode whose rows define the proxy; each other
    both-sidecars mode adds its features on top). Writes ``out`` unless None."""
    report_progress = progress or (lambda _m: None)
    rows, skipped = read_rows(paths)
    baselines = [r for r in rows if r.bypassed]
    reference = [r for r in rows if r.mode == reference_mode]
    if not baselines or not reference:
        raise MeshsimError(f"meshsim fit --rows: need baseline rows and rows of the reference mode {reference_mode!r}"
                           f" (found {len(baselines)} and {len(reference)})")
    ref_features = reference[0].features
    others = sorted({r.mode for r in rows if not r.bypassed and r.mode != reference_mode})
    extra = sorted({f for r in rows if r.mode in others for f in r.features} - set(ref_features))
    sim = RowSimulator(settings)
    try:
        fit = _fit_stages(sim, mesh, rows, baselines, reference, others, ref_features, extra, settings, balances,
                          evaluations, report_progress)
    finally:
        sim.close()
    fit.notes += skipped and [f"{len(skipped)} rows of modes not modelled left out"] or []
    _finish(fit.model, rows, reference_mode, (description, version), sources or {}, fit.notes)
    fit.model["calibration"]["row_settings"] = {
        "topology": settings.topology, "jitter": settings.jitter, "uniform": settings.uniform,
        "fortio_version": settings.fortio_version or "default", "fortio_warmup": settings.fortio_warmup or "the version's",
        "proxy_workers": settings.workers, "requests_per_row": settings.requests, "seed": settings.seed,
        "connection_balances_tried": list(balances), "reference_mode": reference_mode,
        "source": "given to meshsim fit --rows (how the rows' runs were made, which the rows do not say)"}
    fit.model.setdefault("cluster", {})["load"] = load_block(
        settings.fortio_version, settings.fortio_warmup, settings.jitter, settings.uniform,
        "how the rows' runs drove fortio, given to meshsim fit --rows (calibration.row_settings); a prediction whose "
        "fortio differs says so")
    if out is not None:
        fit.out = write_model(fit.model, out)
    return fit


def _fit_stages(sim: RowSimulator, mesh: str, rows: Sequence[SummaryRow], baselines: Sequence[SummaryRow],
                reference: Sequence[SummaryRow], others: Sequence[str], ref_features: Sequence[str],
                extra: Sequence[str], settings: RowSettings, balances: Sequence[str], evaluations: int,
                report_progress: Progress) -> RowsFit:
    notes: list[str] = []
    idle = _idle_millicores(baselines)
    start = _skeleton(mesh, settings, balances[0], idle, ref_features, extra)
    stage1 = _stage(sim, baselines, lambda v: _with_cluster(start, v), CLUSTER_PARAMS, evaluations // 2, report_progress,
                    "cluster", cpu=False)
    clustered = _with_cluster(start, stage1.values)
    notes.append(f"cluster: {_describe(stage1.values)} (objective {stage1.objective:.4f} over {len(baselines)} "
                 "baseline rows)")
    best = None
    for balance in balances:
        based = {**clustered, "proxy": {**clustered["proxy"], "connection_balance": balance}}
        result = _stage(sim, reference, lambda v, b=based: _with_proxy(b, v), PROXY_PARAMS, evaluations, report_progress,
                        f"proxy ({balance})")
        notes.append(f"proxy with connection_balance {balance}: {_describe(result.values)} (objective "
                     f"{result.objective:.4f} over {len(reference)} rows)")
        if best is None or result.objective < best[1].objective:
            best = (based, result)
    assert best is not None
    model = _with_proxy(best[0], best[1].values)
    notes.append(f"connection_balance {model['proxy']['connection_balance']}: the rows fit it best")
    for mode in others:
        mode_rows = [r for r in rows if r.mode == mode]
        for name in sorted(set(mode_rows[0].features) - set(ref_features)):
            result = _stage(sim, mode_rows, lambda v, n=name, m=model: _with_feature(m, n, v), FEATURE_PARAMS,
                            evaluations // 2, report_progress, f"feature {name}")
            model = _with_feature(model, name, result.values)
            notes.append(f"feature {name} from {mode} rows: {_describe(result.values)} (objective "
                         f"{result.objective:.4f})")
    fit = RowsFit(mesh, None, model, notes=notes)
    for row in rows:
        simulated = sim.simulate(model, row)
        fit.rows.append((row, simulated.quantiles_s, dict(simulated.cpu_cores)))
    memory = _memory(rows, reference)
    if memory:
        model["proxy"]["memory"] = memory
    return fit


def _describe(values: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in values.items())


def _finish(model: dict[str, Any], rows: Sequence[SummaryRow], reference_mode: str, labels: tuple[str, str],
            sources: Mapping[str, str], notes: list[str]) -> None:
    """Sources, descriptions and the calibration block of the written model; each fitted number's source names the
    rows of its stage (their file, and the window each was read from when the row says)."""
    description, version = labels
    origin = _origin(rows)
    baselines = [r for r in rows if r.bypassed]
    stage = {"stage 1": f"fitted by meshsim fit --rows (stage 1: baseline rows of {_origin(baselines)})",
             "stage 2": "fitted by meshsim fit --rows (stage 2: reference rows of "
                        f"{_origin([r for r in rows if r.mode == reference_mode])})",
             "stage 3": "fitted by meshsim fit --rows (stage 3: the feature's rows of "
                        f"{_origin([r for r in rows if not r.bypassed and r.mode != reference_mode])})"}

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (stage.get(v, v) if k == "source" else resolve(v)) for k, v in node.items()}
        return node

    model.update(resolve(model))
    model["description"] = description or f"{model['name']} fitted by meshsim fit --rows from {len(rows)} rows"
    model["version"] = version
    model["sources"] = dict(sources) or {"rows": origin}
    model["proxy"]["source"] = (f"workers {model['proxy']['workers']}, connection_balance and the rows' fortio "
                                f"settings given to meshsim fit; idle_millicores: median istio-proxy CPU of the "
                                f"bypassed sidecars in the baseline rows of {_origin(baselines)}; the rest fitted (see "
                                f"each entry)")
    model["cluster"]["source"] = f"the calibration cluster's own baseline rows of {_origin(baselines)} (stage 1)"
    model["calibration"] = {
        "fitted_at": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "fitted_from": sorted(r.id for r in rows), "method": METHOD,
        "not_identified": "request vs response passes; inbound vs outbound pass latency (CPU is per side); the pass "
                          "distribution's shape beyond p50/p90/p99; per-KB cost (one payload); memory per connection "
                          "(one connection count); features every row had on (part of the passes)",
        "notes": "; ".join(notes)}


def fit_prometheus_window(source: Any, meaning: Any, rows_out: str | Path, rows: Sequence[str | Path], mesh: str,
                          out: str | Path | None, settings: RowSettings, progress: Progress | None = None,
                          **fit: Any) -> RowsFit:
    """``meshsim fit --prometheus``: read the window (a ``PrometheusSource``), append it as a summary row (what
    ``meshsim fit --rows`` reads; ``meaning``: a ``RowMeaning``) to ``rows_out``, then fit from ``rows`` and it.
    The row is written before the fit, so a fit that fails or is interrupted loses no measurement."""
    from meshsim.calibrate.measure.prometheus.prom_rows import append_rows, window_row

    report_progress = progress or (lambda _m: None)
    window = source.read()
    written = append_rows(rows_out, [window_row(window, meaning)])
    report_progress(f"{window.label}: {window.rps:.1f} rps, appended as a {meaning.mode} row to {written}")
    if window.unnamed:
        report_progress(f"{len(window.unnamed)} container series whose pod names no workload, not read (e.g. "
                        f"{window.unnamed[0]})")
    return fit_summary_rows([*rows, written], mesh, out, settings, progress, **fit)
