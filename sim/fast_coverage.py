"""Which engine runs a request: the compiled one when it covers every mechanism of the scenario and workload, else
the SimPy reference engine, with one line naming the first mechanism the compiled engine lacks.

Kept free of numba and of the compiled modules, so that choosing costs no import.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshsim.errors import FieldError
from meshsim.scenario import Scenario
from meshsim.workload import Workload

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

    Today it covers every one: each scenario mechanism is lowered (sim/fast_program.py), every load generator --
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


def run_on_chosen_engine(scenario: Scenario, workload: Workload, horizon, seed: int, replication: int,
                         engine: str | None = None):
    """One replication on the engine :func:`choose_engine` picks (for simulation-based fits and probes)."""
    if choose_engine(engine, scenario, workload).name == "fast":
        from meshsim.sim.fast_engine import run_fast_replication  # loaded only when the fast engine runs

        return run_fast_replication(scenario, workload, horizon, seed, replication)
    from meshsim.sim.engine import run_replication

    return run_replication(scenario, workload, horizon, seed, replication)


def compiled_code_cached() -> bool:
    """Whether the compiled loop is ready to load (else the first fast run builds it, which takes minutes and
    deserves a line of progress). sim/fast_native.py knows where it lives; it imports no numba."""
    from meshsim.sim.fast_native import loop_on_disk

    return loop_on_disk()
