"""A woken thread runs first on a host's cores (meshsim/woken_first.py, sim/engine/woken_first_cores.py): the exact
timeline on a node's cores and through a station, both engines alike, the two classes against queueing theory over
seeded replications, the model file's block and the lab fit that writes it."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from meshsim.calibrate.fit.sim_check import host_woken_first, with_lab_scheduler
from meshsim.cluster_facts import parse_cluster
from meshsim.distributions import Deterministic
from meshsim.errors import ModelError
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.engine.stations import NodeCores, Station
from meshsim.sim.engine.woken_first_cores import WokenFirstCores
from meshsim.sim.experiments.stats import t_interval
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.tick_hold import TickHold
from meshsim.woken_first import RHO_CAP, WokenFirst, parse_woken_first
from meshsim.workload import OpenLoad, Workload
from meshsim.yamlio import Section
from simkit import plain, station_topology, tandem_topology
from test_queueing_theory import REPS, SEED, erlang_c_wait

MS = 1e-3


# -- the cores themselves ------------------------------------------------------------------------------------------

def test_a_woken_burst_runs_at_once_and_the_next_other_one_is_stretched_by_its_load() -> None:
    window = 0.1
    node = WokenFirstCores(1, WokenFirst(window))
    assert node.run(0.0, 0.1) == 0.1  # no woken load yet: as NodeCores, booked on the core 0..0.1
    assert node.run_woken(0.05, 0.02) == pytest.approx(0.07)  # displaces it: waits for no other woken burst
    # the woken load decayed from 0.05 to 0.07: 0.02 exp(-0.2) core-seconds over a 0.1 s window on 1 core
    rho = 0.02 * math.exp(-0.2) / window
    assert node.recent_load(0.07) == pytest.approx(rho)
    # an other burst at 0.07 queues behind the first (booked till 0.1) with its work stretched by 1 / (1 - rho)
    assert node.run(0.07, 0.03) == pytest.approx(0.1 + 0.03 / (1 - rho))
    assert node.run_woken(0.075, 0.01) == pytest.approx(0.085)  # woken: only the woken burst before it (till 0.07)
    assert node.run_woken(0.076, 0.01) == pytest.approx(0.095)  # ... which now ends at 0.085


def test_woken_bursts_share_the_cores_first_come_first_served_among_themselves() -> None:
    node = WokenFirstCores(2, WokenFirst(2 * MS))
    node.run(0.0, 5.0)
    node.run(0.0, 5.0)  # both cores booked for others: the woken ones do not wait for them
    assert [node.run_woken(0.0, 1.0) for _ in range(5)] == pytest.approx([1.0, 1.0, 2.0, 2.0, 3.0])


def test_the_stretch_stops_at_the_cap_and_busy_counts_the_work_once() -> None:
    node = WokenFirstCores(1, WokenFirst(1 * MS))
    node.recording = True
    node.run_woken(0.0, 0.05)  # 50 core-seconds per second of window: far past any core's capacity
    assert node.recent_load(0.0) == RHO_CAP
    # the core's intervals hold no woken burst: the other one starts at once, its work stretched ten times
    assert node.run(0.0, 1 * MS) == pytest.approx(1 * MS / (1 - RHO_CAP))
    assert node.busy == pytest.approx(0.05 + 1 * MS)


def test_a_woken_burst_that_finds_every_core_taken_counts_toward_the_tick_hold() -> None:
    node = WokenFirstCores(1, WokenFirst(2 * MS), tick_hold=TickHold(4 * MS, 0.5))
    assert node.run(0.0, 1 * MS) == pytest.approx(1 * MS)  # idle core: at once, nothing owed
    assert node.run_woken(0.5 * MS, 0.1 * MS) == pytest.approx(0.6 * MS)  # core taken: owes 0.5, preempts
    assert node.run_woken(0.55 * MS, 0.1 * MS) == pytest.approx(4.1 * MS)  # owes 1: the running one kept the core
    assert node.run_woken(5.0 * MS, 0.1 * MS) == pytest.approx(5.1 * MS)  # every core idle: nothing owed
    assert node.owed == pytest.approx(0.0)


def test_the_compiled_engine_caps_the_stretch_where_the_data_model_does() -> None:
    from meshsim.sim.fast import fast_kernels

    assert fast_kernels.RHO_CAP == RHO_CAP


def test_a_plain_node_books_a_woken_burst_like_any_other() -> None:
    plain_node, same = NodeCores(1), NodeCores(1)
    for t in (0.0, 0.1, 0.15, 0.4):
        assert plain_node.run_woken(t, 0.2) == same.run(t, 0.2)


def test_a_pass_that_finds_its_worker_idle_is_woken_and_one_queued_behind_it_is_not() -> None:
    node = WokenFirstCores(1, WokenFirst(0.1))
    worker = Station("w", servers=1, node=node)
    node.run(0.0, 0.1)  # another thread's burst holds the core till 0.1
    first = worker.serve(0.05, 0.02)  # the worker slept: its pass displaces the other thread
    second = worker.serve(0.06, 0.03)  # queued behind its own last pass: runs as the thread that kept running
    rho = 0.2 * math.exp(-0.2)
    assert (first, second) == pytest.approx((0.07, 0.1 + 0.03 / (1 - rho)))


# -- through the engines -------------------------------------------------------------------------------------------

def _lab(window: float | None, cores: float = 2.0, hold: float = 0.0):
    tandem = tandem_topology([Deterministic(0.3e-3), Deterministic(0.2e-3), Deterministic(0.25e-3)])
    spare = replace(tandem, services={n: replace(s, cores=2) for n, s in tandem.services.items()})
    return plain(spare.on_one_host(cores, tick_hold=TickHold(4 * MS, hold) if hold else None,
                                   woken_first=WokenFirst(window) if window else None))


@pytest.mark.parametrize("hold", [0.0, 0.02], ids=["no-tick-hold", "tick-hold"])
def test_both_engines_give_the_same_timeline_with_woken_bursts_first(hold: float) -> None:
    workload, horizon = Workload(OpenLoad(1500.0, connections=16)), Horizon(1.0, 0.1, 0.5)
    simpy = run_replication(_lab(2 * MS, hold=hold), workload, horizon, 5, 0)
    fast = run_fast_replication(_lab(2 * MS, hold=hold), workload, horizon, 5, 0)
    assert fast.latencies.size == simpy.latencies.size > 1000
    np.testing.assert_allclose(fast.latencies, simpy.latencies, rtol=0, atol=1e-9)
    assert fast.node_utilization["host"] == pytest.approx(simpy.node_utilization["host"], rel=1e-9)
    fcfs = run_fast_replication(_lab(None, hold=hold), workload, horizon, 5, 0)
    assert not np.array_equal(fcfs.latencies, fast.latencies)  # the order moved something
    # the cores' capacity holds: the same work booked, whichever runs first
    assert fast.node_utilization["host"] == pytest.approx(fcfs.node_utilization["host"], rel=0.02)


# -- against theory ------------------------------------------------------------------------------------------------

def _two_classes(cores: int, window: float, woken: tuple[float, float], other: tuple[float, float],
                 replication: int, arrivals: int = 40000) -> tuple[float, float, float]:
    """Poisson arrivals of woken and other bursts, exponential work, straight on the cores; the mean response of
    each class after a 10 % warm-up cut, and the cores' busy share."""
    (lam_w, mu_w), (lam_o, mu_o) = woken, other
    rng = np.random.default_rng([SEED, replication])
    times = np.cumsum(rng.exponential(1 / (lam_w + lam_o), arrivals))
    is_woken = rng.uniform(size=arrivals) < lam_w / (lam_w + lam_o)
    work = np.where(is_woken, rng.exponential(1 / mu_w, arrivals), rng.exponential(1 / mu_o, arrivals))
    now = [0.0]
    node = WokenFirstCores(cores, WokenFirst(window), clock=lambda: now[0])
    cut = times[arrivals // 10]
    responses: dict[bool, list[float]] = {True: [], False: []}
    for t, w, k in zip(times, work, is_woken):
        now[0] = t
        node.recording = t >= cut
        finish = node.run_woken(t, w) if k else node.run(t, w)
        if t >= cut:
            responses[bool(k)].append(finish - t)
    busy = node.busy / (cores * (times[-1] - cut))
    return float(np.mean(responses[True])), float(np.mean(responses[False])), busy


def _inside(values: list[float], theory: float, slack: float = 0.02) -> None:
    est = t_interval(values, confidence=0.99)
    assert est.lo - slack * theory <= theory <= est.hi + slack * theory, (theory, est)
    assert est.half_width < 0.1 * theory


@pytest.mark.parametrize("cores", [1, 2])
def test_the_woken_class_is_an_mmc_queue_of_its_own_load(cores: int) -> None:
    """Whatever else the cores run, a woken burst waits only for the woken ones: M/M/c (Erlang C) of their load,
    as the high class of a preemptive priority queue."""
    mu, lam = 10000.0, 6000.0 * cores / 2
    runs = [_two_classes(cores, 2 * MS, (lam, mu), (0.4 * cores * mu, mu), i) for i in range(REPS)]
    _inside([r[0] for r in runs], erlang_c_wait(cores, lam, mu) + 1 / mu)


def test_the_other_class_completes_as_mg1_with_its_work_stretched_by_the_woken_load() -> None:
    """Over a long window the woken load is steady (rho_w), and an other burst is an M/G/1 job of work S / (1 -
    rho_w), the preemptive-resume completion time: T = E[S] / (1 - rho_w) + lam E[S^2] / (2 (1 - rho_w)(1 - rho)).
    Exact preemptive-resume priority adds the woken work in service at its arrival, lam_w E[S_w^2] / (2 (1 -
    rho_w)(1 - rho)), which a host that books finishes at arrival cannot know: at these loads the formulas put the
    approximation 30 % below it, and the test checks it lies below. The cores' busy share is the offered work
    either way."""
    mu, lam_w, lam_o = 10000.0, 3000.0, 4000.0
    rho_w, rho = lam_w / mu, (lam_w + lam_o) / mu
    runs = [_two_classes(1, 100 * MS, (lam_w, mu), (lam_o, mu), i) for i in range(REPS)]
    stretched = 1 / mu / (1 - rho_w) + lam_o * 2 / mu**2 / (2 * (1 - rho_w) * (1 - rho))
    _inside([r[1] for r in runs], stretched)
    exact = stretched + lam_w * 2 / mu**2 / (2 * (1 - rho_w) * (1 - rho))
    assert t_interval([r[1] for r in runs], confidence=0.99).hi < exact  # the gap shows: below exact, by its term
    _inside([r[0] for r in runs], 1 / (mu - lam_w))  # and the woken class an M/M/1 of its own
    _inside([r[2] for r in runs], rho)


# -- the model file and the fit ------------------------------------------------------------------------------------

def test_the_model_files_block_is_checked_with_one_line_errors() -> None:
    block = parse_woken_first(Section({"window_ms": 2, "source": "traced"}, "cluster.woken_first"))
    assert block == WokenFirst(2 * MS, "traced")
    for bad, words in (({}, "cluster.woken_first.window_ms: missing"),
                       ({"window_ms": 0}, "cluster.woken_first.window_ms"),
                       ({"window_ms": 500}, "cluster.woken_first.window_ms"),
                       ({"window_ms": 2, "share": 1}, "share")):
        with pytest.raises(ModelError, match=words.replace(".", r"\.")):
            parse_woken_first(Section(bad, "cluster.woken_first"))


def test_a_clusters_block_reaches_its_topologys_nodes_and_a_lab_host() -> None:
    facts = parse_cluster(Section({"woken_first": {"window_ms": 2}}, "cluster"))
    assert facts is not None and facts.woken_first == WokenFirst(2 * MS)
    topology = facts.applied_to(station_topology(Deterministic(1 * MS)))
    assert topology.woken_first == WokenFirst(2 * MS)
    assert topology.on_one_host(2.0).woken_first == WokenFirst(2 * MS)
    assert station_topology(Deterministic(1 * MS)).on_one_host(2.0).woken_first is None


class _Run:
    def __init__(self, lab_host_cores: float | None) -> None:
        self.lab_host_cores = lab_host_cores


def test_the_fit_writes_the_block_for_lab_runs_only_and_replays_read_it() -> None:
    lab = with_lab_scheduler({"cluster": {"tick_hold": {}}}, [_Run(None), _Run(2.0)])
    assert host_woken_first(lab) is not None and "tick_hold" in lab["cluster"]
    assert "lab-wakeup-priority-2026-11-29" in lab["cluster"]["woken_first"]["source"]
    cluster = with_lab_scheduler({}, [_Run(None)])
    assert host_woken_first(cluster) is None and "cluster" not in cluster
