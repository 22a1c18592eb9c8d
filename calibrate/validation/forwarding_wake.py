"""A forwarding app's CPU per request as work per request + CPU per wake, from the chain's baseline at two loads.

An app's event loop that finds work already waiting does not go back to sleep, so what a wake costs (the context
switch, epoll_wait's return, the syscalls around it) is paid per request at a low rate and per batch near
saturation: the lab's fortio forwarding apps burn 0.32 ms per request at 200 rps on one connection and about
0.19 ms at saturation. Two baseline runs of the same chain, one connection and many, give the CPU per request at two
wake frequencies; the model's own replay of each run says how many of an app's jobs find its worker idle (as the
proxies' wake-ups are fitted on the model's idle gaps, ``calibrate.load.wake_gaps``), and the two points solve

    cpu = work + resume x wakes per request

for the work (held on every request) and ``resume`` (the station's ``wakeup.resume_cpu``, paid when a job finds its
worker idle), as ``calibrate.load.wake_split`` does. A share of each wake's CPU (``SPIN_SHARE``) is Go's runtime
waking a thread to spin on the app's idle P: it is booked beside the request, not before its work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from meshsim.calibrate.load.wake_split import split_two_points
from meshsim.calibrate.measure.dataset import Run
from meshsim.request import PredictOptions

MIN_WAKE_SPREAD = 0.2  # wakes per request the two runs must differ by for two points to separate work from resume
MAX_REQUESTS = 6000  # simulated requests per replay: enough for the share of idle jobs, quick to simulate
RESUME_TAU_MS = 1.0  # a resume-only wake-up has no cold wake; tau is required by the block and has no effect
# The share of a lab fortio app's CPU per wake that Go's spinning threads burn beside the woken one, off the request's
# path (WakeUp.spin_share): 1 - the wake CPU split from baselines run with GOMAXPROCS=1 over the same split with the
# default GOMAXPROCS=2, three interleaved pairs on the lab host: 0.51, 0.46, 0.40, while the work per request stays
# (measurements/lab-go-spinning-2026-11-29).
SPIN_SHARE = 0.45
SPIN_SOURCE = ("measurements/lab-go-spinning-2026-11-29: the wake CPU GOMAXPROCS=1 takes from the lab's fortio apps "
               "(0.40-0.51 in three interleaved pairs of chain3 baselines)")


@dataclass(frozen=True)
class WakeSplit:
    """The forwarding apps' CPU per request split into work and CPU per wake (ms), and where it came from."""

    work_ms: float
    resume_ms: float
    source: str
    source_runs: tuple[str, str]  # the one-connection and the loaded baseline run

    def scaled(self, share: float, why: str) -> WakeSplit:
        """Both parts times ``share`` (the apps' CPU booked on a hop shorter than it)."""
        return WakeSplit(self.work_ms * share, self.resume_ms * share, f"{self.source}; x {share:.3f}: {why}",
                         self.source_runs)

    def on_path_ms(self, cpu_low_ms: float) -> float:
        """Of ``cpu_low_ms``, the one-connection run's CPU per request (work + its wakes' CPU), what the woken
        threads run on the request's path: all but the spinning threads' share of the wakes."""
        return cpu_low_ms - SPIN_SHARE * max(cpu_low_ms - self.work_ms, 0.0)

    def within(self, hop_mean_ms: float, cpu_low_ms: float) -> WakeSplit:
        """This split within the hop: an app burning more CPU per request on the request's path than its hop lasts
        (work after the response, which a forwarding app's steps cannot hold) books the hop's time, both parts in
        proportion."""
        on_path = self.on_path_ms(cpu_low_ms)
        if on_path <= hop_mean_ms:
            return self
        return self.scaled(hop_mean_ms / on_path, f"the apps' {on_path:.4f} ms CPU per request on its path exceeds "
                                                  f"the {hop_mean_ms:.4f} ms hop")

    def wakeup_block(self) -> dict[str, object]:
        return {"resume_cpu_ms": round(self.resume_ms, 5), "tau_ms": RESUME_TAU_MS, "source": self.source,
                "spin_share": SPIN_SHARE, "spin_source": SPIN_SOURCE}


# (work ms, resume ms) -> the options replaying a run on the chain built with that split
Replayer = Callable[[Run, float, float], PredictOptions]


def wakes_per_request(options: PredictOptions, forwarders: Sequence[str], seed: int = 1) -> float:
    """Mean jobs per request, over the forwarding apps, that find their worker idle in one replay of ``options``."""
    from meshsim.request import build_request
    from meshsim.sim.engine.simpy_replication import run_replication
    from meshsim.sim.experiments.predict import horizon_for

    rps = float(options.rps or 1.0)
    duration = min(float(options.duration_s or 5.0), max(MAX_REQUESTS / rps, 1.0))
    request = build_request(options.with_changes(duration_s=duration, warmup_s=0.0, replications=1))
    horizon = horizon_for(request.workload.load, request.settings)
    result = run_replication(request.scenario, request.workload, horizon, seed, 0, observe_gaps=True)
    woken = [float(np.sum(u.idle_gaps > 0)) for c, u in result.usage.items()
             if c in forwarders and u.idle_gaps is not None]
    return float(np.sum(woken)) / max(result.completed, 1) / max(len(forwarders), 1)


def split_cpu(low: Run, loaded: Run, cpu_low_ms: float, cpu_loaded_ms: float, forwarders: Sequence[str],
              replayer: Replayer) -> WakeSplit | str:
    """The split that makes the model's replays of both runs burn their measured CPU per request, or why none does
    (a string: then the apps' CPU stays one constant, as measured in ``low``)."""
    def wakes_of(work_ms: float, resume_ms: float) -> tuple[float, float]:
        return (wakes_per_request(replayer(low, work_ms, resume_ms), forwarders),
                wakes_per_request(replayer(loaded, work_ms, resume_ms), forwarders))

    split = split_two_points(cpu_low_ms, cpu_loaded_ms, wakes_of, MIN_WAKE_SPREAD, "the forwarding apps")
    if isinstance(split, str):
        return f"{split} ({low.id}, {loaded.id})"
    return WakeSplit(split.work_ms, split.resume_ms, (
        f"forwarding apps: {cpu_low_ms:.4f} ms CPU per request in {low.id} and {cpu_loaded_ms:.4f} ms in {loaded.id}, "
        f"whose replays wake an app {split.low_wakes:.2f} and {split.loaded_wakes:.2f} times per request: "
        f"{split.work_ms:.4f} ms work per request + {split.resume_ms:.4f} ms per wake"), (low.id, loaded.id))
