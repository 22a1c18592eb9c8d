"""A pass holds its proxy worker for its CPU, at most a ceiling h with E[min(W, h)] = cpu_fraction x E[W]
(meshsim/hold_ceiling.py): the known answers, the exact timeline of a pass on the SimPy engine, and the same timeline
on the compiled one."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from meshsim.catalog import load_mesh, load_topology
from meshsim.distribution_spec import total
from meshsim.distributions import Deterministic, Empirical, Mixture
from meshsim.hold_ceiling import CEILING_DRAWS, hold_ceiling, mixed_fraction
from meshsim.scenario import build_scenario
from meshsim.sim.engine.components import build_proxy
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.engine.streams import Streams
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.workload import FortioLoad, Workload

MS = 1e-3
TWO_POINT = Empirical((1 * MS, 9 * MS))  # half the passes 1 ms, half 9 ms: mean 5 ms


def test_a_whole_pass_holds_when_all_of_it_is_cpu() -> None:
    assert hold_ceiling((TWO_POINT,), 1.0) == math.inf


def test_a_constant_pass_holds_its_fraction_exactly() -> None:
    assert hold_ceiling((Deterministic(2 * MS),), 0.3) == pytest.approx(0.6 * MS, rel=1e-12)


def test_the_ceiling_keeps_the_measured_cpu_per_pass() -> None:
    """Two-point passes, half CPU on average: (1 + h) / 2 = 2.5 ms gives h = 4 ms. The share p of 1 ms draws is
    binomial (sd 0.5 / sqrt(n)); h = (2.5 - p) / (1 - p) moves 6 ms per unit of p, so 5 sd is 6 x 5 x 0.5 / sqrt(n)."""
    h = hold_ceiling((TWO_POINT,), 0.5)
    assert h == pytest.approx(4 * MS, abs=6 * 5 * 0.5 / math.sqrt(CEILING_DRAWS) * MS)
    # a side's kinds are pooled with equal weight: a constant 1 ms request and a constant 9 ms response
    pooled = hold_ceiling((Deterministic(1 * MS), Deterministic(9 * MS)), 0.5)
    assert pooled == pytest.approx(4 * MS, rel=1e-9)


def test_a_far_tail_holds_no_longer_than_the_body() -> None:
    """One pass in a thousand stalls 100 ms (scheduling, not code) and the CPU per pass is 0.14 ms: every pass,
    the stalled ones too, holds its worker 0.14 ms, where a share of each pass would have held 47 ms of a stall."""
    stall = Mixture((0.999, 0.001), (Deterministic(0.2 * MS), Deterministic(100 * MS)))
    fraction = 0.14 * MS / stall.mean
    assert fraction * 100 * MS > 40 * MS  # what a share of the stall would hold
    assert hold_ceiling((stall,), fraction) == pytest.approx(0.14 * MS, rel=1e-9)


def _single_sidecar(fraction: float):
    """The `single` topology with one server-side sidecar of one worker whose passes are TWO_POINT."""
    istio = load_mesh("istio")
    assert istio.proxy is not None
    proxy = replace(istio.proxy, passes={k: TWO_POINT for k in istio.proxy.passes}, cpu_fraction=fraction,
                    workers=1, wakeup=None, sides={}, post_response=None, per_kb=0.0, cpu_limit=None)
    mesh = replace(istio, proxy=proxy, features={}, cluster=None)
    return build_scenario(load_topology("single"), mesh, scope="server")


def test_a_pass_holds_its_worker_up_to_the_ceiling_and_leaves_after_all_of_it() -> None:
    """The exact timeline of single passes through an idle worker: it is busy min(W, h), the pass leaves after W."""
    scenario = _single_sidecar(0.5)
    proxy_model = scenario.mesh.proxy
    assert proxy_model is not None
    kinds = tuple(proxy_model.passes)
    proxy = build_proxy("server/sidecar", "server/sidecar#0", proxy_model, [], "node", Streams(5, 0), kinds, {})
    h = proxy.hold_ceilings["inbound"]
    seen = set()
    for i in range(40):
        now = i * 0.1
        left = proxy.pass_(now, "inbound_request", conn=0, nbytes=0)
        work = left - now
        seen.add(round(work / MS))
        assert proxy.station.free_at[0] - now == pytest.approx(min(work, h), abs=1e-12)
    assert seen == {1, 9}


def _same_on_both_engines(scenario, rps: float, min_requests: int):
    """Four fortio connections on the one worker for 2 s: the same latencies and sidecar CPU on both engines (the
    SimPy engine's sidecar usage is returned)."""
    workload, horizon = Workload(FortioLoad(rps, 4)), Horizon(2.0, 0.0, 1.0)
    fast = run_fast_replication(scenario, workload, horizon, 3, 0)
    simpy = run_replication(scenario, workload, horizon, 3, 0)
    assert fast.latencies.size == simpy.latencies.size > min_requests
    np.testing.assert_allclose(fast.latencies, simpy.latencies, rtol=0, atol=1e-9)
    usage = simpy.usage["server/sidecar"]
    assert fast.usage["server/sidecar"].cpu_seconds == pytest.approx(usage.cpu_seconds, rel=1e-9)
    return usage


def test_both_engines_hold_a_worker_for_the_same_time() -> None:
    """Four fortio connections queue on the one worker, so every latency depends on how long each pass held it:
    the same latencies on both engines, and a busy time per pass that averages the measured CPU."""
    usage = _same_on_both_engines(_single_sidecar(0.5), 150.0, min_requests=200)
    # half the passes hold 1 ms, half 4 ms: 2.5 ms on average (binomial spread of the draws, 5 sd)
    per_pass = usage.cpu_seconds / usage.jobs
    assert per_pass == pytest.approx(2.5 * MS, abs=5 * 1.5 * MS / math.sqrt(usage.jobs))


# -- a feature holding its own share of its time --------------------------------------------------------------------

FEATURE_MS = Deterministic(2 * MS)  # a filter adding 2 ms to every pass, all of it held (the side holds half)


def _with_feature(side_fraction: float, feature_sides: dict[str, float]):
    """``_single_sidecar`` with a default-on feature adding FEATURE_MS to every pass, holding its own share."""
    from meshsim.mesh import Feature

    scenario = _single_sidecar(side_fraction)
    feature = Feature("filter", default=True, per_pass={k: FEATURE_MS for k in scenario.mesh.proxy.passes},
                      sides=feature_sides)
    mesh = replace(scenario.mesh, features={"filter": feature})
    return build_scenario(load_topology("single"), mesh, scope="server")


def test_one_fraction_mixes_to_itself_and_several_by_their_means() -> None:
    assert mixed_fraction([(TWO_POINT, 0.37), (FEATURE_MS, 0.37)]) == 0.37  # unchanged, not recomputed
    assert mixed_fraction([(TWO_POINT, 0.5), (FEATURE_MS, 1.0)]) == pytest.approx((0.5 * 5 + 1.0 * 2) / 7)


def test_a_features_own_fraction_sets_the_sides_ceiling_by_the_mixed_mean() -> None:
    """A 1-or-9 ms pass holding half of itself plus a 2 ms filter holding all of itself: the pass of 3 or 11 ms holds
    its worker 4.5 ms on average (2.5 + 2), where the side's own fraction alone would hold 3.5 ms."""
    for sides, held_ms in (({"inbound": 1.0}, 4.5), ({}, 3.5)):
        scenario = _with_feature(0.5, sides)
        kinds = tuple(scenario.mesh.proxy.passes)
        proxy = build_proxy("server/sidecar", "server/sidecar#0", scenario.mesh.proxy,
                            [scenario.mesh.features[n] for n in scenario.features],
                            "node", Streams(5, 0), kinds, {})
        h = proxy.hold_ceilings["inbound"]
        assert np.mean(np.minimum([3 * MS, 11 * MS], h)) == pytest.approx(held_ms * MS, rel=0.02), sides
        if not sides:  # without a feature fraction: the side's own fraction of the whole pass, unchanged
            whole = tuple(total([TWO_POINT, FEATURE_MS]) for k in kinds if k.startswith("inbound"))
            assert h == hold_ceiling(whole, 0.5)


def test_both_engines_hold_a_worker_for_the_same_time_with_a_features_own_fraction() -> None:
    usage = _same_on_both_engines(_with_feature(0.5, {"inbound": 1.0}), 100.0, min_requests=150)
    per_pass = usage.cpu_seconds / usage.jobs  # 4.5 ms held on average, by the binomial spread of 3/11 ms draws
    assert per_pass == pytest.approx(4.5 * MS, abs=5 * 2.0 * MS / math.sqrt(usage.jobs))
