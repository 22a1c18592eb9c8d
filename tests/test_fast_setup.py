"""The compiled engine's setup is built once and reused by every replication (sim/fast/fast_setup.py): replication r on a
reused setup must be replication r built afresh, field by field, whatever ran on the setup before it."""

from __future__ import annotations

import dataclasses
import gc
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshsim.distributions import Deterministic, Exponential
from meshsim.request import PredictOptions, build_request
from meshsim.sim.engine.replication_result import Horizon, ReplicationResult
from meshsim.sim.fast.fast_engine import fast_setup, run_fast_replication, run_on_setup
from meshsim.sim.fast.fast_kernels import LOW_WATER
from meshsim.sim.fast.fast_setup import CAPACITY, FastSetup, StreamBuffers
from meshsim.sim.experiments.predict import horizon_for
from meshsim.sim.engine.streams import BATCH, Streams, stream_rng, stream_states
from meshsim.workload import FortioLoad, OpenLoad, RateProfile, SequentialLoad, Workload, Wrk2Load
from simkit import plain, tandem_topology

SEED = 3
PREDICTIONS = [  # open loads over the mechanisms: sidecars, mTLS, no mesh, a central LB, fan-out, balancers
    dict(topology="chain3", mesh="istio", rps=3500), dict(topology="chain3", mesh="istio", rps=500),
    dict(topology="bookinfo", mesh="istio", rps=40), dict(topology="single", mesh="linkerd", rps=2000),
    dict(topology="chain3", mesh="istio", rps=1000, features=("mtls",)),
    dict(topology="chain3", mesh="none", rps=2000, load="open"), dict(topology="chain5", mesh="istio", rps=800, lb="proxy"),
    dict(topology="lb3", mesh="istio", rps=1000), dict(topology="lb3", mesh="none", rps=1000),  # round robin over 3
]
LOADS = [  # the other load generators, with a time series
    (Wrk2Load(1000.0, 8, 2), Horizon(1.0, 0.2, 0.5, 0.25)),
    (FortioLoad(400.0, 4), Horizon(0.5, 0.0, 0.5, 0.1)),
    (SequentialLoad(Exponential(0.01), 3), Horizon(0.5, 0.1, 0.5, 0.2)),
    (OpenLoad(1500.0, 8, RateProfile.ramp(500.0, 1500.0, 1.0)), Horizon(1.0, 0.0, 0.5, 0.25)),
]


def _request(case: dict) -> tuple:
    request = build_request(PredictOptions(**case, duration_s=0.5))
    return request.scenario, request.workload, horizon_for(request.workload.load, request.settings)


def _case(k: int) -> tuple:
    """The k-th case: a prediction's request, then a tandem queue under each of LOADS."""
    if k < len(PREDICTIONS):
        return _request(PREDICTIONS[k])
    load, horizon = LOADS[k - len(PREDICTIONS)]
    tandem = plain(tandem_topology([Exponential(0.4e-3), Deterministic(0.3e-3), Exponential(0.2e-3)]))
    return tandem, Workload(load), horizon


def _written(setup: FastSetup) -> list:
    """What a run writes into the System (read after it by usage, memory and the time breakdown)."""
    stations = [(s.busy, s.jobs, s.cold_wakes, s.waited, s.woke, s.worked, s.cpu_waited)
                for s in setup.lowering.station_list]
    proxies = [(p.delayed, p.held_area, p.holds, p.held_seconds, p.window, len(p.binding))
               for p in setup.lowering.proxy_list]
    return [stations, proxies, setup.system.net.total, setup.system.host_cpu_time]


def _assert_same(reused: ReplicationResult, fresh: ReplicationResult, what: str) -> None:
    for f in dataclasses.fields(ReplicationResult):
        a, b = getattr(reused, f.name), getattr(fresh, f.name)
        assert pickle.dumps(a) == pickle.dumps(b), f"{what}: field {f.name} differs"


@pytest.mark.parametrize("case", range(len(PREDICTIONS) + len(LOADS)))
def test_a_reused_setup_gives_each_replication_as_built_afresh(case: int) -> None:
    scenario, workload, horizon = _case(case)
    reused = FastSetup(scenario, workload, horizon)
    for replication in (2, 0, 1, 2):  # out of order and twice: nothing may leak from the replication before
        fresh = FastSetup(scenario, workload, horizon, SEED, replication)
        expected = run_on_setup(fresh, SEED, replication)
        got = run_on_setup(reused, SEED, replication)
        _assert_same(got, expected, f"case {case}, replication {replication}")
        assert pickle.dumps(_written(reused)) == pickle.dumps(_written(fresh))
        assert got.latencies.size > 0


def test_the_setup_is_kept_for_the_same_request_only() -> None:
    scenario, workload, horizon = _request(PREDICTIONS[0])
    first = run_fast_replication(scenario, workload, horizon, SEED, 0)
    setup = fast_setup(scenario, workload, horizon)
    assert fast_setup(scenario, workload, horizon) is setup
    fortio = Workload(FortioLoad(3500.0, 8))
    assert fast_setup(scenario, fortio, horizon) is not setup  # another load kind: built for it
    assert fast_setup(scenario, dataclasses.replace(workload, keepalive=False), horizon) is not setup
    run_fast_replication(scenario, fortio, horizon, SEED, 0)
    again = run_fast_replication(scenario, workload, horizon, SEED, 0)  # a new setup again, built for it
    np.testing.assert_array_equal(first.latencies, again.latencies)
    other = run_fast_replication(scenario, workload, horizon, SEED + 1, 0)  # the seed is the run's, not the setup's
    assert not np.array_equal(first.latencies[:50], other.latencies[:50])


@pytest.mark.parametrize("case", [0, 2, 4, 6, 7])
def test_a_setup_retargeted_to_another_rate_gives_each_replication_as_built_for_it(case: int) -> None:
    """A saturation probe runs the prediction's open load at another rate and horizon on the prediction's setup:
    its replications are those of a setup built for the probe, field by field."""
    scenario, workload, horizon = _case(case)
    setup = fast_setup(scenario, workload, horizon)
    run_fast_replication(scenario, workload, horizon, SEED, 0)
    for factor, probe_horizon in ((0.5, Horizon(0.3, 0.06, 5.0)), (1.7, Horizon(0.2, 0.04, 5.0))):
        probe = Workload(OpenLoad(workload.load.rps * factor, workload.load.connections))
        assert fast_setup(scenario, probe, probe_horizon) is setup
        got = run_fast_replication(scenario, probe, probe_horizon, SEED, 1)
        _assert_same(got, run_on_setup(FastSetup(scenario, probe, probe_horizon), SEED, 1), f"case {case} x{factor}")
    assert fast_setup(scenario, workload, Horizon(0.5, 0.0, 5.0, 0.1)) is not setup  # a time series: built for it


def test_a_draw_at_build_time_that_is_not_replayed_is_refused() -> None:
    scenario, workload, horizon = _request(PREDICTIONS[7])  # round robin over 3 replicas, from a random first one
    setup = FastSetup(scenario, workload, horizon)
    assert setup.lowering.streams.replays, "the round-robin balancers' first replicas are replayed"
    setup.lowering.streams.replays.clear()
    setup.lowering.balancer_replays.clear()
    with pytest.raises(RuntimeError, match="drew while the system was built"):
        setup.check_rebind(Streams(SEED, 0))


def test_refills_keep_each_stream_s_values_and_draw_little_beyond_its_use() -> None:
    """A stream's values are its batches in order, however far ahead they are drawn; at the end of the load a
    stream has drawn at most a batch (and the low-water margin) beyond what it used."""
    names, per_step = ("busy", "quiet"), (9, 1)  # values each stream uses per simulated millisecond
    table = Streams(SEED, 0)
    refills = [lambda rng=table.rng(name): rng.exponential(1.0, BATCH) for name in names]
    buffers = StreamBuffers(refills, np.zeros((len(names), CAPACITY)))
    buffers.attach(np.zeros(len(names), dtype=np.int64), np.zeros(len(names), dtype=np.int64))
    used: list[list[float]] = [[], []]
    until, steps = 2.0, 2000
    for step in range(steps):
        for s, n in enumerate(per_step):
            for _ in range(n):
                used[s].append(buffers.buf[s, buffers.pos[s]])
                buffers.pos[s] += 1
        if (buffers.pos >= buffers.lim).any():
            buffers.refill((step + 1) * until / steps, until)
    for s, name in enumerate(names):
        rng = Streams(SEED, 0).rng(name)
        batches = np.concatenate([rng.exponential(1.0, BATCH) for _ in range(buffers.drawn[s] // BATCH)])
        np.testing.assert_array_equal(np.array(used[s]), batches[:len(used[s])])
        assert buffers.drawn[s] - len(used[s]) <= BATCH + LOW_WATER, name


def test_the_process_s_objects_are_frozen_once_after_a_first_replication(monkeypatch) -> None:
    """gc.freeze after the compiled loop is loaded (the exit's full collection walked numba's objects for ~0.45 s
    while the loop ran on the JIT); only once, so that a long-running process does not freeze its later garbage."""
    scenario, workload, horizon = _request(PREDICTIONS[1])
    run_fast_replication(scenario, workload, horizon, SEED, 0)
    assert gc.get_freeze_count() > 0
    # frozen objects may still be freed (the count then falls): what must not happen is a second freeze
    freezes = []
    monkeypatch.setattr(gc, "freeze", lambda: freezes.append(1))
    run_fast_replication(scenario, workload, horizon, SEED, 1)
    assert freezes == []


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**160), st.integers(0, 2**70), st.lists(st.text(max_size=40), min_size=1, max_size=6))
def test_streams_restart_exactly_where_numpy_seeds_them(seed: int, replication: int, names: list[str]) -> None:
    """stream_states (numpy's SeedSequence and PCG64 seeding, computed for many names at once) must give every
    stream the state numpy's own seeding gives it: multi-word seeds and replications, empty and non-ASCII names."""
    assert stream_states(seed, replication, names) == [stream_rng(seed, replication, name).bit_generator.state
                                                       for name in names]


def test_a_negative_seed_is_refused_as_numpy_refuses_it() -> None:
    with pytest.raises(ValueError):
        stream_rng(-1, 0, "s")
    with pytest.raises(ValueError, match="must be >= 0"):
        stream_states(-1, 0, ["s"])
