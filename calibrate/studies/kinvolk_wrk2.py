"""The load of the three-mesh paper (seed 001): the Kinvolk service-mesh-benchmark's wrk2, and what it can carry.

What is taken from the benchmark's chart (kinvolk/service-mesh-benchmark, commit 020ac2b, ``configs/benchmark/
values.yaml`` and ``templates/wrk2.yaml``, as issue 28 reads them; the chart cannot be fetched here): wrk2 runs with
``-c 96 -d 100 -r RPS`` against the URLs of the app instances. The paper's '96 потоков' (96 streams, or threads) is
read as those 96 connections. What remains assumed is listed in :data:`ASSUMPTIONS` and said in the study's notes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

CHART = ("kinvolk/service-mesh-benchmark@020ac2b configs/benchmark/values.yaml and templates/wrk2.yaml, as issue 28 "
         "reads them: wrk2 -c 96 -d 100 -r RPS against the URLs of the app instances")
# giltene/wrk2 wrk.c as we read it (not verifiable here): each thread calibrates CALIBRATE_DELAY_MS + 5 ms per
# connection after it starts, then resets its latency histograms; what it prints is what came after
WRK2_CALIBRATION_S = 10.0
WRK2_CALIBRATION_PER_CONNECTION_S = 0.005
ASSUMPTIONS = (
    "threads: the chart as read passes no -t, so wrk2's default of 2 (48 connections each); threads only set how "
    "the connections' schedules are staggered, since the model books no CPU for wrk2",
    "connections: 96 in all, spread over the 10 instances' URLs (the issue's reading); a wrk2 fork that opened 96 "
    "per URL would hold 960 (the study's what-if)",
    "calibration: wrk2's first 10 s + 5 ms per connection of a thread (10.24 s) are not in the printed histogram "
    "(giltene/wrk2 wrk.c resets it after calibrating; the Kinvolk fork is taken to keep that), so a stage measures "
    "89.76 s: 4 488 requests at 50 rps",
)


@dataclass(frozen=True)
class Wrk2Run:
    """One stage of the benchmark: wrk2 with ``connections`` in ``threads`` for ``duration_s``."""

    connections: int = 96
    duration_s: float = 100.0
    threads: int = 2

    @property
    def calibration_s(self) -> float:
        """Seconds before a thread's histogram starts: wrk2's calibration delay for its share of connections."""
        return WRK2_CALIBRATION_S + WRK2_CALIBRATION_PER_CONNECTION_S * (self.connections // self.threads)

    @property
    def measured_s(self) -> float:
        return self.duration_s - self.calibration_s

    def requests(self, rps: float) -> int:
        """Requests in the printed histogram of a stage that keeps its schedule."""
        return round(rps * self.measured_s)

    def max_mean_latency_ms(self, rps: float) -> float:
        """Little's law: connections that each wait for their answer carry ``rps`` only below this mean latency."""
        return 1e3 * self.connections / rps


BENCHMARK = Wrk2Run()


def mean_floor_ms(percentiles: Mapping[str, float], requests: int) -> float:
    """The least mean a latency distribution with these p50/p90/p99/p100 (ms) can have over ``requests``: every
    request at the lowest value its band between two printed percentiles allows (nothing below the median)."""
    top = 1.0 / requests
    return (0.4 * percentiles["p50"] + 0.09 * percentiles["p90"] + (0.01 - top) * percentiles["p99"]
            + top * percentiles["p100"])
