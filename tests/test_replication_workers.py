"""A prediction's replications in forked workers (sim/experiments/replication_workers.py): the same results as in one
process, whatever ran ahead; a worker reuses one compiled-engine setup; closing stops what runs ahead."""

from __future__ import annotations

import pickle
import time
from dataclasses import replace

import numpy as np
import pytest

from meshsim.request import PredictOptions, PredictRequest, build_request
from meshsim.sim.experiments import replication_workers
from meshsim.sim.fast.fast_engine import fast_setup, load_compiled
from meshsim.sim.experiments.predict import horizon_for, run_prediction
from meshsim.sim.experiments.replication_workers import ReplicationRunner

OPTIONS = dict(topology="chain3", mesh="istio", rps=2000, duration_s=0.3, saturation=False)


@pytest.fixture(scope="module", autouse=True)
def compiled() -> None:
    """The workers inherit the compiled loop: load it before they are forked."""
    load_compiled()


def _job() -> tuple:
    request = build_request(PredictOptions(**OPTIONS))
    horizon = horizon_for(request.workload.load, request.settings)
    return request.scenario, request.workload, horizon, 5, "fast"


def test_workers_running_ahead_give_the_replications_of_one_process() -> None:
    job = _job()
    alone, workers = ReplicationRunner(job, 1), ReplicationRunner(job, 2)
    try:
        for start, count, ahead in ((0, 3, 2), (3, 2, 2), (5, 1, 0)):
            expected = alone.batch(start, count)
            got = workers.batch(start, count, ahead)
            assert [pickle.dumps(r.latencies) for r in got] == [pickle.dumps(r.latencies) for r in expected]
            assert [r.usage for r in got] == [r.usage for r in expected]
    finally:
        workers.close()
        alone.close()


def test_a_worker_builds_the_setup_once() -> None:
    job = _job()
    # what a forked worker's initializer does with the job, here in this process (the rest of it, its signals and
    # its parent's death, belongs in a child)
    replication_workers.serve_in_this_process(job)
    first = replication_workers.run_served_replication(0)
    setup = fast_setup(*job[:3])
    second = replication_workers.run_served_replication(1)
    assert fast_setup(*job[:3]) is setup
    assert not np.array_equal(first.latencies[:20], second.latencies[:20])


def test_closing_stops_the_replications_running_ahead() -> None:
    job = _job()
    runner = ReplicationRunner(job, 2)
    pool = runner.pool
    runner.batch(0, 1, ahead=40)  # far more ahead than can finish before close
    workers = list(pool._processes.values())
    started = time.perf_counter()
    runner.close()
    assert runner.pool is None and time.perf_counter() - started < 5  # generous: it does not wait for 40 runs
    assert not any(worker.is_alive() for worker in workers)


HALF_WRITTEN = r"""
import multiprocessing, os, struct, sys, time
from concurrent.futures import ProcessPoolExecutor
from meshsim.sim.experiments.replication_workers import stop_workers

def half_a_result(_):
    # what a worker terminated in the middle of sending its result leaves: a message's header and part of it
    os.write(POOL[0]._result_queue._writer.fileno(), struct.pack("!i", 1 << 20) + b"x" * 100)
    time.sleep(60)

POOL = [ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork"))]
POOL[0].submit(half_a_result, 0)
time.sleep(1.0)  # the manager thread is now reading the rest of that message
stop_workers(POOL[0])
print("stopped", flush=True)
"""


def test_a_worker_stopped_while_it_sent_its_result_does_not_keep_the_process_alive() -> None:
    """A worker terminated mid-send left half a message in the results pipe; the pool's manager thread read it and
    waited for the rest for ever, and the interpreter's exit waits for that thread: a `meshsim study` once finished
    its work and never exited. The same state made on purpose: the process must end on its own."""
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", HALF_WRITTEN], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("the process did not exit within 30 s of stopping its workers")
    assert done.returncode == 0 and done.stdout.strip() == "stopped", done.stderr


def _request(processes: int, precision: float | None, replications: int = 3) -> PredictRequest:
    extra = dict(replications=replications) if precision is None else dict(precision=precision)
    request = build_request(PredictOptions(**OPTIONS, **extra, processes=processes))
    return replace(request, settings=replace(request.settings, max_replications=14))


@pytest.mark.parametrize("precision", [None, 0.05, 0.001])  # a fixed count; the precision reached; not reached
def test_a_prediction_is_the_same_in_workers_and_in_one_process(precision: float | None) -> None:
    """Two workers' prediction is one process's over the same replications. (Past the first batch the rule looks
    after each batch, of one replication in one process and of two here: where the precision decides, the two may
    stop at neighbouring counts, so the one process runs the count the workers stopped at.)"""
    two = run_prediction(_request(2, precision))
    one = run_prediction(_request(1, None, two.replications))
    assert one.replications == two.replications
    assert one.to_dict()["latency_ms"] == two.to_dict()["latency_ms"]
    assert one.to_dict()["latency_ci95_ms"] == two.to_dict()["latency_ci95_ms"]
    assert one.cpu_cores == two.cpu_cores
