"""The one place that chooses the engine and runs one replication on it.

The compiled engine (sim/fast/) runs a request when it covers every mechanism of the scenario and workload, else the
SimPy reference engine (sim/engine/) does, with one line naming the first mechanism the compiled engine lacks. Every
prediction's replications, saturation probes and simulation-based fits run through :func:`run_one_replication`.
Kept free of numba and of the compiled modules at import, so that choosing costs no import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshsim.errors import FieldError
from meshsim.progress import Progress
from meshsim.scenario import Scenario
from meshsim.workload import Workload
from meshsim.sim.engine.replication_result import Horizon, ReplicationResult

ENGINES = ("fast", "simpy")
SIMPY_ENGINE = "simpy-fcfs/1"
FAST_ENGINE = "fast-numba/1"


@dataclass(frozen=True)
class EngineChoice:
    """The engine that runs (``fast`` or ``simpy``) and, when the fast one could not, why (one line)."""

    name: str
    fallback: str = ""

    @property
    def label(self) -> str:
        """The engine's name and version as ``inputs.engine`` reports it."""
        return FAST_ENGINE if self.name == "fast" else SIMPY_ENGINE


def uncovered_mechanism(scenario: Scenario, workload: Workload, series: bool = False) -> str | None:
    """The first mechanism of the request the compiled engine does not execute (None: it covers them all);
    ``series``: a time series per window is asked for.

    Today it covers every one: each scenario mechanism is lowered (sim/fast/fast_program.py), every load generator --
    fortio, open (with a rate profile's thinning), sequential users and wrk2 -- runs in the compiled loop, and so
    does the time series' sampling. A mechanism added to the SimPy engine first is named here until the compiled
    engine has it."""
    del scenario, workload, series
    return None


def choose_engine(requested: str | None, scenario: Scenario, workload: Workload,
                  series: bool = False) -> EngineChoice:
    """``requested``: 'fast', 'simpy' or None (fast when it covers the request)."""
    if requested is not None and requested not in ENGINES:
        raise FieldError("engine", f"unknown engine {requested!r} (known: {', '.join(ENGINES)})")
    if requested == "simpy":
        return EngineChoice("simpy")
    missing = uncovered_mechanism(scenario, workload, series)
    if missing is not None:
        return EngineChoice("simpy", f"engine: simpy (the fast engine does not cover {missing})")
    return EngineChoice("fast")


def run_one_replication(args: tuple[Scenario, Workload, Horizon, int, int, str],
                        deadline: float = math.inf) -> ReplicationResult:
    """One replication on the named engine ('fast' or 'simpy'): the unit of work of predictions and probes (one
    tuple, as a process pool maps it). The compiled engine, which comes back to Python often, gives up with
    PastDeadline past ``deadline`` (a time.perf_counter() value); the SimPy engine's runs to its end."""
    *job, engine = args
    if engine == "fast":
        from meshsim.sim.fast.fast_engine import run_fast_replication  # loaded only when the fast engine runs

        return run_fast_replication(*job, deadline=deadline)
    from meshsim.sim.engine.simpy_replication import run_replication

    return run_replication(*job)


def run_on_chosen_engine(scenario: Scenario, workload: Workload, horizon: Horizon, seed: int, replication: int,
                         engine: str | None = None) -> ReplicationResult:
    """One replication on the engine :func:`choose_engine` picks (for simulation-based fits and probes)."""
    chosen = choose_engine(engine, scenario, workload).name
    return run_one_replication((scenario, workload, horizon, seed, replication, chosen))


def compiled_code_cached() -> bool:
    """Whether the compiled loop is ready to load (else the first fast run builds it, which takes minutes and
    deserves a line of progress). sim/fast/fast_native.py knows where it lives; it imports no numba."""
    from meshsim.sim.fast.fast_native import loop_on_disk

    return loop_on_disk()


COMPILING = "building the fast engine (first run only: up to four minutes; kept on disk afterwards)"


def load_compiled_engine(progress: Progress | None = None) -> None:
    """Load the compiled engine into this process now; the first time (no native module, nothing in numba's disk
    cache) it is built, which takes up to four minutes, and says so first."""
    if progress and not compiled_code_cached():
        progress(COMPILING)
    from meshsim.sim.fast.fast_engine import load_compiled  # loaded only when the fast engine runs

    load_compiled(progress)
