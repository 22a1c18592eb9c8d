"""Each component's time waiting for its node's cores (``cpu_wait_ms_per_request``): what a lab run's kernel
run-queue delay is compared with. A closed loop of N users on one core keeps it busy: each request waits for the
other N - 1 requests' work, on both engines alike."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from meshsim.distributions import Deterministic
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.experiments.predict import predict
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.workload import SequentialLoad, Workload
from simkit import ZERO, plain, tandem_topology

WORK = (0.4e-3, 0.3e-3)


def _lab(cores: float | None):
    """The tandem with workers to spare in each app (no request waits for a worker), on ``cores`` host cores or
    (None) each app on cores of its own."""
    tandem = tandem_topology([Deterministic(w) for w in WORK])
    topology = replace(tandem, services={n: replace(s, cores=8) for n, s in tandem.services.items()})
    return plain(topology if cores is None else topology.on_one_host(cores))


@pytest.mark.parametrize("users", [1, 2, 3])
def test_users_on_one_core_wait_for_each_others_work_on_both_engines(users: int) -> None:
    workload, horizon = Workload(SequentialLoad(ZERO, users)), Horizon(1.0, 0.1, 0.5)
    simpy = run_replication(_lab(1.0), workload, horizon, 3, 0)
    fast = run_fast_replication(_lab(1.0), workload, horizon, 3, 0)
    np.testing.assert_allclose(fast.latencies, simpy.latencies, rtol=0, atol=1e-9)
    waits = {c: u.cpu_waited / simpy.started for c, u in simpy.usage.items()}
    assert waits == pytest.approx({c: u.cpu_waited / fast.started for c, u in fast.usage.items()}, abs=1e-12)
    # the core never idles: a request takes users x its work, of which (users - 1) x work waiting for the core
    # (up to the requests the window cuts at its edges)
    assert sum(waits.values()) == pytest.approx((users - 1) * sum(WORK), rel=0.02, abs=1e-9)
    assert sum(waits.values()) == pytest.approx(simpy.breakdown["node CPU and quota waits"], rel=1e-9, abs=1e-12)


def test_the_prediction_reports_each_components_core_wait() -> None:
    lab = predict(_lab(1.0).topology, "none", load="sequential", connections=2, think_ms=0.0, duration_s=0.5,
                  replications=2, engine="simpy").to_dict()["cpu_wait_ms_per_request"]
    assert set(lab) == {"q1/app", "q2/app"} and sum(lab.values()) == pytest.approx(0.7, rel=0.03)
    apart = predict(_lab(None).topology, "none", load="sequential", connections=2, think_ms=0.0, duration_s=0.5,
                    replications=2, engine="simpy").to_dict()["cpu_wait_ms_per_request"]
    assert apart == {"q1/app": 0.0, "q2/app": 0.0}  # a core of its own each: nothing waits for a core
