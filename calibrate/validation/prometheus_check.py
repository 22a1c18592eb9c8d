"""``meshsim validate --prometheus URL --window 10m``: the prediction for the rate Prometheus saw, compared with
the latency, rate, CPU and memory it saw, reported as ``meshsim validate`` reports fortio runs.

The window (``prom_window``) gives the request rate, the latency histogram's increase and each container's CPU and
mean working set. The model is simulated on the given topology at that rate: an open (Poisson) load, or fortio's
closed load when ``connections`` says how many connections the traffic came on. Each measured percentile carries
its bucket, shown beside its error: a percentile from buckets (1, 5] ms is known to that bucket and no better.

Every shipped metric set's histogram is kept by the calling side's proxy (Istio's reporter="source", Linkerd's
outbound direction, the source workload's Envoy), and times the span that proxy sees: from its worker taking a
request to the response leaving it. So the histogram is compared with the prediction of that same proxy's view
(``proxy_latency_ms``, sim/engine/proxy_views.py), found from ``--source`` and ``--destination`` or named by
``--proxy-view``; the caller's latency would be longer by the caller's side of the path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from meshsim.calibrate.measure.prometheus.prom_components import model_workload
from meshsim.calibrate.measure.prometheus.prom_histogram import bucket_cdf, whole_units
from meshsim.calibrate.measure.prometheus.prom_source import PrometheusSource
from meshsim.calibrate.measure.prometheus.prom_window import PERCENTILES, WindowMeasure
from meshsim.calibrate.validation.compare_metric import Metric
from meshsim.calibrate.validation.compare import RunComparison, Validation, predicted_cdf, \
    predicted_latency, predicted_rate, read_validated_model, simulator_notes
from meshsim.calibrate.validation.replay import on_one_host
from meshsim.calibrate.validation.validate import Outcome, render
from meshsim.catalog import load_topology
from meshsim.calibrate.validation.validate_options import ReportOptions
from meshsim.errors import FieldError, MeshsimError
from meshsim.outputs import check_file
from meshsim.progress import Progress
from meshsim.request import PredictOptions
from meshsim.sim.engine.proxy_views import outbound
from meshsim.sim.experiments.proxy_latency import view_name


@dataclass(frozen=True)
class PrometheusPrediction:
    """How the window's traffic is simulated."""

    model: str | Path
    topology: str | Path
    connections: int | None = None  # None: an open load; N: fortio's closed load on N connections
    scope: str = "both"
    features: tuple[str, ...] = ()  # NAME turns a feature on, no-NAME turns a default off (as predict's)
    payload_bytes: int | None = None  # the responses' size, when known (Prometheus does not say); None: the topology's
    replications: int = 4
    sim_duration_s: float = 20.0
    seed: int = 1
    one_host_cores: float | None = None  # every process on one machine of this many cores (the lab), as replays do
    proxy_view: str | None = None  # the predicted view the histogram is compared with; None: from source/destination

    def __post_init__(self) -> None:
        if self.one_host_cores is not None and not 0 < self.one_host_cores < math.inf:
            raise FieldError("one_host_cores", f"must be > 0 cores, got {self.one_host_cores}")
        if self.connections is not None and self.connections < 1:
            raise FieldError("connections", f"must be >= 1, got {self.connections}")
        if self.replications < 2:
            raise FieldError("replications", f"need >= 2 for a confidence interval, got {self.replications}")

    def options(self, model: Path, rps: float, window_s: float) -> PredictOptions:
        load = {"load": "fortio", "connections": self.connections} if self.connections else {"load": "open"}
        topology = load_topology(self.topology)
        if self.one_host_cores is not None:
            topology = on_one_host(topology, self.one_host_cores)
        return PredictOptions(topology=topology, mesh=model, rps=rps, scope=self.scope, features=tuple(self.features),
                              payload_bytes=self.payload_bytes,
                              duration_s=min(window_s, self.sim_duration_s), replications=self.replications,
                              precision=None, seed=self.seed, **load)  # type: ignore[arg-type]


def _renamed(measured: Mapping[str, float], predicted: Mapping[str, Any]) -> dict[str, float]:
    """Measured components (``WORKLOAD/part``) under the model's workload names, the values of a renamed one added."""
    workloads = {name.split("/", 1)[0] for name in predicted}
    out: dict[str, float] = {}
    for name, value in measured.items():
        workload, _, part = name.partition("/")
        key = f"{model_workload(workload, workloads)}/{part}" if part else name
        out[key] = out.get(key, 0.0) + value
    return out


def _resources(window: WindowMeasure, pred: Mapping[str, Any]) -> tuple[dict[str, Metric], list[str]]:
    """CPU of the containers the prediction knows (cores), and notes: memory beside the prediction's, and how many
    measured containers the model has no counterpart for."""
    predicted_cpu = pred.get("cpu_cores") or {}
    measured_cpu = _renamed(window.cpu_cores, predicted_cpu)
    cpu = {k: Metric(v, float(predicted_cpu[k])) for k, v in sorted(measured_cpu.items()) if k in predicted_cpu}
    notes = []
    predicted_memory = pred.get("memory_mb") or {}
    for name, mb in sorted(_renamed(window.memory_mb, predicted_memory).items()):
        if name in predicted_memory:
            notes.append(f"memory {name}: mean working set {mb:.1f} MB measured, {predicted_memory[name]:.1f} MB "
                         "predicted")
    unmatched = sorted(set(measured_cpu) - set(cpu))
    if unmatched:
        notes.append(f"{len(unmatched)} measured container(s) not in the model's components, not compared "
                     f"(e.g. {unmatched[0]})")
    if window.unnamed:
        notes.append(f"{len(window.unnamed)} container series whose pod names no workload (no naming rule of the "
                     f"{window.metrics.family} set reads it), not compared (e.g. {window.unnamed[0]})")
    return cpu, notes


def reporting_view(pred: Mapping[str, Any], source: str | None, destination: str | None,
                   chosen: str | None) -> str | None:
    """The predicted proxy view a window's histogram is compared with: ``chosen`` (``--proxy-view``), else the
    outbound view of the source's proxy (``client`` is the load generator's) to the destination, or its only
    outbound view; None when neither names one."""
    views = pred.get("proxy_latency_ms") or {}
    if chosen is not None:
        if chosen not in views:
            raise MeshsimError(f"--proxy-view {chosen!r}: the prediction has no such view (it has: "
                               f"{', '.join(views) or 'none: no proxy on the path'})")
        return chosen
    if source is None:
        return None
    workloads = {view.split("/", 1)[0] for view in views} | {view.split(" to ", 1)[-1] for view in views}
    component = f"{model_workload(source, workloads)}/sidecar"
    target = model_workload(destination, workloads) if destination is not None else None
    if target is not None and view_name(component, outbound(target)) in views:
        return view_name(component, outbound(target))
    sent = [view for view in views if view.startswith(view_name(component, outbound("")))]
    return sent[0] if len(sent) == 1 else None


def _view_prediction(pred: Mapping[str, Any], view: str) -> dict[str, Any]:
    """The prediction with the proxy view's percentiles in place of the caller's (a view keeps no maximum)."""
    values, intervals = pred["proxy_latency_ms"][view], pred["proxy_latency_ci95_ms"][view]
    q = dict(PERCENTILES)
    return {**pred, "latency_ms": {**values, "max": None}, "latency_ci95_ms": {**intervals, "max": None},
            "latency_cdf_ms": {"q": [q[k] for k in values if k in q], "ms": [values[k] for k in values if k in q]}}


def window_comparison(window: WindowMeasure, pred: Mapping[str, Any], setup: str, connections: int,
                      view: str | None = None) -> RunComparison:
    """The window as one compared run: percentiles from buckets (with their bounds) against ``view``'s (the
    caller's latency when None), rate, CPU, memory."""
    quantiles = {key: window.quantile(key) for key in PERCENTILES}
    if window.metrics.whole_units:  # Envoy's whole milliseconds: each percentile known to [k, k + 1) ms
        quantiles = {key: whole_units(q) for key, q in quantiles.items()}
    measured = {key: q.value for key, q in quantiles.items()} | {"max": math.nan}  # a histogram keeps no maximum
    compared = _view_prediction(pred, view) if view is not None else pred
    latency = predicted_latency(compared, measured, {key: (q.lower, q.upper) for key, q in quantiles.items()})
    cpu, notes = _resources(window, pred)
    span = (f"latency is the reporting proxy's own view (from its code reading a request to the response leaving "
            f"it), compared with the predicted view '{view}'" if view is not None else
            "latency is the reporting proxy's view, but no predicted proxy view matched --source/--destination "
            "(name one with --proxy-view): compared with the caller's predicted latency, which is longer by the "
            "caller's side of the path")
    notes = [f"{window.requests:.0f} requests in the window; percentiles interpolated in the histogram's buckets as "
             "histogram_quantile does, each known only to its bucket; a histogram keeps no maximum",
             span, *notes, *simulator_notes(pred)]
    saturation = pred.get("saturation_rps")
    status = "saturated" if pred.get("saturated") else "ok"
    return RunComparison(window.label, window.url, "held-out", status, setup, round(window.rps, 3), connections, latency,
                         predicted_rate(pred, window.rps), cpu, saturation, pred.get("bottleneck", ""),
                         bucket_cdf(window.buckets_ms), predicted_cdf(compared), tuple(notes),
                         dict(pred.get("time_breakdown_ms") or {}))


def validate_prometheus(source: PrometheusSource, prediction: PrometheusPrediction,
                        report: ReportOptions = ReportOptions(), progress: Progress | None = None) -> Outcome:
    """Read the window, predict at its rate, compare, and render as ``meshsim validate`` does."""
    from meshsim.sim.experiments.predict import predict_options

    report_progress = progress or (lambda _m: None)
    if report.html is not None:
        check_file(report.html, "html")
    model_path, _data, name = read_validated_model(prediction.model)
    report_progress(f"reading {source.window} of {source.metrics} metrics from {source.url} ...")
    window = source.read()
    report_progress(f"    {window.rps:.1f} rps, {window.requests:.0f} requests; simulating {name} at that rate ...")
    pred = predict_options(prediction.options(model_path, window.rps, window.window_s)).to_dict()
    load = f"fortio c{prediction.connections}" if prediction.connections else "open load"
    features = f" +{'+'.join(prediction.features)}" if prediction.features else ""
    setup = f"{prediction.topology} scope {prediction.scope}{features}, {load} at the measured rate" + (
        f", on one host of {prediction.one_host_cores:g} cores" if prediction.one_host_cores else "")
    view = reporting_view(pred, source.source, source.destination, prediction.proxy_view)
    v = Validation(str(model_path), name, [window_comparison(window, pred, setup, prediction.connections or 0, view)],
                   settings={"replications": prediction.replications, "sim_duration_s": prediction.sim_duration_s,
                             "seed": prediction.seed, "topology": str(prediction.topology),
                             "prometheus": {"url": window.url, "metrics": window.metrics.family,
                                            "traffic": window.traffic, "window_s": window.window_s,
                                            "end": window.end, "proxy_view": view}})
    return render(v, report)
