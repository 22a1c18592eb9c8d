"""The lab calibration's plan (``meshsim calibrate --lab``): which setups, rates, payloads and extra probes, built
and checked once (as ``PredictOptions`` is for a prediction) before any lab process starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from meshsim.errors import FieldError

from meshsim.calibrate.measure.lab.commands import DEFAULT_LAB_DIR
from meshsim.calibrate.measure.lab.probe import DEFAULT_OUT, ProbeSettings
from meshsim.calibrate.measure.lab.spec import (DEFAULT_DURATION_S, DEFAULT_MESH, DEFAULT_PAYLOADS, DEFAULT_RATES,
                                               DEFAULT_WORKERS, LabSpec)
from meshsim.calibrate.load.held_fraction import BURST_CONNECTIONS

PLAN_STAGES: tuple[tuple[str, str], ...] = (
    ("single", "baseline"),
    ("single", "server-sidecar"),
    ("single", "sidecar"),
    ("single", "mtls"),
    ("single", "tracing"),
    ("lb3", "proxy-lb"),
    ("lb3", "client-lb"),
)
BATCH_CONNECTIONS = 8  # the batching probe: requests arriving together keep one worker busy
# The load ladder: many connections at rising rates, so the workers' idle gaps span the wake-ups' time scale. A
# sidecar's CPU per request halves from 1 500 to 12 000 rps (measurements/lab-high-rate-2026-11-26); runs at
# <= 1 000 rps leave every pass cold and cannot tell a wake-up's cost from the pass's own.
LADDER_CONNECTIONS = 16
LADDER_RATES: tuple[float, ...] = (1500.0, 4500.0, 9000.0)
LADDER_STAGES: tuple[tuple[str, str], ...] = (("single", "baseline"), ("single", "sidecar"))
# The ladder's feature rungs: each feature with 16 connections at the ladder's lowest rate, beside its one-connection
# runs. Tracing's gives the span collector's CPU per span when spans queue (about 0.055 ms on the lab's host against
# 0.09 ms one at a time: calibrate/load/collector_wake.py); both tell a feature's CPU per wake of its worker from its
# CPU per pass (mTLS's extra CPU per request falls from 0.07-0.10 ms at one connection to under 5 us there:
# calibrate/load/feature_wake.py).
FEATURE_RUNG_STAGES: tuple[tuple[str, str], ...] = (("single", "tracing"), ("single", "mtls"))
# Each feature rung twice, in turn: tracing's CPU per sidecar side beyond a plain pass moved from 0.063 to 0.116 ms
# over three such runs within half a minute (the plain runs beside them +-7 %:
# measurements/lab-tracing-spread-2026-11-29); the fit averages the repeats' draws (feature_wake, collector_wake).
FEATURE_RUNG_REPEATS = 2


@dataclass(frozen=True)
class LabPlan:
    """What one lab calibration measures and where it goes.

    ``batching_probe``: one more run, both sidecars on one worker each with eight connections firing together at
    the top rate. One-connection runs wake an idle worker on every pass, so what a pass costs a worker that never
    sleeps (the CPU floor that sets the saturation rate) cannot be told from the cost of waking it; here most
    passes find their worker busy.

    ``burst_probes``: both sidecars with c = 2, 4, 8 connections firing together (no -uniform) at the lowest rate.
    The k-th request of a burst on a worker waits for the held part of the passes before it, which one connection
    never shows: the fitter finds by simulation what fraction of a pass holds the worker.

    ``load_ladder``: the baseline and both sidecars with 16 connections at 1 500, 4 500 and 9 000 rps. A worker's
    CPU per request falls with load (fewer cold wake-ups); only idle gaps shorter than the wake-ups' time scale tell
    the wake-up's cost from the pass's own, and the pass's own cost sets the saturation rate. A rung the host does
    not carry is kept as a measured capacity and the ladder gets one more rung below it (``measure_ladder``);
    ``ladder_rates`` replaces the planned rates.

    The ladder's feature rungs (with ``load_ladder``, for tracing and mTLS where they are among the stages): the
    feature with 16 connections at the ladder's lowest rate, so that its CPU is read with its workers sleeping a
    few times per request as well as twice (a wake's CPU is paid per wake, a pass's per pass), and the span
    collector's CPU per span with spans queueing as well as one at a time.

    ``resume``: a probe whose run is already stored under ``out_dir`` (same setup and load) is not measured again;
    the fit uses the stored and the new runs. ``state_dir``: where the lab records its processes while it runs.
    """

    mesh: str = DEFAULT_MESH
    out_dir: Path = DEFAULT_OUT
    model_out: Path | None = None  # None: measure only, fit nothing
    rates: tuple[float, ...] = DEFAULT_RATES
    payloads: tuple[int, ...] = DEFAULT_PAYLOADS
    duration_s: float = DEFAULT_DURATION_S
    workers: int = DEFAULT_WORKERS
    stages: tuple[tuple[str, str], ...] = PLAN_STAGES
    fit: bool = True
    batching_probe: bool = True
    burst_probes: bool = True
    load_ladder: bool = True
    ladder_rates: tuple[float, ...] = LADDER_RATES
    resume: bool = False
    state_dir: Path = DEFAULT_LAB_DIR

    def __post_init__(self) -> None:
        for name in ("rates", "payloads", "stages", "ladder_rates"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("out_dir", "state_dir"):
            object.__setattr__(self, name, Path(getattr(self, name)))
        if self.model_out is not None:
            object.__setattr__(self, "model_out", Path(self.model_out))
        if not self.rates or not self.payloads:
            raise FieldError("rates", "need at least one rate, and at least one payload size")
        LabSpec(topology="single", mode="sidecar", workers=self.workers, mesh=self.mesh)  # refused here, not later

    @property
    def probes(self) -> list[ProbeSettings]:
        return plan_probes(self.rates, self.payloads, self.duration_s)

    @property
    def batching(self) -> bool:
        return self.batching_probe and ("single", "sidecar") in self.stages

    @property
    def batching_probe_settings(self) -> ProbeSettings:
        """Eight connections on one worker at the top rate."""
        return ProbeSettings(rps=max(self.rates), connections=BATCH_CONNECTIONS, duration_s=self.duration_s,
                             payload_bytes=self.payloads[0])

    @property
    def bursts(self) -> list[ProbeSettings]:
        if self.burst_probes and ("single", "sidecar") in self.stages:
            return burst_plan(self.rates, self.payloads, self.duration_s)
        return []

    @property
    def ladder(self) -> list[ProbeSettings]:
        if self.load_ladder and set(LADDER_STAGES) <= set(self.stages):
            return ladder_plan(self.payloads, self.duration_s, self.ladder_rates)
        return []

    @property
    def feature_rungs(self) -> list[tuple[tuple[str, str], ProbeSettings]]:
        """(stage, probe) of each feature setup at the ladder's lowest rate with its connections, each
        ``FEATURE_RUNG_REPEATS`` times, the features in turn (empty without the ladder; a feature not among the
        stages has none)."""
        if not self.ladder:
            return []
        return [(stage, self.ladder[0]) for _ in range(FEATURE_RUNG_REPEATS) for stage in FEATURE_RUNG_STAGES
                if stage in self.stages]

    @property
    def total_runs(self) -> int:
        return (len(self.stages) * len(self.probes) + int(self.batching) + len(self.bursts)
                + len(LADDER_STAGES) * len(self.ladder) + len(self.feature_rungs))

    def headline(self) -> str:
        """The plan in one line, with its expected length."""
        extras = "".join(f" + {n} {what}" for n, what in ((int(self.batching), "batching"),
                                                           (len(self.bursts), "bursts"),
                                                           (len(LADDER_STAGES) * len(self.ladder), "load ladder"),
                                                           (len(self.feature_rungs), "feature rungs"))
                         if n)
        total = self.total_runs
        return (f"lab calibration for mesh {self.mesh!r}: {len(self.stages)} setups x {len(self.probes)} probes"
                f"{extras} = {total} runs of {self.duration_s:g} s (about {total * (self.duration_s + 0.5) / 60:.1f} "
                "min)")


def plan_probes(rates: Sequence[float], payloads: Sequence[int], duration_s: float) -> list[ProbeSettings]:
    return [ProbeSettings(rps=q, connections=1, duration_s=duration_s, payload_bytes=b)
            for b in payloads for q in rates]


def ladder_plan(payloads: Sequence[int], duration_s: float,
                rates: Sequence[float] = LADDER_RATES) -> list[ProbeSettings]:
    return [ProbeSettings(rps=q, connections=LADDER_CONNECTIONS, duration_s=duration_s, payload_bytes=payloads[0])
            for q in sorted(rates)]


def burst_plan(rates: Sequence[float], payloads: Sequence[int], duration_s: float) -> list[ProbeSettings]:
    """Bursts of synchronised requests at the lowest rate: what part of a pass holds its worker."""
    return [ProbeSettings(rps=min(rates), connections=c, duration_s=duration_s, payload_bytes=payloads[0])
            for c in BURST_CONNECTIONS]
