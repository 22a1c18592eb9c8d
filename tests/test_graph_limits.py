"""Graphs at the documented limits (issue 29, group 2): 1000 services in a chain, a fan-out and a 999-way parallel
fan-out run on both engines within the time limit and bounded memory, or are refused with one line naming the
limit; 1001 services are refused; the compiled loop never writes past a table (the 999-way parallel fan-out
segfaulted, and so did fortio with 5000 connections), and its guard turns a table it did not size into one error.

The runs are processes of their own (a crash must fail the test, not the test run) with short settings: a few
requests, two replications, seconds each."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import simpy
import yaml
from hypothesis import given, settings, strategies as st

from meshsim.cli import main
from meshsim.errors import ModelError
from meshsim.topology import Call, Compute, Parallel, Service, callees_first
from meshsim.distributions import Deterministic
from meshsim.sim.engine.nested_calls import nested

NETWORK = {"loopback": 0.01, "same_node": 0.05, "cross_node": 0.2, "bandwidth_gbps": 10}
# Peak memory a prediction may take: the interpreter with numpy, SimPy and the compiled loop (~50-60 MB for chain3),
# plus, per app replica and proxy, its random streams (~6, a 16 KB batch each: ~100 KB) and its objects, with room
# to spare (x2.5). It scales with the graph; chain1000 took 1.69 GB before it crashed, over 3 times this bound.
BASE_MB, MB_PER_INSTANCE = 120.0, 0.25
# The time limit these short runs get (the default); their replications take seconds. The search is off in them:
# it fills the time left with probes (tests/test_run_cost.py, and the chain1000 test below, check its rules)
TIME_LIMIT_S = 60.0


def write_topology(folder: Path, name: str, entry_handler: list, leaves: int) -> Path:
    services = {"s0": {"handler": [{"compute": 0.05}, *entry_handler]},
                **{f"s{i}": {"handler": [{"compute": 0.05}]} for i in range(1, leaves + 1)}}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "entry": "s0", "services": services, "network": NETWORK}))
    return path


def fan_out(folder: Path, leaves: int) -> Path:
    """The entry calls ``leaves`` services one after another."""
    return write_topology(folder, f"fanout{leaves}", [{"call": f"s{i}"} for i in range(1, leaves + 1)], leaves)


def parallel_fan_out(folder: Path, leaves: int) -> Path:
    """The entry calls ``leaves`` services at once and waits for all."""
    return write_topology(folder, f"parallel{leaves}", [{"parallel": [f"s{i}" for i in range(1, leaves + 1)]}],
                          leaves)


MEASURED = """
import json, sys
from meshsim.cli import main
from meshsim.request import PredictOptions
from meshsim.sim.experiments.predict import predict_options
if sys.argv[1] == "cli":
    code, out = main(sys.argv[2:]), None
else:
    code, out = 0, predict_options(PredictOptions(**json.loads(sys.argv[2]))).to_dict()
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across execve, so this process's would be at least the pytest
# worker's that started it (773 MB late in a full run: all six runs measured exactly that)
hwm_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"code": code, "out": out, "peak_mb": hwm_kb / 1024}), file=sys.stderr)
"""


def measured(*args: str) -> tuple[dict, float, str]:
    """A prediction in a process of its own (``cli ARGS``: `meshsim ARGS`; ``options JSON``: predict_options), its
    result (the CLI's --json on stdout), its peak resident memory (its own high-water mark) and its stderr."""
    run = subprocess.run([sys.executable, "-c", MEASURED, *args], capture_output=True, text=True, timeout=600)
    *lines, last = run.stderr.strip().splitlines() or [""]
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr[-3000:]
    report = json.loads(last)
    assert report["code"] == 0, run.stderr[-3000:]
    return report["out"] or json.loads(run.stdout), report["peak_mb"], "\n".join(lines)


def predict_cli(*args: str) -> dict:
    return measured("cli", "predict", *args, "--processes", "1", "--json")[0]


@pytest.mark.parametrize("engine", ["fast", "simpy"])
@pytest.mark.parametrize("graph", ["chain1000", "fanout999", "parallel999"])
def test_graphs_at_the_limit_run_within_the_time_limit_and_bounded_memory(tmp_path: Path, graph: str,
                                                                          engine: str) -> None:
    topology = {"chain1000": lambda: "chain1000", "fanout999": lambda: str(fan_out(tmp_path, 999)),
                "parallel999": lambda: str(parallel_fan_out(tmp_path, 999))}[graph]()
    options = {"topology": topology, "rps": 5.0, "duration_s": 0.5, "replications": 2, "processes": 1,
               "engine": engine, "time_limit_s": TIME_LIMIT_S, "saturation": False}
    result, peak_mb, err = measured("options", json.dumps(options))
    assert result["inputs"]["engine"].startswith(engine) and result["replications"] == 2
    assert result["latency_ms"]["p50"] > 0 and result["requests"] > 0
    assert result["wall_s"] <= TIME_LIMIT_S
    instances = 1000 + 1001  # the apps, their sidecars and the client's
    assert peak_mb < BASE_MB + MB_PER_INSTANCE * instances, err
    if engine == "fast":  # its wire bytes come from the call graph's 1000 services (its recursion died there)
        assert result["wire_bytes_per_request"]["request"] > 999 * 200


def test_chain1000s_saturation_search_is_costed_like_a_run_and_stops_within_the_budget() -> None:
    """Near its capacity a probe of chain1000 holds thousands of requests 2,000 frames deep (~3 GB): the search
    does not start it, says why, and the prediction ends within its time limit."""
    result = predict_cli("--topology", "chain1000", "--rps", "5", "--duration", "0.5", "--replications", "2",
                         "--time-limit", str(TIME_LIMIT_S))
    stopped = [w for w in result["warnings"] if w.startswith("the saturation search stopped: its next probe")]
    assert stopped and "MB, above the budget" in stopped[0], result["warnings"]
    assert result["saturation_rps"] > 0 and result["wall_s"] <= TIME_LIMIT_S


def test_the_first_size_past_the_limit_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    topology = parallel_fan_out(tmp_path, 1000)  # 1001 services
    for args, needle in (
            (["--topology", "chain1001"], "chain1001: a chain has 1 to 1000 services"),
            (["--topology", str(topology)], "services: 1001 services, at most 1000 (meshsim/limits.py says why)")):
        assert main(["predict", *args, "--rps", "5", "--replications", "2", "--processes", "1"]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1 and "Traceback" not in err, err


@pytest.mark.parametrize("load", [["--load", "fortio", "--connections", "5000", "--rps", "5000"],
                                  ["--load", "sequential", "--connections", "5000", "--think", "1000"],
                                  ["--load", "wrk2", "--connections", "5000", "--threads", "2", "--rps", "5000"]])
def test_every_connection_starting_at_once_fits_the_compiled_loop(load: list[str]) -> None:
    """fortio's timed run pushes every thread at once, users and wrk2 connections start together: 5000 of them
    overran the 4096-slot heap (a segfault, a double free). The sequential users' run answers nothing in its window
    (each thinks 1 s): the saturation search has no rate to start from and says so instead of dividing by 0."""
    result = predict_cli("--topology", "single", "--mesh", "none", *load, "--duration", "1", "--replications", "2",
                         "--engine", "fast")
    assert result["inputs"]["engine"].startswith("fast")


GUARDED = """
import sys
from meshsim.request import PredictOptions, build_request
from meshsim.sim.fast import fast_kernels as K
from meshsim.sim.engine.replication_result import Horizon
from meshsim.sim.fast.fast_engine import EngineOverflow, run_on_setup
from meshsim.sim.fast.fast_setup import FastSetup
request = build_request(PredictOptions(topology=sys.argv[1], mesh="none", rps=200.0))
setup = FastSetup(request.scenario, request.workload, Horizon(0.5, 0.0, 1.0))
flags = setup._pristine[0][setup.layout.I[2 * K.R_FLAGS]:][:K.FLAGS]
flags[K.G_TOKEN_MARGIN] = flags[K.G_HEAP_MARGIN] = 1  # room for one token per event: a fork takes 999
try:
    run_on_setup(setup, 1, 0)
except EngineOverflow as error:
    print(error)
"""


def test_a_table_the_loop_did_not_size_for_is_one_error_not_a_write_past_it(tmp_path: Path) -> None:
    """numba checks no bounds: with the room per event sabotaged (1 token, 1 heap slot), 200 requests a second of a
    999-way fork must run out of tokens or heap; the loop must stop there with EngineOverflow."""
    run = subprocess.run([sys.executable, "-c", GUARDED, str(parallel_fan_out(tmp_path, 999))], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("the compiled engine's tables ran out of room") and run.stdout.count("\n") == 1


def test_a_probe_still_running_at_the_deadline_is_given_up() -> None:
    """The clock lets a probe start when the cost model says it ends in time; when it runs longer (here the model
    is told the engine is infinitely fast), the compiled engine gives it up at the deadline."""
    from meshsim.request import PredictOptions, build_request
    from meshsim.sim.experiments.run_cost import EngineSpeed
    from meshsim.sim.engine.replication_result import Horizon
    from meshsim.sim.experiments.saturation_search import ProbeClock
    from meshsim.workload import OpenLoad, Workload

    request = build_request(PredictOptions(topology="chain20", rps=10.0))
    probe = Workload(OpenLoad(3000.0, 1000))  # 3000 rps for 120 s: ~50e6 visits, about a minute
    clock = ProbeClock(time.perf_counter() + 1.0, EngineSpeed(math.inf, 0.0, 0.0), max_events=1e12)
    started = time.perf_counter()
    assert clock.run((request.scenario, probe, Horizon(120.0, 24.0, 5.0), 1, 0, "fast")) is None
    assert time.perf_counter() - started < 30  # a hang guard: the probe would run ~a minute
    assert clock.stopped == "its probe was given up at the time limit"


@st.composite
def call_graphs(draw) -> dict[str, Service]:
    """Acyclic call graphs: service i calls only services after it (calls, forks)."""
    n = draw(st.integers(1, 12))
    services = {}
    for i in range(n):
        later = [f"s{j}" for j in range(i + 1, n)]
        callees = draw(st.lists(st.sampled_from(later), max_size=4, unique=True)) if later else []
        steps: list = [Compute(Deterministic(0.001))]
        if len(callees) >= 2 and draw(st.booleans()):
            steps.append(Parallel(tuple(callees)))
        else:
            steps += [Call(c) for c in callees]
        services[f"s{i}"] = Service(f"s{i}", tuple(steps))
    return services


@settings(max_examples=100, deadline=None)
@given(call_graphs())
def test_callees_come_first_and_the_call_depth_is_the_longest_path(services: dict[str, Service]) -> None:
    from meshsim.topology import Network, Topology

    order = callees_first(services)
    assert sorted(order) == sorted(services)
    position = {name: i for i, name in enumerate(order)}
    assert all(position[c] < position[name] for name, svc in services.items() for c in svc.callees())
    zero = Deterministic(0.0)
    topology = Topology("g", "s0", services, Network(zero, zero, zero, 1e9))
    depth = topology.call_depth()
    longest = {}
    for name in reversed(list(services)):  # s_i calls only later services: from the last to the first
        longest[name] = 1 + max((longest[c] for c in services[name].callees()), default=0)
    assert depth == longest["s0"]


def test_a_cycle_is_named_without_recursion() -> None:
    services = {f"s{i}": Service(f"s{i}", (Call(f"s{(i + 1) % 5000}"),)) for i in range(5000)}
    with pytest.raises(ModelError, match=r"t.yaml: services: call graph has a cycle: s0 -> s1 -> .* -> s4999 -> s0"):
        callees_first(services, "t.yaml:")


def test_nested_calls_see_the_same_values_and_errors_as_yield_from() -> None:
    """system.nested runs a request's calls on an explicit stack: a call's return value, an error it raises and an
    event's failure reach the generators as through ``yield from``."""
    env = simpy.Environment()
    seen: list = []

    def leaf(fail: bool):
        yield env.timeout(1)
        if fail:
            raise ValueError("leaf")
        return "answer"

    def failing_event():
        event = env.event()
        event.fail(KeyError("event"))
        yield event

    def caller():
        seen.append((yield leaf(False)))
        try:
            yield leaf(True)
        except ValueError as error:
            seen.append(str(error))
        try:
            yield failing_event()
        except KeyError as error:
            seen.append(error.args[0])
        seen.append(env.now)

    env.process(nested(caller()))
    env.run()
    assert seen == ["answer", "leaf", "event", 2]
