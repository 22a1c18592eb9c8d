"""Each proxy's own view of a request's latency (sim/engine/proxy_views.py): from its worker taking the request to
the response leaving it, the span Envoy's downstream_rq_time and Istio's and Linkerd's request-duration histograms
time. Exact timelines on deterministic passes on both engines, the binning the two engines share, and the two
engines' agreement on a random scenario."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from meshsim.distributions import Deterministic
from meshsim.mesh import MeshModel, ProxyModel
from meshsim.request import PredictOptions, build_request
from meshsim.scenario import Scenario
from meshsim.sim.engine import proxy_views
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast import fast_kernels as K
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.sim.experiments.proxy_latency import proxy_latency
from meshsim.wakeup import WakeUp
from meshsim.workload import FortioLoad, Workload
from engine_pairs import disagreement, replications
from simkit import station_topology

MS = 1e-3
ENGINES = {"simpy": run_replication, "fast": run_fast_replication}
WAKE = 0.05 * MS
WAKE_CPU = 0.02 * MS


def _mesh(wake: float | None) -> MeshModel:
    """Inbound passes of 0.4 ms, outbound of 0.1 ms, one worker; with ``wake``, a worker idle for more than a few
    nanoseconds wakes cold: the request waits ``wake`` (no CPU), then the worker burns WAKE_CPU being switched in."""
    passes = {"inbound_request": Deterministic(0.4 * MS), "inbound_response": Deterministic(0.4 * MS),
              "outbound_request": Deterministic(0.1 * MS), "outbound_response": Deterministic(0.1 * MS)}
    wakeup = WakeUp(delay=wake, tau=1e-9, cpu=WAKE_CPU) if wake is not None else None
    return MeshModel("views", ProxyModel("test", passes, workers=1, wakeup=wakeup), {}, None)


def _one_at_a_time(engine: str, wake: float | None):
    scenario = Scenario(station_topology(Deterministic(1.0 * MS)), _mesh(wake), scope="both")
    return ENGINES[engine](scenario, Workload(FortioLoad(50, connections=1)), Horizon(2.0, 0.2), 1, 0)


def _mean_view(result, component: str, view: str) -> float:
    return proxy_views.mean(result.usage[component].views[view])


@pytest.mark.parametrize("engine", ENGINES)
def test_each_proxy_times_the_passes_and_what_lies_between_them(engine: str) -> None:
    """One request at a time through both sidecars to a 1 ms app: the caller's sidecar sees its two passes of
    0.1 ms, the server's two of 0.4 ms and the app (2.0 ms, the whole latency: no network); the server's sees its
    passes and the app (1.8 ms). Each view holds every request, all in the bin of its one value."""
    result = _one_at_a_time(engine, None)
    assert result.latencies.max() == pytest.approx(2.0 * MS, rel=1e-9)
    client = result.usage["client/sidecar"].views[proxy_views.outbound("q")]
    server = result.usage["q/sidecar"].views[proxy_views.INBOUND]
    assert set(result.usage["client/sidecar"].views) == {"to q"}
    assert set(result.usage["q/sidecar"].views) == {"inbound"}
    assert proxy_views.mean(client) == pytest.approx(2.0 * MS, rel=1e-9)
    assert proxy_views.mean(server) == pytest.approx(1.8 * MS, rel=1e-9)
    for histogram, value in ((client, 2.0 * MS), (server, 1.8 * MS)):
        assert proxy_views.requests(histogram) == pytest.approx(result.latencies.size, abs=2)
        low, high = proxy_views.bin_edges(proxy_views.view_bin(value))
        assert low < proxy_views.quantile(histogram, 0.5) <= high


@pytest.mark.parametrize("engine", ENGINES)
def test_a_proxys_clock_starts_after_its_worker_woke(engine: str) -> None:
    """Every pass finds its worker idle: it waits WAKE, then its worker is switched in (WAKE_CPU) before the pass's
    own code runs. The caller sees the four wake-ups; the caller's sidecar all but its own first one (its clock
    starts when its code reads the request); the server's sidecar only the one of its response pass."""
    result = _one_at_a_time(engine, WAKE)
    woke = WAKE + WAKE_CPU
    assert result.latencies.max() == pytest.approx(2.0 * MS + 4 * woke, rel=1e-9)
    assert _mean_view(result, "client/sidecar", "to q") == pytest.approx(2.0 * MS + 3 * woke, rel=1e-9)
    assert _mean_view(result, "q/sidecar", "inbound") == pytest.approx(1.8 * MS + woke, rel=1e-9)


def test_the_compiled_engine_bins_as_the_reference_does() -> None:
    """The kernels keep their own copy of the binning (they import nothing): same constants, same bins, edges
    included."""
    assert (K.VIEW_BINS_PER_DECADE, K.VIEW_FLOOR_S, K.VIEW_BINS, K.VIEW_WIDTH) == (
        proxy_views.VIEW_BINS_PER_DECADE, proxy_views.VIEW_FLOOR_S, proxy_views.VIEW_BINS, proxy_views.VIEW_WIDTH)
    edges = [proxy_views.bin_edges(i)[0] for i in range(0, proxy_views.VIEW_BINS, 7)]
    for x in [0.0, -1.0, 1e-9, 1e-6, 2e-6, 1e-3, 0.0123, 999.0, 1e4, *edges, *(np.nextafter(e, 0) for e in edges)]:
        assert K.view_bin(x) == proxy_views.view_bin(x), x


@given(st.lists(st.floats(min_value=2e-6, max_value=500.0), min_size=1, max_size=300),
       st.sampled_from([0.5, 0.9, 0.99]))
def test_a_views_quantile_lies_in_the_bin_of_the_exact_one(latencies: list[float], q: float) -> None:
    """The binned quantile is within one bin (4.7 %) of the exact order statistic at the same rank."""
    histogram = proxy_views.new_histogram()
    for x in latencies:
        proxy_views.record(histogram, x)
    exact = float(np.sort(latencies)[max(math.ceil(q * len(latencies)) - 1, 0)])
    ratio = 10 ** (1 / proxy_views.VIEW_BINS_PER_DECADE)
    assert exact / ratio <= proxy_views.quantile(histogram, q) <= exact * ratio
    assert proxy_views.mean(histogram) == pytest.approx(float(np.mean(latencies)), rel=1e-9)


def test_both_engines_predict_the_same_views() -> None:
    """chain3 on Istio at 2000 rps (queueing, wake-ups, random passes): each view's p50 and p99 agree between the
    engines within their 95 % intervals over paired replications."""
    request = build_request(PredictOptions(topology="chain3", mesh="istio", rps=2000.0, duration_s=1.0))
    fast = replications(run_fast_replication, request, 5, 6)
    simpy = replications(run_replication, request, 5, 6)
    assert set(proxy_latency(fast)) == set(proxy_latency(simpy)) == {
        "client/sidecar to s1", "s1/sidecar inbound", "s1/sidecar to s2", "s2/sidecar inbound",
        "s2/sidecar to s3", "s3/sidecar inbound"}
    problems = []
    for view in proxy_latency(fast):
        for key, q in (("p50", 0.5), ("p99", 0.99)):
            values = [[proxy_views.quantile(r.usage[view.split(" ")[0]].views[view.split(" ", 1)[1]], q)
                       for r in runs] for runs in (fast, simpy)]
            problem = disagreement(values[0], values[1], f"{view} {key}")
            if problem:
                problems.append(problem)
    assert not problems
