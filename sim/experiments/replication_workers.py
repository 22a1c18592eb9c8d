"""A prediction's replications, in this process or in forked workers, handed back in the order of their indices.

Workers receive the prediction's scenario, workload, horizon, seed and engine once, when they are forked (nothing is
pickled per task): a task is a replication index, and a worker's replications all run on the same objects, so the
compiled engine builds its setup once per worker (sim/fast/fast_setup.py). While the caller decides whether the
replications so far are enough, the workers already run the batch it would ask for next; a batch it does not ask
for is dropped, so the results and the stopping rule are those of running one batch after the other. Workers end
with the process that forked them, even when it is killed with SIGKILL (meshsim.parent_death).
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import Future, ProcessPoolExecutor

from meshsim.interrupts import interrupts_deferred
from meshsim.parent_death import Parent, start_worker
from meshsim.scenario import Scenario
from meshsim.workload import Workload
from meshsim.sim.engine.replication_result import Horizon, ReplicationResult
from meshsim.sim.engine_choice import run_one_replication

Job = tuple[Scenario, Workload, Horizon, int, str]  # scenario, workload, horizon, seed, engine ('fast' or 'simpy')

_WORKER_JOB: list[Job] = []  # in a forked worker: the prediction it runs replications of


def _start_worker(parent: Parent, job: Job) -> None:
    """Initializer of a forked worker: it ends with ``parent``, takes its interrupts as meshsim.parent_death says,
    and serves the prediction ``job``."""
    start_worker(parent)
    serve_in_this_process(job)


def serve_in_this_process(job: Job) -> None:
    _WORKER_JOB[:] = [job]


def run_served_replication(replication: int) -> ReplicationResult:
    return _run(_WORKER_JOB[0], replication)


def _run(job: Job, replication: int) -> ReplicationResult:
    scenario, workload, horizon, seed, engine = job
    return run_one_replication((scenario, workload, horizon, seed, replication, engine))


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel what is queued and terminate the worker processes now (Python < 3.14 has no public call for it)."""
    results = getattr(pool, "_result_queue", None)  # shutting down lets go of it: taken first
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:
        terminate()
        _close_writer(results)
        return
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.terminate()
    deadline = time.monotonic() + 5.0
    for worker in workers:
        worker.join(timeout=max(deadline - time.monotonic(), 0.0))
        # the pool's manager thread joins its workers too: when it reaps one first, our join returns before that
        # thread records the exit code, and the worker would look alive for a moment to the caller
        while worker.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.001)
    _close_writer(results)


def _close_writer(results: object) -> None:
    """A worker terminated while it wrote its result leaves half a message in the results pipe, and the pool's
    manager thread reading it waits for the rest for ever -- and the interpreter's exit joins that thread: the
    command finishes its work and never exits. This process holds the pipe's one other write end (its workers
    inherited it); closed once they are gone, the read ends instead (EOF: the manager marks the pool broken)."""
    writer = getattr(results, "_writer", None)
    if writer is not None and not writer.closed:
        writer.close()


class ReplicationRunner:
    """Runs replications of one job: in this process (``processes`` 1) or in that many forked workers."""

    def __init__(self, job: Job, processes: int) -> None:
        self.job = job
        self.pool: ProcessPoolExecutor | None = None
        if processes > 1:
            self.pool = ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("fork"),
                                            initializer=_start_worker, initargs=(Parent.here(), job))
        self.futures: dict[int, Future] = {}

    def batch(self, start: int, count: int, ahead: int = 0) -> list[ReplicationResult]:
        """Replications ``start`` .. ``start + count - 1``; workers start the ``ahead`` next ones meanwhile."""
        if self.pool is None:
            return [_run(self.job, r) for r in range(start, start + count)]
        with interrupts_deferred():  # submitting forks the workers: an interrupt inside a fork would be lost
            for r in range(start, start + count + ahead):
                if r not in self.futures:
                    self.futures[r] = self.pool.submit(run_served_replication, r)
        return [self.futures.pop(r).result() for r in range(start, start + count)]

    def close(self, interrupted: bool = False) -> None:
        """Release the workers; replications still running ahead are not needed (nor are any on an interrupt):
        the workers are terminated rather than waited for."""
        pool, self.pool = self.pool, None
        if pool is None:
            return
        if interrupted or any(not f.done() for f in self.futures.values()):
            stop_workers(pool)
        else:
            pool.shutdown()
        self.futures.clear()
