"""Benchmark (not collected by pytest): the compiled engine against the SimPy engine and a naive SimPy model.

    .venv/bin/python tests/bench_engine.py [--rps 3500] [--requests 50000] [--rounds 3] [--compile]

Measured side by side in one run, on the same machine:

- simulated requests and station visits per second of engine time (CPU seconds of this process) for the fast
  (numba, native module) engine, the SimPy engine, and a naive hand-written SimPy model of the same chain (chain3 on Istio:
  every station a ``simpy.Resource``, every visit a request/timeout/release, Poisson arrivals; 50,000 requests);
- the fast engine's default prediction of chain3 at 3500 rps: replications, engine seconds, the p99's 95 % CI
  half-width (target <= 5 % in <= 0.5 s of engine time);
- ``meshsim predict --topology chain3 --rps 3500`` as a fresh process (wall seconds of the whole process), with
  the loop from the native module (sim/fast/fast_native.py; no numba import) and from numba's JIT cache
  (MESHSIM_NATIVE_LOOP=0), alternately; neither compiles again (the modules' bytecode cached, as installed);
- peak resident memory of a fresh process predicting chain10 at 10,000 rps (its own VmHWM, and its largest
  replication worker's);
- with ``--compile``: the first-run build cost, in a fresh process with an empty cache directory (NUMBA_CACHE_DIR,
  where the native module is built too).

Station visits count the engine's own bookings: app computes, proxy passes and node-CPU bursts as in sim/experiments/run_cost.py
(``path_cost``), the same number for all three (the naive model books exactly those visits).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import simpy

from meshsim.request import PredictOptions, build_request
from meshsim.sim.experiments.run_cost import path_cost
from meshsim.sim.engine.simpy_replication import run_replication
from meshsim.sim.fast.fast_engine import run_fast_replication
from meshsim.sim.experiments.predict import horizon_for, predict_options


def naive_chain(rps: float, requests: int, seed: int = 1) -> tuple[float, int]:
    """A naive SimPy model of chain3 on Istio: returns (CPU seconds, station visits). Each service: its sidecar
    (2 shared workers) and its app (2 cores); the client's sidecar; lognormal pass and compute times of the
    shipped models' means, fixed network delays. Written as a user would, with simpy.Resource."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    client_sidecar = simpy.Resource(env, 2)
    sidecars = [simpy.Resource(env, 2) for _ in range(3)]
    apps = [simpy.Resource(env, 2) for _ in range(3)]
    visits = [0]
    sigma = np.sqrt(np.log(1 + 0.6 ** 2))

    def work(mean: float) -> float:
        return float(rng.lognormal(np.log(mean) - sigma ** 2 / 2, sigma))

    def visit(res: simpy.Resource, mean: float):
        visits[0] += 1
        with res.request() as req:
            yield req
            yield env.timeout(work(mean))

    def service(i: int):
        yield env.timeout(0.0001)  # network hop
        yield from visit(sidecars[i], 0.1e-3)
        yield from visit(apps[i], 0.04e-3)
        if i < 2:
            yield from visit(sidecars[i], 0.1e-3)
            yield from service(i + 1)
            yield from visit(sidecars[i], 0.1e-3)
            yield from visit(apps[i], 0.04e-3)
        yield from visit(sidecars[i], 0.1e-3)
        yield env.timeout(0.0001)

    def request():
        yield from visit(client_sidecar, 0.1e-3)
        yield from service(0)
        yield from visit(client_sidecar, 0.1e-3)

    def arrivals():
        for _ in range(requests):
            yield env.timeout(float(rng.exponential(1 / rps)))
            env.process(request())

    env.process(arrivals())
    started = time.process_time()
    env.run()
    return time.process_time() - started, visits[0]


def engine_rate(run, rps: float, requests: int) -> tuple[float, int]:
    """CPU seconds of ``run`` simulating about ``requests`` requests of chain3/istio at ``rps``, and the requests."""
    request = build_request(PredictOptions(topology="chain3", mesh="istio", rps=rps, duration_s=requests / rps))
    horizon = horizon_for(request.workload.load, request.settings)
    started = time.process_time()
    result = run(request.scenario, request.workload, horizon, 1, 0)
    return time.process_time() - started, result.started


# Fresh processes read their modules' bytecode from a cache, as an installed meshsim does (pip compiles it): run
# from the checkout with PYTHONDONTWRITEBYTECODE set, every process would compile ~60 modules first (0.1-0.2 s).
BYTECODE = tempfile.mkdtemp(prefix="meshsim-bench-pycache-")
atexit.register(shutil.rmtree, BYTECODE, True)


def in_fresh_interpreter(code: str, env: dict | None = None) -> dict:
    """A fresh interpreter running ``code``: its report, with ``process_s`` the whole process's wall time (start-up
    and exit included), measured from here."""
    started = time.perf_counter()
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**base, "PYTHONPYCACHEPREFIX": BYTECODE, **(env or {})})
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "process_s": time.perf_counter() - started}


FRESH_PREDICT = r"""
import json, resource, sys, time
t = time.perf_counter()
from meshsim.cli import main
import io, contextlib
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    main(sys.argv[1:] if len(sys.argv) > 1 else ["predict", "--topology", "{topology}", "--rps", "{rps}", "--json"])
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across execve, so this process's would hold the peak of the benchmark
# that started it; its replication workers (forked, no exec) report theirs through RUSAGE_CHILDREN
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({{"wall_s": time.perf_counter() - t,
                   "peak_mb": hwm / 1024,
                   "worker_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                   "engine": json.loads(buf.getvalue())["inputs"]["engine"],
                   "numba_imported": "numba" in sys.modules}}))
"""


def _cpu_with_children() -> float:
    """CPU seconds of this process and of its finished children (a long prediction forks replication workers)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rps", type=float, default=3500.0)
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the three engines")
    parser.add_argument("--compile", action="store_true", help="also time the first compile (empty numba cache)")
    args = parser.parse_args()
    visits = path_cost(build_request(PredictOptions(topology="chain3", mesh="istio", rps=args.rps)).scenario).visits
    engine_rate(run_fast_replication, args.rps, 500)  # load the compiled code outside the timing
    rounds = {name: [] for name in ("fast engine", "simpy engine", "naive simpy model")}
    for _ in range(args.rounds):  # interleaved rounds: a busy spell of the shared machine hits all three alike
        for name, run, n in (("fast engine", run_fast_replication, args.requests),
                             ("simpy engine", run_replication, args.requests // 5)):
            cpu, done = engine_rate(run, args.rps, n)
            rounds[name].append(done / cpu)
        cpu, naive_visits = naive_chain(args.rps, args.requests)
        rounds["naive simpy model"].append(args.requests / cpu)
    per_request = {"fast engine": visits, "simpy engine": visits, "naive simpy model": naive_visits / args.requests}
    naive = np.array(rounds["naive simpy model"])
    print(f"chain3/istio at {args.rps:g} rps, {visits:.0f} station visits per request (sim/experiments/run_cost.py path_cost); "
          f"medians of {args.rounds} interleaved rounds, the ratio per round")
    for name, rates in rounds.items():
        req_s = float(np.median(rates))
        print(f"  {name:18s} {req_s:12,.0f} requests/s  {req_s * per_request[name]:14,.0f} visits/s  "
              f"{float(np.median(np.array(rates) / naive)):7.1f} x naive")
    started = _cpu_with_children()
    wall = time.perf_counter()
    prediction = predict_options(PredictOptions(topology="chain3", mesh="istio", rps=args.rps, saturation=False))
    p99 = prediction.latency["p99"]
    print(f"fast prediction: {prediction.replications} replications, {prediction.requests} requests, "
          f"{_cpu_with_children() - started:.3f} s engine CPU ({time.perf_counter() - wall:.3f} s wall), "
          f"p99 {p99.value * 1e3:.3f} ms +- {100 * p99.half_width / p99.value:.1f} %")
    command = FRESH_PREDICT.format(topology="chain3", rps=args.rps)
    native, jit = [], []
    in_fresh_interpreter(command)  # writes the bytecode cache; not counted
    for _ in range(args.rounds):  # the native module and numba's JIT cache, alternately
        native.append(in_fresh_interpreter(command))
        jit.append(in_fresh_interpreter(command, {"MESHSIM_NATIVE_LOOP": "0"}))
    for label, runs in (("the native module", native), ("numba's JIT cache", jit)):
        print(f"fresh `meshsim predict --topology chain3 --rps {args.rps:g}`, loop from {label}: "
              f"{float(np.median([r['process_s'] for r in runs])):.2f} s for the whole process "
              f"({runs[0]['engine']}, numba imported: {runs[0]['numba_imported']}; medians of {args.rounds})")
    big = in_fresh_interpreter(FRESH_PREDICT.format(topology="chain10", rps=10000))
    print(f"fresh chain10 at 10,000 rps: peak resident memory {big['peak_mb']:.0f} MB (VmHWM), its largest "
          f"replication worker {big['worker_peak_mb']:.0f} MB, {big['wall_s']:.2f} s wall")
    if args.compile:
        with tempfile.TemporaryDirectory() as cache:  # numba's cache and the native module live there
            first = in_fresh_interpreter(command, {"NUMBA_CACHE_DIR": cache})
            again = in_fresh_interpreter(command, {"NUMBA_CACHE_DIR": cache})
        print(f"first run with an empty cache (numba compiles, the native module is built): "
              f"{first['process_s']:.1f} s; the next fresh process: {again['process_s']:.2f} s")


if __name__ == "__main__":
    main()
