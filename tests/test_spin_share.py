"""A wake's spinning threads (``wakeup.spin_share``): the share of a wake's CPU that other threads of the process burn
beside the woken one (Go's scheduler waking a thread to spin on an idle P) is the process's CPU on the node's cores,
on no request's path; the lab replay's forwarding apps carry the share measured with GOMAXPROCS=1
(calibrate/validation/forwarding_wake.py, measurements/lab-go-spinning-2026-11-29)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from meshsim.calibrate.validation.forwarding_wake import SPIN_SHARE, WakeSplit
from meshsim.distributions import Deterministic
from meshsim.errors import ModelError
from meshsim.mesh import mesh_from_data
from meshsim.scenario import Scenario
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.engine.stations import NodeCores, Station
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.topology import Client, Compute, Service, Topology
from meshsim.wakeup import WakeUp
from meshsim.workload import FortioLoad, Workload
from simkit import NO_MESH, NO_NETWORK

MS = 1e-3
ENGINES = {"simpy": run_replication, "fast": run_fast_replication}
WORK_MS, RESUME_MS, SHARE = 0.1, 0.4, 0.5
KINDS = ("inbound_request", "inbound_response", "outbound_request", "outbound_response")


def _never_cold() -> float:
    return 1.0  # the cold lottery's draw: never below its probability (and a resume-only wake has no cold cost)


@pytest.mark.parametrize("cores, finish_ms", [(1, 1.5), (2, 1.3)])
def test_the_spinning_threads_take_a_core_beside_the_woken_one(cores: int, finish_ms: float) -> None:
    """Exact timeline: a job of 0.1 ms at 1 ms finds the worker asleep; the wake costs 0.4 ms, half of it spinning
    threads booked at once on the node. One core: they run first (1.0-1.2 ms), then the woken thread's 0.2 ms and
    the job (1.5 ms). Two cores: side by side (1.3 ms). Either way the process burned 0.5 ms."""
    wake = WakeUp(delay=0.0, tau=1 * MS, resume_cpu=RESUME_MS * MS, spin_share=SHARE)
    station = Station("app", 2, wakeup=wake, wake_draw=_never_cold, recording=True)
    station.node = NodeCores(cores)
    station.node.recording = True
    assert station.serve(1 * MS, WORK_MS * MS) == pytest.approx(finish_ms * MS)
    assert sum(station.busy) == pytest.approx((WORK_MS + RESUME_MS) * MS)
    assert station.node.busy == pytest.approx((WORK_MS + RESUME_MS) * MS)


def _app(engine: str, share: float, host_cores: float | None) -> Any:
    wake = WakeUp(delay=0.0, tau=1 * MS, resume_cpu=RESUME_MS * MS, spin_share=share)
    svc = Service("q", handler=(Compute(Deterministic(WORK_MS * MS)),), cores=2, request_bytes=0, response_bytes=0,
                  wakeup=wake)
    topology = Topology("spun", "q", {"q": svc}, NO_NETWORK, Client(request_bytes=0))
    if host_cores is not None:
        topology = topology.on_one_host(host_cores)
    return ENGINES[engine](Scenario(topology, NO_MESH), Workload(FortioLoad(100, connections=1)), Horizon(2.0, 0.5),
                           1, 0)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("host_cores, latency_ms", [(None, WORK_MS + RESUME_MS * (1 - SHARE)),
                                                      (2.0, WORK_MS + RESUME_MS * (1 - SHARE)),
                                                      (1.0, WORK_MS + RESUME_MS)])
def test_both_engines_book_the_spin_off_the_path_and_keep_the_cpu(engine: str, host_cores: float | None,
                                                                 latency_ms: float) -> None:
    """One connection at 100 rps: every request wakes the app. The spinning half of the wake leaves the request's
    latency (cores of its own, or a second core of the node) unless the node has one core, which the spinning
    thread takes first; the app's CPU per request is its work and its whole wake in every case."""
    result = _app(engine, SHARE, host_cores)
    assert np.allclose(result.latencies, latency_ms * MS, rtol=1e-9, atol=1e-12)
    usage = result.usage["q/app"]
    assert usage.cpu_seconds / usage.jobs == pytest.approx((WORK_MS + RESUME_MS) * MS, rel=1e-9)
    whole = _app(engine, 0.0, host_cores)
    assert np.allclose(whole.latencies, (WORK_MS + RESUME_MS) * MS, rtol=1e-9, atol=1e-12)


def test_the_share_is_read_written_and_bounded() -> None:
    data: dict[str, Any] = {"schema": "meshsim/mesh/v1", "name": "m",
                            "proxy": {"passes": dict.fromkeys(KINDS, {"family": "deterministic", "value_ms": 0.1}),
                                      "wakeup": {"resume_cpu_ms": 0.05, "tau_ms": 1.0, "spin_share": 0.45,
                                                 "spin_source": "measured"}}}
    wake = mesh_from_data(data, "m.yaml").proxy.wakeup
    assert wake is not None and wake.spin_share == 0.45 and wake.to_spec()["spin_share"] == 0.45
    assert "spin_share" not in WakeUp(delay=0.0, tau=1.0).to_spec()  # no spinning threads: nothing written
    data["proxy"]["wakeup"]["spin_share"] = 1.5
    with pytest.raises(ModelError, match=r"m.yaml: proxy.wakeup.spin_share"):
        mesh_from_data(data, "m.yaml")


SPLIT = Path(__file__).resolve().parent.parent / "measurements" / "lab-go-spinning-2026-11-29" / "split.txt"


def test_the_replays_forwarding_apps_carry_the_share_their_source_measured() -> None:
    """The share is the mean over the folder's rounds of 1 - the wake CPU with one P / with the default (split.txt,
    the replay's own splits of each round's baselines)."""
    per_wake = {(g, r): float(ms) for g, r, ms in
                re.findall(r"GOMAXPROCS=(\S+) round (\d): .*\+ ([\d.]+) ms per wake", SPLIT.read_text())}
    rounds = sorted({r for _, r in per_wake})
    assert len(rounds) == 3 and len(per_wake) == 6
    measured = sum(1 - per_wake[("1", r)] / per_wake[("default", r)] for r in rounds) / len(rounds)
    block = WakeSplit(0.13, 0.136, "s", ("a", "b")).wakeup_block()
    assert block["spin_share"] == SPIN_SHARE == pytest.approx(measured, abs=0.005)
    assert "lab-go-spinning-2026-11-29" in str(block["spin_source"])
