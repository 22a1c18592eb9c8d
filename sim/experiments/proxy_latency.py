"""Each proxy's own view of the latency over a prediction's replications: what its request-duration histogram
(Envoy's downstream_rq_time, Istio's istio_request_duration_milliseconds, Linkerd's response_latency_ms) would
show, per component and view (sim/engine/proxy_views.py)."""

from __future__ import annotations

from meshsim.sim.engine import proxy_views
from meshsim.sim.engine.replication_result import ReplicationResult
from meshsim.sim.experiments.stats import Estimate, t_interval

VIEW_QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99, "p999": 0.999}


def view_name(component: str, view: str) -> str:
    """How a prediction names a view: ``client/sidecar to productpage``, ``reviews/sidecar inbound``."""
    return f"{component} {view}"


def proxy_latency(results: list[ReplicationResult]) -> dict[str, dict[str, Estimate]]:
    """Per component and view: p50/p90/p99/p99.9 and the mean (seconds), each the mean over the replications of that
    replication's value, with its Student-t interval; views with no request in some replication use the others."""
    per_view: dict[str, list[dict[str, float]]] = {}
    for result in results:
        for component, usage in result.usage.items():
            for view, histogram in usage.views.items():
                values = {key: proxy_views.quantile(histogram, q) for key, q in VIEW_QUANTILES.items()}
                values["mean"] = proxy_views.mean(histogram)
                per_view.setdefault(view_name(component, view), []).append(values)
    return {name: {key: t_interval([r[key] for r in rows]).at_least(0.0) for key in (*VIEW_QUANTILES, "mean")}
            for name, rows in sorted(per_view.items())}

