"""Workloads (what the load generator does) and run settings (how long, how many replications, which seed)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Union

from meshsim.distributions import MS, Distribution
from meshsim.errors import FieldError
from meshsim.fortio_warmup import DEFAULT_VERSION, warmup_mode


@dataclass(frozen=True)
class RateProfile:
    """Offered rate over time as (time s, rps) points: ramp = linear between points, steps = hold until next."""

    kind: str
    points: tuple[tuple[float, float], ...]

    def rate_at(self, t: float) -> float:
        pts = self.points
        if t <= pts[0][0]:
            return pts[0][1]
        for (t0, r0), (t1, r1) in zip(pts, pts[1:]):
            if t < t1:
                if self.kind == "steps":
                    return r0
                return r0 + (r1 - r0) * (t - t0) / (t1 - t0)
        return pts[-1][1]

    @property
    def max_rps(self) -> float:
        return max(r for _, r in self.points)

    @property
    def length_s(self) -> float | None:
        """How long the profile runs: a ramp ends at its last point; the last of several steps lasts as long as the
        one before it (``steps:0=500,20=1000,40=1500`` runs 60 s). None for a single step, which has no end."""
        times = [t for t, _ in self.points]
        if self.kind == "ramp":
            return times[-1] if len(times) > 1 else None
        return times[-1] + (times[-1] - times[-2]) if len(times) > 1 else None

    def mean_rps(self, start: float, end: float) -> float:
        """The profile's mean rate over [start, end) (exact: linear or constant pieces between its points)."""
        if end <= start:
            return self.rate_at(start)
        cuts = sorted({start, end, *(t for t, _ in self.points if start < t < end)})
        area = 0.0
        for a, b in zip(cuts, cuts[1:]):
            if self.kind == "steps":
                area += self.rate_at(a) * (b - a)
            else:  # linear between consecutive cuts: the trapezoid is exact
                area += 0.5 * (self.rate_at(a) + self.rate_at(b)) * (b - a)
        return area / (end - start)

    def validate(self) -> None:
        """Finite times that increase, rates >= 0 and some above 0 (FieldError on ``profile``)."""
        if self.kind not in ("ramp", "steps"):
            raise FieldError("profile", f"unknown kind {self.kind!r} (known: ramp, steps)")
        if not self.points:
            raise FieldError("profile", "no points")
        for t, r in self.points:
            if not (math.isfinite(t) and math.isfinite(r)):
                raise FieldError("profile", f"times and rates must be finite numbers, got {t:g} s = {r:g} rps")
            if t < 0 or r < 0:
                raise FieldError("profile", f"times and rates must be >= 0, got {t:g} s = {r:g} rps")
        times = [t for t, _ in self.points]
        if any(b <= a for a, b in zip(times, times[1:])) or (self.kind == "ramp" and len(times) < 2):
            raise FieldError("profile", "times must increase (a ramp lasts more than 0 s)")
        if self.max_rps <= 0:
            raise FieldError("profile", "every rate is 0: nothing would be sent")

    @staticmethod
    def ramp(start_rps: float, end_rps: float, duration_s: float) -> "RateProfile":
        return RateProfile("ramp", ((0.0, start_rps), (duration_s, end_rps)))


class LoadKind:
    """What the engines and the cost model ask of every load kind; each kind below answers what differs.

    Kept as data and small methods here (the data model knows no engine): how a kind starts its generator and is
    lowered to the compiled engine lives in sim/, in registries keyed by its type (sim/engine/loadgen.py GENERATORS,
    sim/fast/fast_setup.py LOWERINGS)."""

    # arrivals independent of the answers (a backlog can grow; connection ids are nominal)
    is_open: ClassVar[bool] = False
    # a fixed count of calls per thread after untimed warm-up calls (fortio: its elapsed ends with its last thread)
    runs_fixed_calls: ClassVar[bool] = False
    # the share of the run cut as warm-up when the run keeps its start (fortio: none, it reports every call)
    default_warmup_share: ClassVar[float] = 0.1
    # the rate is an outcome of users and latency, not a setting (sequential users)
    rate_is_outcome: ClassVar[bool] = False
    profile: ClassVar[RateProfile | None] = None  # a rate that changes over time (open loads only)
    rate_field: ClassVar[str] = "rps"  # the option that sets how many requests a run sends (errors name it)
    in_flight_field: ClassVar[str] = "connections"  # the option that sets how many are in flight at once
    rps: float
    connections: int

    @property
    def processes(self) -> int:
        """The generator's own processes (connections, threads or users)."""
        return self.connections

    def offered_rps(self, floor_s: float) -> float:
        """The highest rate the generator can send (``floor_s``: an idle system's latency)."""
        return self.rps

    def offered_between(self, start: float, end: float) -> float | None:
        """What the generator offers over [start, end) (None when the rate is an outcome)."""
        return self.rps

    def expected_arrivals(self, window_s: float) -> float | None:
        """The requests started in a window when their count is random with a known mean (the latency estimates'
        control variate); None when a schedule fixes it or the answers set it."""
        return None

    def shortfall(self, achieved_rps: float) -> str | None:
        """Why the achieved rate fell short of the rate asked for, when the generator itself caps it."""
        return None

    def fortio_driving(self) -> tuple[str, bool, bool] | None:
        """How a fortio load drives its connections (warm-up, -jitter, -uniform); None for other generators."""
        return None

    def described(self) -> dict[str, Any]:
        """The load as the prediction's ``inputs`` record it."""
        described: dict[str, Any] = {"model": type(self).__name__}
        for key, value in asdict(self).items():  # type: ignore[call-overload]
            described[key] = value if not isinstance(value, dict) else str(value)
        return described


@dataclass(frozen=True)
class OpenLoad(LoadKind):
    """Poisson arrivals, latency from the intended start (no coordinated omission; Nighthawk-like open load; wrk2's
    own pacing is :class:`Wrk2Load`).

    ``connections`` only decides how requests spread over pinned proxy workers (a request rides one of them).
    """

    rps: float
    connections: int = 1000
    profile: RateProfile | None = None

    is_open: ClassVar[bool] = True
    in_flight_field: ClassVar[str] = "rps"

    @property
    def processes(self) -> int:
        return 1  # the arrivals are one process

    @property
    def rate_field(self) -> str:  # type: ignore[override]
        return "profile" if self.profile is not None else "rps"

    def offered_between(self, start: float, end: float) -> float | None:
        return self.profile.mean_rps(start, end) if self.profile is not None else self.rps

    def expected_arrivals(self, window_s: float) -> float | None:
        """A Poisson load at a constant rate: its rate x the window (a profile's would be its integral: left out)."""
        if self.profile is None and math.isfinite(self.rps) and self.rps > 0:
            return self.rps * window_s
        return None

    def validate(self) -> None:
        _validate_rate(self.rps)
        _validate_connections(self.connections)
        if self.profile is not None:
            self.profile.validate()


@dataclass(frozen=True)
class FortioLoad(LoadKind):
    """fortio's closed loop: ``connections`` threads, one request at a time each, paced at rps/c.

    ``uniform`` staggers thread starts, ``jitter`` adds +-10 % to each sleep, ``nocatchup`` skips late requests;
    latency is timed from the actual send (fortio periodic.go v1.68.2). Before the timed run each connection makes
    one untimed warm-up call, in parallel or one after another as fortio ``version`` does (meshsim/fortio_warmup.py);
    ``warmup`` None = that version's default, else ``parallel``, ``sequential`` (-sequential-warmup) or ``none``
    (-exactly runs).
    """

    rps: float
    connections: int = 1
    uniform: bool = False
    jitter: bool = False
    nocatchup: bool = False
    version: str = DEFAULT_VERSION  # the fortio the lab pins
    warmup: str | None = None

    runs_fixed_calls: ClassVar[bool] = True
    default_warmup_share: ClassVar[float] = 0.0

    @property
    def warmup_mode(self) -> str:
        return warmup_mode(self.version, self.warmup)

    def fortio_driving(self) -> tuple[str, bool, bool] | None:
        return self.warmup_mode, self.jitter, self.uniform

    def shortfall(self, achieved_rps: float) -> str | None:
        if achieved_rps < 0.95 * self.rps:
            return (f"fortio achieved {achieved_rps:.0f} of {self.rps:.0f} rps: its {self.connections} "
                    "connection(s) wait for each answer, so throughput caps at connections / latency")
        return None

    def validate(self) -> None:
        _validate_rate(self.rps)
        _validate_connections(self.connections)
        warmup_mode(self.version, self.warmup)


@dataclass(frozen=True)
class SequentialLoad(LoadKind):
    """``users`` clients each sending a request, waiting for the answer, then thinking (the Bookinfo seed)."""

    think: Distribution
    users: int = 1

    rate_is_outcome: ClassVar[bool] = True
    rate_field: ClassVar[str] = "think_ms"

    @property
    def rps(self) -> float:
        return self.users / self.think.mean if self.think.mean > 0 else float("inf")

    @property
    def processes(self) -> int:
        return self.users

    def offered_rps(self, floor_s: float) -> float:
        """At most one request per (think + idle-system latency) per user."""
        cycle = self.think.mean + floor_s
        return self.users / cycle if cycle > 0 else math.inf

    def offered_between(self, start: float, end: float) -> float | None:
        return None

    def described(self) -> dict[str, Any]:
        described = super().described()
        described["think_ms"] = self.think.mean / MS
        described.pop("think", None)
        return described

    def validate(self) -> None:
        if self.users < 1:
            raise FieldError("connections", f"sequential users must be >= 1, got {self.users}")
        if not 0 <= self.think.mean < math.inf:
            raise FieldError("think_ms", f"must be >= 0 ms and finite, got {self.think.mean * 1e3}")


@dataclass(frozen=True)
class Wrk2Load(LoadKind):
    """wrk2's constant throughput (giltene/wrk2 wrk.c): ``threads`` event loops, each owning
    ``connections // threads`` connections; each thread's rate ``rps / threads`` is split evenly over its
    connections, so every connection has its own schedule of intended send times ``interval_s`` apart, counted from
    its own connect (connects are staggered 5 ms apart inside a thread). A connection sends its next request only
    after the previous answer (no pipelining); when it is behind its schedule it sends at once. Latency is timed
    from the intended send time (coordinated-omission correction), not from the actual send. ``timer_s`` is the
    event loop's timer grain: a wait of w ms for the next send becomes ``round(w + 0.5)`` ms (ae timers count whole
    milliseconds); 0 = exact.

    Left out: wrk2's catch-up limit (2x the connection's rate while behind) counts from the last send made on
    time, which is never more than one timer tick after its intended time, so it cannot hold a late connection
    back by more than a tick; the connect handshake before the first request; pipelining (-P); Lua scripts.
    """

    rps: float
    connections: int = 10  # wrk -c default
    threads: int = 2  # wrk -t default
    timer_s: float = 1e-3

    def shortfall(self, achieved_rps: float) -> str | None:
        if achieved_rps < 0.95 * self.rps:
            return (f"wrk2 achieved {achieved_rps:.0f} of {self.rps:.0f} rps: each of its {self.used_connections} "
                    "connection(s) waits for its answer and falls behind its schedule, so latency from the intended "
                    "send time grows with the run length")
        return None

    def validate(self) -> None:
        _validate_rate(self.rps)
        for name in ("threads", "connections"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise FieldError(name, f"must be a whole number >= 1, got {value!r}")
        if self.connections < self.threads:
            raise FieldError("connections", f"{self.connections} is fewer than threads ({self.threads}): wrk2 gives "
                                            "each thread connections / threads of them and refuses fewer than one")
        if not 0 <= self.timer_s < math.inf:
            raise FieldError("timer_s", f"must be >= 0 seconds and finite, got {self.timer_s}")

    @property
    def connections_per_thread(self) -> int:
        return self.connections // self.threads  # wrk2 drops the remainder

    @property
    def used_connections(self) -> int:
        return self.connections_per_thread * self.threads

    @property
    def interval_s(self) -> float:
        """Gap between a connection's intended send times: 1 / ((rps / threads) / connections_per_thread)."""
        return self.connections_per_thread * self.threads / self.rps


Load = Union[OpenLoad, FortioLoad, SequentialLoad, Wrk2Load]


@dataclass(frozen=True)
class Workload:
    load: Load
    keepalive: bool = True
    tls: bool = False  # client -> edge over HTTPS (handshake round trips when keep-alive is off)
    rate_source: str = ""  # where the rate came from when the user gave none (the topology's entry_rate)
    driving_source: str = ""  # how much of a fortio load's driving came from the calibration cluster's runs


@dataclass(frozen=True)
class RunSettings:
    """Simulation control. ``duration_s`` None = chosen from ``requests_per_replication``."""

    duration_s: float | None = None
    warmup_s: float | None = None
    replications: int | None = None
    # The first batch, and so the first look of the precision rule: stopping as soon as the p99's interval is narrow
    # enough favours runs whose spread came out low, the more so the earlier it looks (tests/bench_coverage.py).
    min_replications: int = 4
    max_replications: int = 160
    precision: float | None = 0.05
    # Short replications, many of them: near saturation the spread between replications is dominated by which
    # worker each connection landed on, not by the length of a run.
    requests_per_replication: int = 5000
    seed: int = 1
    processes: int | None = None
    drain_s: float = 5.0
    saturation_search: bool = True  # find the saturation rate (costly: sweeps find it from their curve instead)
    # Bounded cost (meshsim.sim.experiments.run_cost): a run estimated above max_events station visits is refused before it starts;
    # no replication batch is started that would end after time_limit_s of wall clock (None: no limit).
    max_events: float = 5e7
    time_limit_s: float | None = 60.0
    # Window of the latency/rate/CPU time series in seconds; None: a rate profile gets one with a window chosen from
    # its length (sim/engine/window_series.py), a constant load none.
    timeseries_s: float | None = None
    engine: str | None = None  # 'fast' | 'simpy' | None (fast when it covers the request: sim/engine_choice.py)

    def validate(self) -> None:
        if self.duration_s is not None and not 0 < self.duration_s < math.inf:
            raise FieldError("duration_s", f"must be > 0 seconds and finite, got {self.duration_s}")
        if self.warmup_s is not None and not 0 <= self.warmup_s < math.inf:
            raise FieldError("warmup_s", f"must be >= 0 seconds and finite, got {self.warmup_s}")
        if self.replications is not None and self.replications < 1:
            raise FieldError("replications", f"must be >= 1, got {self.replications}")
        if not 2 <= self.min_replications <= self.max_replications:
            raise FieldError("min_replications", f"must be from 2 (an interval needs two) to {self.max_replications}, "
                                                 f"got {self.min_replications}")
        if self.precision is not None and not 0 < self.precision < 1:
            raise FieldError("precision", f"a fraction in (0, 1), got {self.precision}")
        if self.seed < 0:
            raise FieldError("seed", f"must be >= 0, got {self.seed}")
        if self.processes is not None and self.processes < 1:
            raise FieldError("processes", f"must be >= 1, got {self.processes}")
        if not 0 < self.max_events < math.inf:
            raise FieldError("max_events", f"must be > 0 and finite, got {self.max_events}")
        if self.engine is not None and self.engine not in ("fast", "simpy"):
            raise FieldError("engine", f"unknown engine {self.engine!r} (known: fast, simpy)")
        if self.time_limit_s is not None and not 0 < self.time_limit_s < math.inf:
            raise FieldError("time_limit_s", f"must be > 0 seconds and finite, got {self.time_limit_s}")
        if self.timeseries_s is not None and not 0 < self.timeseries_s < math.inf:
            raise FieldError("timeseries_s", f"must be > 0 seconds and finite, got {self.timeseries_s}")


def validate_load(load: Load) -> None:
    """One FieldError naming the option of ``load`` that is out of range (each load kind checks its own)."""
    load.validate()


def _validate_rate(rps: float) -> None:
    if not (rps > 0 and math.isfinite(rps)):
        raise FieldError("rps", f"must be a finite number > 0, got {rps}")


def _validate_connections(connections: int) -> None:
    if connections < 1:
        raise FieldError("connections", f"must be >= 1, got {connections}")
