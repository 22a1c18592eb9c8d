"""Pinned Envoy workers vs one shared queue, CPU limits, wake-up costs, mTLS handshakes, header bytes."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from meshsim.distributions import Deterministic, Exponential
from meshsim.mesh import Feature, Handshake, MeshModel, ProxyModel
from meshsim.scenario import Scenario
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.engine.stations import CpuQuota, Station
from meshsim.wakeup import WakeUp
from meshsim.workload import FortioLoad, OpenLoad, Workload
from simkit import ZERO, station_topology

PASS = Exponential(0.5e-3)


def proxy_mesh(dispatch: str, workers: int = 2, balance: str = "hash", cpu_limit: float | None = None,
               features: dict | None = None) -> MeshModel:
    passes = {"inbound_request": PASS, "inbound_response": ZERO, "outbound_request": ZERO,
              "outbound_response": ZERO}
    proxy = ProxyModel("test", passes, workers=workers, dispatch=dispatch, connection_balance=balance,
                       cpu_limit=cpu_limit)
    return MeshModel("test", proxy, features or {}, None)


def server_side(mesh: MeshModel) -> Scenario:
    # the app is instantaneous: only the server's inbound proxy queues
    return Scenario(station_topology(ZERO, servers=8), mesh, scope="server")


def mean_latency(scenario: Scenario, load, duration: float = 5.0, reps: int = 4) -> tuple[float, float]:
    lat, hot = [], []
    for rep in range(reps):
        r = run_replication(scenario, Workload(load), Horizon(duration, 0.1 * duration), 7, rep)
        lat.append(float(np.mean(r.latencies)))
        hot.append(r.usage["q/sidecar"].hottest)
    return float(np.mean(lat)), float(np.mean(hot))


def test_one_connection_pins_all_work_on_one_envoy_worker():
    """The same 2-worker proxy at rho = 0.6: shared it is M/M/2; pinned, one long-lived connection gets one worker
    (rho = 1.2 on it) and the queue grows without bound while the other worker idles."""
    lam = 2400.0
    shared, shared_hot = mean_latency(server_side(proxy_mesh("shared")), OpenLoad(lam, connections=1))
    pinned, pinned_hot = mean_latency(server_side(proxy_mesh("pinned")), OpenLoad(lam, connections=1))
    assert pinned_hot > 0.99 and shared_hot < 0.65
    assert pinned > 50 * shared


def test_round_robin_spreads_two_connections_over_two_pinned_workers():
    lam = 2400.0  # the load that overwhelms one pinned worker is fine spread over two
    spread, hot = mean_latency(server_side(proxy_mesh("pinned", balance="round_robin")), OpenLoad(lam, connections=2))
    one, _ = mean_latency(server_side(proxy_mesh("pinned")), OpenLoad(lam, connections=1))
    assert hot == pytest.approx(0.6, abs=0.03)  # each worker: 1200/s x 0.5 ms
    assert spread < one / 50


def test_cpu_limit_throttles_a_proxy_below_its_worker_count():
    """2 workers limited to 0.5 core: capacity is the quota, not the workers (CFS bandwidth control)."""
    lam = 1500.0  # demand 0.75 core: fine for 2 workers, saturates a 0.5-core quota
    free, _ = mean_latency(server_side(proxy_mesh("shared")), OpenLoad(lam, connections=8), duration=5.0, reps=2)
    limited, hot = mean_latency(server_side(proxy_mesh("shared", cpu_limit=0.5)), OpenLoad(lam, connections=8),
                                duration=5.0, reps=2)
    assert hot > 0.99
    assert limited > 20 * free


def test_cfs_quota_books_at_most_the_budget_per_period():
    quota = CpuQuota(0.5)  # 50 ms per 100 ms period
    assert quota.run(0.0, 0.03) == pytest.approx(0.03)
    assert quota.run(0.03, 0.03) == pytest.approx(0.1 + 0.01)  # 20 ms left in period 0, the rest after the wait
    assert quota.used[0] == pytest.approx(0.05)


def test_cold_wakeup_timeline() -> None:
    """Exact timeline with scripted draws: a cold wake adds its delay (not CPU) and its CPU (holds the worker)."""
    draws = iter([0.5, 0.5, 0.99])
    wake = WakeUp(delay=1e-3, tau=2e-3, cpu=2e-4)
    station = Station("w", 1, wakeup=wake, wake_draw=lambda: next(draws), recording=True)
    assert station.serve(0.0, 1e-4) == pytest.approx(1e-4)  # just started: no idle gap, no draw
    # idle 19.9 ms: P(cold) = 1 - e^-9.95 > 0.5 -> cold: 1 ms delay, then 0.2 ms wake CPU + 0.1 ms work
    first = station.serve(0.02, 1e-4)
    assert first == pytest.approx(0.02 + 1e-3 + 2e-4 + 1e-4)
    queued = station.serve(first - 5e-5, 1e-4)  # arrives while busy: warm, no draw
    assert queued == pytest.approx(first + 1e-4)
    # idle 1 ms: P(cold) = 1 - e^-0.5 = 0.39 < 0.5 -> warm
    warm = station.serve(queued + 1e-3, 1e-4)
    assert warm == pytest.approx(queued + 1e-3 + 1e-4)
    # idle 50 ms: P(cold) = 1 - e^-25, above even a draw of 0.99 -> cold
    last = station.serve(warm + 0.05, 1e-4)
    assert last == pytest.approx(warm + 0.05 + 1e-3 + 2e-4 + 1e-4)
    assert station.cold_wakes == 2
    assert sum(station.busy) == pytest.approx(5 * 1e-4 + 2 * 2e-4)  # the delay is not CPU


def test_resume_cpu_is_paid_per_wake_and_shared_by_passes_that_find_the_worker_busy() -> None:
    """Two requests arriving together share one wake: the first pays the resume CPU, the second queues behind it."""
    wake = WakeUp(delay=0.0, tau=1.0, cpu=0.0, resume_cpu=5e-5)
    station = Station("w", 1, wakeup=wake, wake_draw=lambda: 1.0, recording=True)  # never cold
    station.idle_gaps = []
    first = station.serve(0.01, 1e-4)
    assert first == pytest.approx(0.01 + 5e-5 + 1e-4)
    second = station.serve(0.01 + 1e-6, 1e-4)  # the worker is busy: no resume
    assert second == pytest.approx(first + 1e-4)
    later = station.serve(0.02, 1e-4)
    assert later == pytest.approx(0.02 + 5e-5 + 1e-4)
    assert sum(station.busy) == pytest.approx(3e-4 + 2 * 5e-5)
    assert station.idle_gaps == pytest.approx([0.01, 0.0, 0.02 - second])


def test_a_pass_within_the_linger_finds_the_worker_running() -> None:
    """Exact timeline with scripted draws: a pass arriving within the linger pays no resume CPU and draws no cold
    wake; one arriving after it pays both, the cold wake's chance from the time it slept; the linger is CPU of the
    process (as long as it lasted), never time on the pass."""
    draws = iter([0.5])  # one draw only: the pass within the linger must not take one
    wake = WakeUp(delay=1e-3, tau=1e-4, cpu=2e-4, resume_cpu=5e-5, linger=1e-4)
    station = Station("w", 1, wakeup=wake, wake_draw=lambda: next(draws), recording=True)
    station.idle_gaps = []
    station.free_at[0] = 0.01  # busy until 10 ms
    inside = station.serve(0.01 + 6e-5, 1e-4)  # idle 60 us < linger: still in its loop
    assert inside == pytest.approx(0.01 + 6e-5 + 1e-4)
    # idle 150 us: lingered 100, slept 50 us; P(cold) = 1 - e^-0.5 = 0.39 < 0.5 -> warm, resume only
    outside = station.serve(inside + 1.5e-4, 1e-4)
    assert outside == pytest.approx(inside + 1.5e-4 + 5e-5 + 1e-4)
    assert station.cold_wakes == 0
    assert sum(station.busy) == pytest.approx(2 * 1e-4 + 6e-5 + 1e-4 + 5e-5)
    assert station.idle_gaps == pytest.approx([6e-5, 1.5e-4])  # the whole idle gap, for the fit
    assert wake.slept(6e-5) == 0.0 and wake.slept(1.5e-4) == pytest.approx(5e-5)


def test_a_linger_of_zero_is_the_worker_without_one() -> None:
    """The default: every idle gap is a sleep, as before the linger existed (same draws, same bookings)."""
    def timeline(wake: WakeUp) -> tuple[list[float], float]:
        rng = np.random.default_rng(5)
        station = Station("w", 1, wakeup=wake, wake_draw=rng.random, recording=True)
        arrivals = np.cumsum(np.random.default_rng(6).exponential(5e-4, 200))
        return [station.serve(t, 1e-4) for t in arrivals], sum(station.busy)

    base = WakeUp(delay=1e-4, tau=1e-3, cpu=5e-5, resume_cpu=2e-5)
    assert timeline(base) == timeline(replace(base, linger=0.0))


def test_a_wakeup_needs_a_draw_stream() -> None:
    with pytest.raises(ValueError, match="wake_draw"):
        Station("w", 1, wakeup=WakeUp(delay=1e-3, tau=1e-3))


@pytest.mark.parametrize("rate", [200.0, 1000.0, 3000.0])
def test_cold_wakeups_match_renewal_theory(rate: float) -> None:
    """Poisson arrivals at one worker, exponential work S. An arrival finds the worker idle with probability
    1 - rho (PASTA) and the idle period it ends is Exp(rate) long, so it wakes cold with probability
    a = E[1 - exp(-I / tau)] = 1 / (1 + rate tau). The worker is held for S plus, when cold, delay + cpu:
    rho = rate (E[S] + a (1 - rho)(d + c))  =>  rho = rate (E[S] + a b) / (1 + rate a b),  b = d + c.
    CPU per job = E[S] + a (1 - rho) c. Checked over seeded replications (mean +- 4 standard errors)."""
    from meshsim.sim.engine.streams import stream_rng

    mean_s, wake = 0.2e-3, WakeUp(delay=0.15e-3, tau=1e-3, cpu=0.1e-3)
    a = 1 / (1 + rate * wake.tau)
    b = wake.delay + wake.cpu
    rho = rate * (mean_s + a * b) / (1 + rate * a * b)
    cold_theory = a * (1 - rho)
    cpu_theory = mean_s + cold_theory * wake.cpu
    colds, cpus = [], []
    for rep in range(8):
        rng = stream_rng(11, rep, "test")
        n = 20_000
        arrivals = np.cumsum(rng.exponential(1 / rate, n))
        work = rng.exponential(mean_s, n)
        u = rng.random(n)
        draws = iter(u.tolist())
        station = Station("w", 1, wakeup=wake, wake_draw=lambda: next(draws))
        warm = n // 10
        for i, (t, s) in enumerate(zip(arrivals, work)):
            station.recording = i >= warm
            station.serve(float(t), float(s))
        colds.append(station.cold_wakes / (n - warm))
        cpus.append(sum(station.busy) / (n - warm))
    for values, theory in ((colds, cold_theory), (cpus, cpu_theory)):
        se = np.std(values, ddof=1) / math.sqrt(len(values))
        print(f"rate {rate:g}: {np.mean(values):.6g} vs theory {theory:.6g} (se {se:.2g})")
        assert abs(np.mean(values) - theory) <= 4 * se + 1e-3 * theory, (np.mean(values), theory, se)


def test_mtls_handshake_once_per_proxy_pair():
    """The pair's first call makes the session, and the call on the other connection reuses it
    (tests/test_mtls_sessions.py says why: the session rides on the proxies' connections, not the client's)."""
    handshake = Feature("mtls", handshake=Handshake(Deterministic(2e-3), round_trips=0))
    mesh = proxy_mesh("pinned", features={"mtls": handshake})
    mesh_plain = proxy_mesh("pinned")
    sc = Scenario(station_topology(ZERO, servers=8), mesh, features=("mtls",), scope="both")
    sc_plain = Scenario(station_topology(ZERO, servers=8), mesh_plain, scope="both")
    load = Workload(FortioLoad(100, connections=2, warmup="none"))  # -exactly: no warm-up call
    with_tls = run_replication(sc, load, Horizon(1.0), 1, 0).latencies
    without = run_replication(sc_plain, load, Horizon(1.0), 1, 0).latencies
    # common random numbers: the same pass times in both; the two connections' first calls leave at 0 together
    assert np.count_nonzero(with_tls[:2] > without[:2].max() + 1e-3) == 1  # one of them pays the handshake
    assert with_tls[:2].sum() - without[:2].sum() > 2e-3
    assert np.allclose(with_tls[2:], without[2:], atol=1e-12)  # every later call reuses the session
    # fortio's warm-up calls set the pair's TLS session up: no timed request pays a handshake
    warm = Workload(FortioLoad(100, connections=2))
    warm_tls = run_replication(sc, warm, Horizon(1.0), 1, 0)
    assert warm_tls.load_start > 2 * 2e-3  # a warm-up paid both sides' handshake
    assert np.allclose(warm_tls.latencies - run_replication(sc_plain, warm, Horizon(1.0), 1, 0).latencies, 0.0,
                       atol=1e-12)


def test_cpu_fraction_splits_a_pass_into_worker_time_and_delay():
    """Same pass times (common random numbers): latency is unchanged at low load, the worker is busy half as long
    on average. The inbound side's passes are an exponential request pass (mean m) and a zero response pass, so the
    hold ceiling h solves (m/2)(1 - exp(-h/m)) = m/4: h = m ln 2, and each request pass holds min(W, h)."""
    whole = proxy_mesh("shared")
    half = MeshModel("test", replace(whole.proxy, cpu_fraction=0.5), {}, None)
    load = Workload(FortioLoad(50, connections=1))
    a = run_replication(server_side(whole), load, Horizon(2.0), 3, 0)
    b = run_replication(server_side(half), load, Horizon(2.0), 3, 0)
    assert np.allclose(a.latencies, b.latencies)  # one request at a time: nothing waits for the worker
    m = PASS.mean
    # busy(b) - busy(a) / 2 sums min(W, h) - W / 2 over the request passes: mean 0, its spread from a large sample
    w = np.random.default_rng(0).exponential(m, 1_000_000)
    spread = float(np.std(np.minimum(w, m * math.log(2)) - w / 2))
    n = a.usage["q/sidecar"].jobs / 2
    assert b.usage["q/sidecar"].cpu_seconds == pytest.approx(0.5 * a.usage["q/sidecar"].cpu_seconds,
                                                             abs=5 * spread * math.sqrt(n))


def test_services_sharing_a_node_compete_for_its_cores():
    """Two services of 0.6 core each: fine on their own nodes, saturated together on one 1-core node, and back to
    the separate-node latency when that node has 2 cores."""
    from simkit import plain, tandem_topology

    base = tandem_topology([Exponential(0.6e-3), Exponential(0.6e-3)])
    services = {n: replace(s, node="host") for n, s in base.services.items()}
    shared = replace(base, services=services, node_cores={"host": 1.0})
    roomy = replace(shared, node_cores={"host": 2.0})
    load = Workload(OpenLoad(1000.0))

    def run(topology):
        r = run_replication(plain(topology), load, Horizon(10.0, 1.0), 5, 0)
        return float(np.mean(r.latencies))

    apart = run(base)
    assert run(shared) > 20 * apart  # 1.2 cores of demand on 1 core: the backlog grows through the run
    assert run(roomy) == pytest.approx(apart, rel=0.25)
