"""The start-up transient of a prediction's replications, found in their output and cut: MSER-5 (White 1997;
White, Cobb & Spratt 2000).

A replication starts empty (no request queued; every fortio connection sends its first call at one instant), so its
first answers are not those of the steady state a prediction reports, and a short run's percentiles carry them
(fortio, 64 connections at 1000 rps through two sidecars: p99 6.4 ms over 5 s, 3.8 ms over 60 s).

The series is each replication's latencies in the order they are filed (ReplicationResult.filed_at: send time, wrk2
answer time), averaged over the replications request by request (Welch's averaging: their noise cancels, their
common transient stays). MSER-5 batches it in fives and cuts the d batches that minimise the marginal standard error
of the remaining batch means, d within the first half. The same number of requests is cut from every replication,
since the percentiles pool them; one cut from the mean series rather than the largest of per-replication cuts,
because MSER on a single replication often settles on its noise: the fortio case above gives 65-475 requests per
replication for one 64-request burst (70 from the mean series), and the largest of those grows with the count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from meshsim.workload import Load, RunSettings
from meshsim.sim.engine.replication_result import ReplicationResult
from meshsim.sim.experiments.saturation_search import fell_behind, unstable

MSER_BATCH = 5
MIN_BATCHES = 4  # below 20 requests per replication there is no series to look for a transient in
MSER_WHY = "no --warmup given: the start-up transient is found in the replications' output and cut"


@dataclass(frozen=True)
class TransientCut:
    """What a prediction's latencies leave out at the start of every replication.

    ``requests`` are the first ones of every replication in filed order (cut after the run; None when they were
    never recorded: a warm-up given in seconds); ``seconds`` is how far into the load's run the kept requests begin,
    the mean over the replications for a cut counted in requests."""

    method: str  # "MSER-5", "fixed" (a warm-up in seconds) or "none"
    requests: int | None
    seconds: float
    why: str
    at_limit: bool = False  # MSER's minimum at the end of the first half: the transient may not be over

    @property
    def steady_state(self) -> bool:
        """Whether the estimates are of the steady state (the transient found and cut), not of a run of this
        length with its start."""
        return self.method == "MSER-5"

    def kept(self, result: ReplicationResult) -> np.ndarray:
        """The replication's latencies the estimates use."""
        return result.latencies[self.requests:] if self.requests else result.latencies

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "requests_cut_per_replication": self.requests,
                "seconds_cut_per_replication": round(self.seconds, 6),
                "chosen": "jointly: MSER-5 on the replications' mean latency series in send order (wrk2: answer "
                          "order), the same number of requests cut from each" if self.steady_state else None,
                "why": self.why, "at_limit": self.at_limit,
                "applies_to": "latencies; CPU, utilisation and rates are over the whole window",
                "percentiles": "steady state: of the replications' pooled latencies (sectioning interval)"
                               if self.steady_state else "of a run of this length: the replications' own, averaged"}

    def warning(self) -> str | None:
        if not self.at_limit:
            return None
        return (f"the start-up transient had not settled by half the run (MSER-5 cut at its limit, "
                f"{self.seconds:.3g} s of each replication): a longer --duration gives a steadier answer")


def start_kept(load: Load, settings: RunSettings) -> str | None:
    """Why the run keeps its start as asked (its warm-up in seconds, as before this module), or None: the start-up
    transient is found in the output and cut."""
    if settings.warmup_s is not None:
        return "a warm-up was given (warmup_s, --warmup): the run is measured from there"
    if load.profile is not None:
        return "a rate profile is the run: its start is part of what was asked for"
    if settings.timeseries_s:
        return ("a time series shows the run from its start (timeseries_s, --timeseries): the default warm-up "
                "(none for fortio, else 10 % of the run)")
    return None


def cut_for(load: Load, settings: RunSettings, warmup_s: float, results: list[ReplicationResult]) -> TransientCut:
    """The cut of a prediction's replications: its warm-up in seconds where the run keeps its start, else MSER-5's."""
    why = start_kept(load, settings)
    if why is not None:
        return fixed_cut(warmup_s, why)
    return choose_cut(results, unstable(results) or fell_behind(results))


def fixed_cut(seconds: float, why: str) -> TransientCut:
    """The run's own warm-up in seconds (given, or the rule of a run that keeps its start): its requests were never
    recorded."""
    return TransientCut("fixed" if seconds > 0 else "none", None if seconds > 0 else 0, seconds, why)


def mser_cut(series: np.ndarray, batch: int = MSER_BATCH) -> tuple[int, bool]:
    """Observations to cut from the start of ``series`` by MSER-``batch``, and whether the minimum lies at the end
    of the first half (the limit of the search). With batch means Z_1..Z_m, d minimises
    sum_{j>d} (Z_j - mean(Z_{d+1..m}))^2 / (m - d)^2 over d = 0 .. m // 2."""
    m = series.size // batch
    if m < MIN_BATCHES:
        return 0, False
    z = series[:m * batch].reshape(m, batch).mean(axis=1)
    z = z - z.mean()  # the statistic does not move with a shift; centred, its running sums lose less to rounding
    tail_sum = np.cumsum(z[::-1])[::-1]  # sums over j >= d, for every d
    tail_squares = np.cumsum((z * z)[::-1])[::-1]
    left = np.arange(m, 0, -1, dtype=float)  # m - d
    statistic = (tail_squares - tail_sum * tail_sum / left) / left**2
    limit = m // 2
    d = int(np.argmin(statistic[:limit + 1]))
    return d * batch, d == limit


def mean_series(results: Sequence[ReplicationResult]) -> np.ndarray:
    """The replications' latencies in filed order, averaged request by request over the shortest one's length."""
    n = min((r.latencies.size for r in results), default=0)
    total = np.zeros(n)
    for r in results:
        total += r.latencies[:n]
    return total / max(len(results), 1)


def choose_cut(results: Sequence[ReplicationResult], saturated: bool) -> TransientCut:
    """MSER-5's cut from the replications jointly; none for a saturated run, which has no steady state to reach
    (cutting would only keep its later, longer-queued part)."""
    if saturated:
        return TransientCut("none", 0, 0.0, "saturated: the run has no steady state to cut to; its percentiles are "
                                            "of the whole run")
    requests, at_limit = mser_cut(mean_series(results))
    if requests == 0:
        return TransientCut("MSER-5", 0, 0.0, MSER_WHY)
    seconds = float(np.mean([r.filed_at[requests] - r.load_start for r in results]))
    return TransientCut("MSER-5", requests, seconds, MSER_WHY, at_limit)
