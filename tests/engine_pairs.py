"""Both engines on the same request and seeds, and where their summaries disagree beyond their confidence intervals.

The engines draw the same named random streams (common random numbers), so their replications pair up; agreement
is judged as the issue asks, within the two engines' 95 % intervals, with no golden numbers."""

from __future__ import annotations

from typing import Callable

from meshsim.request import PredictRequest
from meshsim.sim.engine.replication_result import ReplicationResult
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.sim.experiments.predict import horizon_for
from meshsim.sim.experiments.stats import latency_summary, t_interval

SUMMARY_KEYS = ("p50", "p90", "p99", "utilisation", "achieved_rps")

Runner = Callable[..., ReplicationResult]


def replication_summary(result: ReplicationResult, cpu: bool = False) -> dict[str, float]:
    """A replication's percentiles, the hottest component's utilisation and the achieved rps (with ``cpu``, the
    cores of every component too, under ``cpu:NAME``)."""
    summary = latency_summary(result.latencies)
    summary["utilisation"] = max(u.hottest for u in result.usage.values())
    summary["achieved_rps"] = result.achieved_rps
    if cpu:
        summary.update({f"cpu:{name}": u.cpu_seconds / result.busy_window for name, u in result.usage.items()})
    return summary


def replications(run: Runner, request: PredictRequest, seed: int, count: int) -> list[ReplicationResult]:
    horizon = horizon_for(request.workload.load, request.settings)
    return [run(request.scenario, request.workload, horizon, seed, r) for r in range(count)]


def disagreement(fast: list[float], simpy: list[float], what: str) -> str | None:
    """None when the two engines' means are within the sum of their 95 % half-widths, else what differs."""
    a, b = t_interval(fast), t_interval(simpy)
    # both half-widths plus a float-rounding floor (identical runs have zero spread in a deterministic metric)
    if abs(a.value - b.value) <= a.half_width + b.half_width + 1e-9 * max(abs(b.value), 1.0):
        return None
    return f"{what}: fast {a.value:.6g} +- {a.half_width:.3g}, simpy {b.value:.6g} +- {b.half_width:.3g}"


def engine_disagreements(request: PredictRequest, seed: int, count: int, cpu: bool = False) -> list[str]:
    """Every summary on which the compiled engine and the SimPy engine disagree for ``request`` over ``count``
    replications."""
    fast = [replication_summary(r, cpu) for r in replications(run_fast_replication, request, seed, count)]
    simpy = [replication_summary(r, cpu) for r in replications(run_replication, request, seed, count)]
    keys = list(SUMMARY_KEYS)
    if cpu:
        keys += sorted({k for s in fast + simpy for k in s if k.startswith("cpu:")})
        missing = [k for k in keys if any(k not in s for s in fast + simpy)]
        if missing:
            return [f"{k}: reported by one engine only" for k in missing]
    return [p for key in keys if (p := disagreement([s[key] for s in fast], [s[key] for s in simpy], key)) is not None]
