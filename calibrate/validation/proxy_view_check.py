"""A lab run's proxies' own histograms (``proxy-histograms.json``, calibrate/measure/lab/proxy_histograms.py)
against the model's prediction of the same spans (``proxy_latency_ms``, sim/engine/proxy_views.py): where the model
puts a request's time, inside each proxy or outside it, which the caller's latency alone cannot show."""

from __future__ import annotations

from typing import Any, Mapping

from meshsim.calibrate.measure.dataset import Run
from meshsim.calibrate.measure.lab import proxy_histograms
from meshsim.calibrate.measure.prometheus.prom_histogram import bucket_quantile, whole_units
from meshsim.calibrate.validation.compare_metric import Metric
from meshsim.calibrate.validation.run_extras import stored_json

VIEW_KEYS = {"p50": 0.50, "p90": 0.90, "p99": 0.99}


def measured_views(run: Run) -> dict[str, list]:
    """The run's proxy histograms by view ({} when the run has none: an older run, or no Envoy in the lab)."""
    return stored_json(run, proxy_histograms.FILE_KEY, "a proxy histogram file", proxy_histograms.from_json) or {}


def view_metrics(run: Run, pred: Mapping[str, Any]) -> tuple[dict[str, dict[str, Metric]], list[str]]:
    """Per view the run measured and the prediction has: p50/p90/p99 measured (in its 1 ms interval) and
    predicted; and a note per view (its p50 and p99)."""
    predicted, intervals = pred.get("proxy_latency_ms") or {}, pred.get("proxy_latency_ci95_ms") or {}
    out: dict[str, dict[str, Metric]] = {}
    notes = []
    for view, buckets in measured_views(run).items():
        if view not in predicted or not buckets or buckets[-1].count <= 0:
            continue
        metrics = {}
        for key, q in VIEW_KEYS.items():
            found = whole_units(bucket_quantile(q, buckets))  # Envoy records whole milliseconds, truncated
            ci = intervals.get(view, {}).get(key)
            value = predicted[view].get(key)
            metrics[key] = Metric(found.value, float("nan") if value is None else float(value),
                                  tuple(ci) if ci and None not in ci else None, (found.lower, found.upper))
        out[view] = metrics
        notes.append(f"{view} (the proxy's own histogram, {buckets[-1].count:.0f} requests): " + ", ".join(
            f"{key} {m.measured:.3g} ms in [{m.resolution[0]:g}, {m.resolution[1]:g}) measured, {m.predicted:.3g} "
            f"predicted ({_judged(m)})" for key, m in metrics.items() if key != "p90"))
    return out, notes


def _judged(m: Metric) -> str:
    """A prediction inside the measured interval is as right as the histogram can tell; else its error against
    the interval's middle."""
    low, high = m.resolution or (float("nan"), float("nan"))
    return "inside it" if low <= m.predicted < high else f"{m.rel_error * 100:+.0f} %"
