"""CPU per job = work + resume x wakes per job, from two runs at different wake frequencies.

A process whose worker finds work already waiting does not go back to sleep, so what a wake costs is paid per job at
a low rate and per batch at a high one. Two runs of one setup give the CPU per job at two wake frequencies; how often
a job finds the worker idle comes from the model's own replay of each run (as the proxies' wake-ups are fitted on
the model's idle gaps, ``wake_gaps``). The wakes depend on the split (a wake's CPU keeps the worker busy for the next
job), so the replays are repeated with each split until it settles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

ROUNDS = 4  # replays of both runs: the split moves by well under SETTLED by the third on the lab's runs
SETTLED = 0.02  # relative change of the resume CPU at which the split has settled


@dataclass(frozen=True)
class TwoPointSplit:
    """Work per job and CPU per wake (ms), and the wakes per job the model's replays of the two runs found."""

    work_ms: float
    resume_ms: float
    low_wakes: float
    loaded_wakes: float


# (work ms, resume ms) -> wakes per job in the model's replays of the low-rate and the loaded run (None: no replay)
WakeCounter = Callable[[float, float], "tuple[float, float] | None"]


def split_two_points(cpu_low_ms: float, cpu_loaded_ms: float, wakes_of: WakeCounter, min_spread: float,
                     what: str) -> TwoPointSplit | str:
    """The split that makes both replays burn their run's measured CPU per job, or why none does (``what`` names
    the process and its jobs in the reason, e.g. 'the collector ... span')."""
    resume, wakes = 0.0, (1.0, 1.0)
    for _ in range(ROUNDS):
        counted = wakes_of(max(cpu_low_ms - resume * wakes[0], 1e-4), resume)
        if counted is None:
            return "the runs cannot be replayed with the model"
        wakes = counted
        if wakes[0] - wakes[1] < min_spread:
            return (f"the model's replays wake {what} {wakes[0]:.2f} and {wakes[1]:.2f} times per job: too close to "
                    "separate a wake's CPU from the work")
        new = (cpu_low_ms - cpu_loaded_ms) / (wakes[0] - wakes[1])
        if new <= 0:
            return (f"{what} burns no less CPU per job in the loaded run ({cpu_loaded_ms:.4f} ms) than in the "
                    f"low-rate one ({cpu_low_ms:.4f} ms): no CPU per wake")
        settled = abs(new - resume) <= SETTLED * new
        resume = new
        if settled:
            break
    work = cpu_low_ms - resume * wakes[0]
    if work <= 0:
        return f"a wake's CPU ({resume:.4f} ms) would leave {what} no work per job: kept as one constant"
    return TwoPointSplit(work, resume, wakes[0], wakes[1])
