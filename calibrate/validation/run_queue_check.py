"""A lab run's processes' run-queue delay (``run-queue.json``, calibrate/measure/lab/run_queue.py) beside the
model's time waiting for the node's cores (``cpu_wait_ms_per_request``: each component's jobs on a request's path,
Station.cpu_waited): whether the model's core sharing holds the wait the kernel measured, process by process.

The two count differently at the edges: the kernel counts every thread's wait, work off a request's path too
(span export, stats flushes, a sidecar's work after the response), and the model only its jobs on a request's
path; the kernel's network work (softirq) waits in neither."""

from __future__ import annotations

from typing import Any, Mapping

from meshsim.calibrate.measure.dataset import Run
from meshsim.calibrate.measure.lab import run_queue
from meshsim.calibrate.validation.compare_metric import Metric
from meshsim.calibrate.validation.run_extras import stored_json


def measured_waits(run: Run) -> dict[str, Any]:
    """The run's run-queue file ({} when the run has none: an older run, or a kernel without schedstat)."""
    return stored_json(run, run_queue.FILE_KEY, "a run-queue file",
                       lambda data: {"slice_ms": data.get("kernel_slice_ms"), "components": dict(data["components"])}) or {}


def run_queue_metrics(run: Run, pred: Mapping[str, Any]) -> tuple[dict[str, Metric], list[str]]:
    """Per component the run measured and the prediction has: run-queue ms per request, measured and predicted;
    and one note with them all and the measured wait per timeslice."""
    measured = measured_waits(run)
    predicted = pred.get("cpu_wait_ms_per_request") or {}
    out: dict[str, Metric] = {}
    parts = []
    for component, found in sorted((measured.get("components") or {}).items()):
        if component not in predicted:
            continue
        m = Metric(float(found["wait_ms_per_request"]), float(predicted[component]))
        out[component] = m
        parts.append(f"{component} {m.measured:.3g} vs {m.predicted:.3g} "
                     f"({float(found['wait_ms_per_timeslice']):.3g} ms per timeslice)")
    notes = [f"run-queue wait ms per request, measured (kernel schedstat) vs predicted (model's core waits), kernel "
             f"slice {measured.get('slice_ms')} ms: " + "; ".join(parts)] if parts else []
    return out, notes
