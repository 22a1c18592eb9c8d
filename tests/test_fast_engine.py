"""The compiled engine against the SimPy reference engine, and its coverage check and selection.

Equivalence: for every shipped topology x mesh x load, both engines run the same seeded replications (the same
named random streams: common random numbers) and their p50/p90/p99, the bottleneck's utilisation and the achieved
rps must agree within the two engines' 95 % confidence intervals (half-widths from the replications, no golden
numbers). Exact timelines: on deterministic inputs both engines give the same latencies to the nanosecond.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshsim.catalog import load_mesh, load_topology
from meshsim.distributions import Deterministic
from meshsim.errors import FieldError
from meshsim.request import PredictOptions, build_request
from meshsim.scenario import build_scenario
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.engine_choice import EngineChoice, choose_engine
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.sim.experiments.predict import horizon_for, predict
from meshsim.wakeup import WakeUp
from meshsim.workload import FortioLoad, OpenLoad, RateProfile, SequentialLoad, Workload, Wrk2Load
from engine_pairs import engine_disagreements
from simkit import plain, tandem_topology

TOPOLOGIES = ("single", "chain3", "lb3", "edge", "bookinfo", "emojivoto")
MESHES = ("none", "istio", "linkerd", "traefik", "istio-1.2")
LOADS = ("open", "fortio", "sequential", "wrk2", "profile")
REPS = 4
SEED = 7


@pytest.fixture(scope="module", autouse=True)
def compiled() -> None:
    """Compile (or load from numba's disk cache) once for the module, outside the timed tests."""
    request = build_request(PredictOptions(topology="single", mesh="none", rps=100, duration_s=0.05))
    run_fast_replication(request.scenario, request.workload, Horizon(0.05, 0.0, 0.01), 1, 0)


def _request(topology: str, mesh: str, load: str, **extra):
    """``profile``: the open load ramping 100 -> 300 rps over the run (its time series on, as by default)."""
    rps = {"open": 300.0, "fortio": 300.0, "sequential": None, "wrk2": 300.0, "profile": None}[load]
    connections = {"open": 64, "fortio": 4, "sequential": 2, "wrk2": 8, "profile": 64}[load]
    profile = RateProfile.ramp(100.0, 300.0, 2.0) if load == "profile" else None
    options = PredictOptions(topology=topology, mesh=mesh, load="open" if load == "profile" else load, rps=rps,
                             connections=connections, duration_s=2.0 if load != "sequential" else 4.0,
                             profile=profile, **extra)
    return build_request(options)


@pytest.mark.slow
@pytest.mark.parametrize("load", LOADS)
@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_engines_agree_within_their_confidence_intervals(topology: str, mesh: str, load: str) -> None:
    problems = engine_disagreements(_request(topology, mesh, load), SEED, REPS)
    assert not problems, f"{topology} x {mesh} x {load}: " + "; ".join(problems)


@pytest.mark.parametrize("options", [
    dict(topology="chain3", mesh="istio", features=("tracing", "mtls")),
    dict(topology="chain3", mesh="istio", lb="proxy", proxy_cpu_limit=0.5),
    dict(topology="lb3", mesh="linkerd", lb="proxy"),
    dict(topology="single", mesh="istio", keepalive=False, tls=True),
    dict(topology="chain3", mesh="istio", scope="server"),
])
def test_engines_agree_on_mechanisms_off_the_defaults(options: dict) -> None:
    """Tracing collectors, mTLS handshakes, central LBs, CPU quotas, new connections per request, server scope."""
    request = build_request(PredictOptions(rps=400.0, duration_s=2.0, connections=16, **options))
    problems = engine_disagreements(request, SEED, REPS)
    assert not problems, f"{options}: " + "; ".join(problems)


def test_deterministic_chain_gives_the_same_timeline_on_both_engines() -> None:
    """Constant service times and arrivals from the same stream: every latency is the same on both engines."""
    scenario = plain(tandem_topology([Deterministic(0.4e-3), Deterministic(0.3e-3), Deterministic(0.2e-3)]))
    workload = Workload(OpenLoad(1500.0, connections=8))
    horizon = Horizon(1.0, 0.1, 1.0)
    fast = run_fast_replication(scenario, workload, horizon, 3, 0)
    simpy = run_replication(scenario, workload, horizon, 3, 0)
    assert fast.latencies.size == simpy.latencies.size > 1000
    np.testing.assert_allclose(fast.latencies, simpy.latencies, rtol=0, atol=1e-9)
    assert fast.usage["q1/app"].cpu_seconds == pytest.approx(simpy.usage["q1/app"].cpu_seconds, rel=1e-9)
    assert fast.started == simpy.started and fast.in_flight == simpy.in_flight


def test_fortio_pacing_is_the_same_timeline_on_both_engines() -> None:
    """fortio's warm-up, per-thread budget and pacing on a deterministic chain: the same calls at the same times."""
    scenario = plain(tandem_topology([Deterministic(0.2e-3), Deterministic(0.1e-3)]))
    workload = Workload(FortioLoad(400.0, 4))
    horizon = Horizon(1.0, 0.0, 1.0)
    fast = run_fast_replication(scenario, workload, horizon, 3, 0)
    simpy = run_replication(scenario, workload, horizon, 3, 0)
    assert fast.latencies.size == simpy.latencies.size == 400
    np.testing.assert_allclose(np.sort(fast.latencies), np.sort(simpy.latencies), rtol=0, atol=1e-9)
    assert fast.window == pytest.approx(simpy.window, abs=1e-9)
    assert fast.load_start == pytest.approx(simpy.load_start, abs=1e-9)


@pytest.mark.parametrize("linger", [1e-3, 3e-3], ids=["sleeps", "lingers"])
def test_a_worker_lingering_past_the_next_call_never_wakes_on_both_engines(linger: float) -> None:
    """One fortio connection at 400 rps (a call every 2.5 ms) on a 0.2 ms server with a 50 us resume: a worker
    lingering 1 ms sleeps between calls (every call pays the resume, the process burns 1.25 ms per call), one
    lingering 3 ms is still running when each call comes (no resume, it burns the whole 2.5 ms period: one core)."""
    work, resume, period = 0.2e-3, 5e-5, 2.5e-3
    topology = tandem_topology([Deterministic(work)])
    wake = WakeUp(delay=0.0, tau=1.0, resume_cpu=resume, linger=linger)
    topology = replace(topology, services={"q1": replace(topology.services["q1"], wakeup=wake)})
    scenario, workload, horizon = plain(topology), Workload(FortioLoad(400.0, 1)), Horizon(1.0, 0.0, 1.0)
    fast = run_fast_replication(scenario, workload, horizon, 3, 0)
    simpy = run_replication(scenario, workload, horizon, 3, 0)
    np.testing.assert_allclose(fast.latencies, simpy.latencies, rtol=0, atol=1e-9)
    paid = work if linger > period - work else work + resume
    np.testing.assert_allclose(fast.latencies[1:], paid, rtol=0, atol=1e-9)
    per_call = period if linger > period - work else work + resume + linger
    for result in (fast, simpy):
        assert result.usage["q1/app"].cpu_seconds / result.latencies.size == pytest.approx(per_call, rel=0.02)
    assert fast.usage["q1/app"].cpu_seconds == pytest.approx(simpy.usage["q1/app"].cpu_seconds, rel=1e-9)


def test_what_if_variants_share_their_random_numbers() -> None:
    """Common random numbers: a variant with a bigger payload draws the same numbers for every component, so its
    latencies follow the base run's request by request (independent seeds would not correlate at all)."""
    topology = load_topology("single")
    mesh = load_mesh("none")
    light = Workload(OpenLoad(50.0, connections=4))
    horizon = Horizon(4.0, 0.4, 1.0)
    base = run_fast_replication(build_scenario(topology, mesh), light, horizon, 5, 0)
    bigger = run_fast_replication(build_scenario(topology.with_payload(64 * 1024), mesh), light, horizon, 5, 0)
    other_seed = run_fast_replication(build_scenario(topology, mesh), light, horizon, 6, 0)
    n = min(base.latencies.size, bigger.latencies.size, other_seed.latencies.size)
    assert n > 100
    assert np.corrcoef(base.latencies[:n], bigger.latencies[:n])[0, 1] > 0.9
    assert abs(np.corrcoef(base.latencies[:n], other_seed.latencies[:n])[0, 1]) < 0.3
    assert float(np.mean(bigger.latencies)) > float(np.mean(base.latencies))  # the bytes cost time


GAP = "a mechanism only the SimPy engine has"


@pytest.fixture
def coverage_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled engine covers every mechanism today: to check the fallback's plumbing, pretend it lacks one for
    the wrk2 load (what sim/engine_choice.py says when a mechanism reaches the SimPy engine first)."""
    from meshsim.sim import engine_choice

    monkeypatch.setattr(engine_choice, "uncovered_mechanism",
                        lambda scenario, workload, series=False: GAP if isinstance(workload.load, Wrk2Load) else None)


def test_the_fast_engine_covers_every_load_and_the_time_series() -> None:
    scenario = build_request(PredictOptions(rps=100)).scenario
    loads = (OpenLoad(100.0), OpenLoad(100.0, profile=RateProfile.ramp(10.0, 100.0, 5.0)), FortioLoad(100.0, 2),
             SequentialLoad(Deterministic(0.05), 2), Wrk2Load(100.0, 4, 2))
    for load in loads:
        for series in (False, True):
            assert choose_engine(None, scenario, Workload(load), series) == EngineChoice("fast"), (load, series)
    assert choose_engine("simpy", scenario, Workload(OpenLoad(100.0))).name == "simpy"
    with pytest.raises(FieldError) as err:
        choose_engine("turbo", scenario, Workload(OpenLoad(100.0)))
    assert err.value.field == "engine"


def test_an_uncovered_mechanism_falls_back_naming_it(coverage_gap: None) -> None:
    scenario = build_request(PredictOptions(rps=100)).scenario
    choice = choose_engine(None, scenario, Workload(Wrk2Load(100.0, 4, 2)))
    assert choice.name == "simpy" and GAP in choice.fallback and "\n" not in choice.fallback
    assert choose_engine(None, scenario, Workload(OpenLoad(100.0))).name == "fast"


@pytest.mark.parametrize("topology, mesh", [("bookinfo", "istio"), ("chain3", "linkerd"), ("single", "none")])
def test_wire_bytes_per_request_agree_between_the_engines(topology: str, mesh: str) -> None:
    """The compiled engine reports the call graph's expected bytes; SimPy counts each call's (Bookinfo's weighted
    choice of reviews versions makes the count random, the expectation exact)."""
    # well below saturation (Bookinfo saturates near 50 rps): an overloaded run's started requests have not made
    # all their downstream calls when the window closes
    request = build_request(PredictOptions(topology=topology, mesh=mesh, rps=20.0, duration_s=20.0))
    horizon = horizon_for(request.workload.load, request.settings)
    fast = run_fast_replication(request.scenario, request.workload, horizon, SEED, 0).wire_bytes
    simpy = run_replication(request.scenario, request.workload, horizon, SEED, 0).wire_bytes
    assert set(fast) == set(simpy) == {"request", "response", "entry_request"}
    assert fast["entry_request"] == simpy["entry_request"]
    for key in ("request", "response"):
        assert fast[key] == pytest.approx(simpy[key], rel=0.03)


def test_a_time_series_runs_on_the_fast_engine() -> None:
    lines: list[str] = []
    pred = predict("single", "istio", rps=200, duration_s=1.0, replications=2, saturation=False, timeseries_s=0.5,
                   progress=lines.append)
    assert pred.inputs["engine"] == "fast-numba/1" and "engine_fallback" not in pred.inputs
    assert not [line for line in lines if line.startswith("engine:")]
    assert pred.timeseries is not None and len(pred.timeseries.windows) == 2
    assert sum(w.requests for w in pred.timeseries.windows) == pred.requests


def test_prediction_says_which_engine_ran(coverage_gap: None) -> None:
    lines: list[str] = []
    fast = predict("single", "istio", rps=200, duration_s=1.0, replications=2, saturation=False)
    assert fast.inputs["engine"] == "fast-numba/1"
    simpy = predict("single", "istio", rps=200, duration_s=1.0, replications=2, saturation=False, engine="simpy")
    assert simpy.inputs["engine"] == "simpy-fcfs/1"
    fallback = predict("single", "istio", rps=200, duration_s=1.0, replications=2, saturation=False, load="wrk2",
                       progress=lines.append)
    assert fallback.inputs["engine"] == "simpy-fcfs/1"
    assert [line for line in lines if line.startswith("engine:")] == [fallback.inputs["engine_fallback"]]
    json.dumps(fast.to_dict())


def test_unknown_engine_is_refused_naming_the_field() -> None:
    with pytest.raises(FieldError) as err:
        build_request(PredictOptions(rps=100, engine="turbo"))
    assert err.value.field == "engine"


def test_sequential_users_think_between_requests() -> None:
    """One user, 50 ms think: the rate is 1 / (latency + think) on the fast engine as on the reference."""
    request = build_request(PredictOptions(topology="single", mesh="none", load="sequential", connections=1,
                                           duration_s=5.0))
    horizon = horizon_for(request.workload.load, request.settings)
    result = run_fast_replication(request.scenario, request.workload, horizon, 1, 0)
    mean = float(np.mean(result.latencies))
    assert result.achieved_rps == pytest.approx(1.0 / (mean + 0.05), rel=0.03)
    assert isinstance(request.workload.load, SequentialLoad)
    assert math.isfinite(mean)


def test_cli_engine_flag_selects_and_reports_the_engine(capsys, coverage_gap: None) -> None:
    from meshsim.cli import main

    quick = ["--topology", "single", "--rps", "200", "--duration", "0.5", "--replications", "2", "--json"]
    for engine, label in (("fast", "fast-numba/1"), ("simpy", "simpy-fcfs/1")):
        assert main(["predict", *quick, "--engine", engine]) == 0
        assert json.loads(capsys.readouterr().out)["inputs"]["engine"] == label
    assert main(["predict", *quick[:-1], "--load", "wrk2"]) == 0  # not covered: one line, then the SimPy engine
    err = capsys.readouterr().err
    assert [line.strip() for line in err.splitlines() if "engine:" in line] == [
        f"engine: simpy (the fast engine does not cover {GAP})"]
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", *quick, "--engine", "turbo"])
    assert exit_info.value.code == 2
    assert "--engine" in capsys.readouterr().err


def test_a_missing_compiled_cache_is_detected(tmp_path, monkeypatch) -> None:
    """Before the first build a run says it is building (it takes minutes): the check looks for the native module
    where numba caches, and for numba's own cache where the loop falls back to the JIT."""
    from meshsim.sim.fast import fast_native
    from meshsim.sim.engine_choice import compiled_code_cached

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(fast_native.FALLBACK_ENV, raising=False)
    assert not compiled_code_cached()
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "fast_kernels._loop-1.py311.nbi").write_bytes(b"")
    assert not compiled_code_cached(), "numba's cache alone does not make the native module"
    fast_native.module_path().write_bytes(b"")
    assert compiled_code_cached()
    fast_native.module_path().unlink()
    fast_native.failure_marker().write_text("no compiler\n")  # the native module cannot be built here: the JIT's
    assert compiled_code_cached()
    (tmp_path / "sim" / "fast_kernels._loop-1.py311.nbi").unlink()
    assert not compiled_code_cached()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0]), max_size=12),
       st.sampled_from([-1.0, 0.0, 0.5, 1.0, 1.25, 2.0, 3.0, 4.0]), st.integers(0, 3))
def test_the_kernels_interval_search_is_bisect_right(ends: list[float], t: float, base: int) -> None:
    """_first_after scans a core's sorted interval ends from the back (few end after the clock): it must return
    bisect_right's index on any sorted run, ties and an empty run included, read at any offset of F, every other
    value (a core's row interleaves its intervals' starts and ends). The kernel functions are plain Python until
    numba compiles them, so this checks the very code the loop is built from."""
    from meshsim.sim.fast import fast_kernels as K

    values = sorted(ends)
    interleaved = [x for value in values for x in (value, 99.0)]  # the starts between the ends must not be read
    F = np.array([9.0] * base + interleaved + [-9.0])  # values before and after the run must not be read
    assert K._first_after(F, base, len(values), t) == bisect.bisect_right(values, t)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["push", "replace", "pop"]), st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0])),
                max_size=40))
def test_the_event_heap_pops_in_time_then_push_order_with_replaced_tops(ops: list[tuple[str, float]]) -> None:
    """The loop leaves a running token's event on the heap's top and replaces it when the token waits again
    (heap_replace: one sift-down for a pop and a push): every event must still come out earliest first, ties in push
    order, as a pop and a push would give. Times only grow from the top's, as in the loop (events are never due
    before now); plain Python kernels, as above."""
    from meshsim.sim.fast import fast_kernels as K

    I = np.zeros(K.HEADER + K.FLAGS, dtype=np.int64)
    I[2 * K.R_FLAGS], I[2 * K.R_FLAGS + 1] = K.HEADER, K.FLAGS
    HT, HI = np.zeros(64 + K.MARGIN), np.zeros((64 + K.MARGIN, 2), dtype=np.int64)
    reference: list[tuple[float, int, int]] = []  # (time, push order, entry), as heapq orders them
    popped, seq = [], 0
    for entry, (op, delay) in enumerate(ops):
        now = min(reference)[0] if reference else 0.0
        if op == "replace" and reference:
            popped.append(min(reference)[2])
            reference.remove(min(reference))
            K.heap_replace(I, HT, HI, now + delay, entry)
        elif op == "pop" and reference:
            popped.append(min(reference)[2])
            reference.remove(min(reference))
            assert K.heap_pop(I, HT, HI) == popped[-1]
            continue
        else:
            K.heap_push(I, HT, HI, now + delay, entry)
        reference.append((now + delay, seq, entry))
        seq += 1
        assert HI[0, 1] == min(reference)[2]
    while reference:
        assert K.heap_pop(I, HT, HI) == min(reference)[2]
        reference.remove(min(reference))


def test_a_wait_is_folded_into_the_op_after_it() -> None:
    """The linked program has no OP_YIELD: each marks the op after it (code + OP_WAIT), which waits before it runs;
    a block cannot end with a wait (it would have no op to wait at)."""
    from meshsim.sim.fast import fast_kernels as K
    from meshsim.sim.fast.fast_program import fold_waits

    ops = [[K.OP_HOP, 0, 1, 100, 0], [K.OP_YIELD], [K.OP_PASS, 0, 3, 100, 0, 1, 0, 2], [K.OP_YIELD], [K.OP_RET]]
    assert fold_waits(ops) == [[K.OP_HOP, 0, 1, 100, 0], [K.OP_PASS + K.OP_WAIT, 0, 3, 100, 0, 1, 0, 2],
                               [K.OP_RET + K.OP_WAIT]]
    assert max(op[0] for op in ops if op[0] != K.OP_YIELD) < K.OP_WAIT
    with pytest.raises(RuntimeError, match="ends with a wait"):
        fold_waits([[K.OP_HOP, 0, 1, 100, 0], [K.OP_YIELD]])
