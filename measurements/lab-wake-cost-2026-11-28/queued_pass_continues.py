"""Experiment (not in the engines): a pass that queued behind another on its worker runs on the core the worker
holds, instead of waiting for a core again. The continuation starts when the worker frees; if another burst was
already booked on that core after it, the core's tail is pushed by the continuation's CPU (CPU is conserved, the
waiter already booked keeps its time). SimPy engine, the saturated chain3 runs.

Usage (from this folder): python queued_pass_continues.py MODEL BASELINES_FOLDER RUN_FOLDER [--continue]"""

import sys

from meshsim.calibrate.validation.compare import validate_runs
from meshsim.calibrate.validation.validate_options import ValidateOptions
from meshsim.sim.engine import stations
from meshsim.sim.engine_choice import EngineChoice
from meshsim.sim.experiments import predict

predict.choose_engine = lambda requested, scenario, workload, series=False: EngineChoice("simpy")


def run_on_held_core(node: stations.NodeCores, start: float, work: float) -> float:
    if work <= 0.0:
        return start
    core = next((k for k, ends in enumerate(node.ends) if start in ends), None)  # the core its last burst ended on
    if core is None or node.last[core] <= start:
        return node.run(start, work)
    work *= node.slowdown
    if node.recording:
        node.busy += work
    tail = node.last[core]  # a waiter already booked there: the core's tail moves by the continuation's CPU
    node.starts[core].append(tail)
    node.ends[core].append(tail + work)
    node.last[core] = tail + work
    return start + work


book = stations.Station._book


def continuing_book(self, now, work, server, post, timed):
    if server is None:
        server = 0 if self.servers == 1 else self.pick(now)
    free = self.free_at[server]
    if self.node is None or self.quota is not None or free <= now:
        return book(self, now, work, server, post, timed)
    finish = run_on_held_core(self.node, free, work)
    self.free_at[server] = run_on_held_core(self.node, finish, post) if post > 0 else finish
    self.last_start = free
    if self.recording:
        self.busy[server] += work + post
        self.jobs += 1
        if timed:
            self.waited += free - now
            self.worked += work
            self.cpu_waited += finish - free - work
    return finish


if "--continue" in sys.argv:
    stations.Station._book = continuing_book
model, baselines, run = sys.argv[1:4]
validation = validate_runs(ValidateOptions(model=model, run_dirs=(baselines, run), replications=2,
                                           sim_duration_s=3.0, processes=1))
for c in validation.comparisons:
    if c.role != "topology":
        print(f"{c.run_id}: rps {c.achieved_rps.measured:.0f} measured, {c.achieved_rps.predicted:.0f} predicted; "
              f"proxy worker queueing {c.breakdown_ms.get('proxy worker queueing', 0):.2f} ms per request")
