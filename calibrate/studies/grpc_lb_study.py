"""Study ``grpc-lb``: gRPC client-side vs proxy load balancing over three replicas (seed 002, Moura 2022).

The thesis ran ghz against a static-answer Go gRPC server (3 replicas, one per 2-CPU node, each node in its own
availability zone), balanced either by the grpc-go client (round robin) or by one Traefik replica, at 500, 1000 and
1500 r/s constant and with a rising and a falling load, 6 minutes each. Its results are figures; the text states a
few numbers (measurements/published/thesis002_claims.csv), and those are the cells here.

What the protocol lets us fit, and how:

* the server's CPU per request, from the one server number of the client-side baseline that the text gives (the
  three replicas together peak near 0.4 CPU; the peak is taken at the highest rate, 1500 r/s);
* Traefik's CPU per request, from the protocol itself: the heavy rate (1500 r/s) was chosen where the proxy
  starts to degrade (section 3.2), which section 3.4.3 places past 80 % of its CPU. The text prints no latency at
  the lowest rate, so there is no lowest-rate cell to fit; the model's knee and the added latency at 70 % are
  predicted. The busiest replica's CPU is the fitted sum shared by three (``derived``), and the replicas' balance
  follows from the round robin the document names (``derived``).

The naive forecast: the document prints no latency the fit could copy, so the latency Traefik adds is forecast as
its fitted CPU per request (80 % of 2 cores at 1500 r/s: a proxy that adds its own work and nothing else), and the
degradation onset as the fit cell's 80 % of CPU.

The load generator: ghz paces its sends with one rate limiter shared by its workers (default ``-c 50``; the text
gives no concurrency), so constant loads use the fortio model with ``uniform`` staggering (evenly spaced sends, a
worker waits for its answer). ghz ramps its rate linearly (``--load-schedule line``); meshsim's rate profiles are
Poisson (the open load), burstier than ghz: the ramps' queueing is an upper bound (said in the notes).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from meshsim.progress import Progress
from meshsim.request import PredictOptions
from meshsim.workload import RateProfile

from meshsim.calibrate.studies.study_catalog import MS, Study, StudySettings, predict_cell
from meshsim.calibrate.studies.study_cells import Cell, StudyResult
from meshsim.calibrate.studies.study_skill import StudyColumns

TOPOLOGY = "grpc-lb-study"
MESH = "traefik-grpc-lb"
RATES = (500.0, 1000.0, 1500.0)  # section 3.2
HEAVY_RPS = RATES[-1]
GHZ_CONNECTIONS = 50  # ghz's default -c; the thesis lists concurrency as a fixed parameter without its value
PROXY_CORES = 2.0  # Traefik on a 2-CPU node, no limit stated: Go runs it on GOMAXPROCS = 2 (section 3.3)
ONSET_CPU = 0.80  # section 3.4.3: degradation past 80 % of the proxy's CPU, which section 3.2 puts at the heavy rate
SERVER_SUM_CORES = 0.4  # section 3.4.2: the three replicas together peak near 0.4 CPU
EXPERIMENT_S = 360.0  # section 3.3: every experiment lasted 6 minutes
CPU_WINDOW_S = 60.0  # section 3.2: CPU is "the time each application holds the processor per minute" (cAdvisor)
TABLE = "thesis002_claims"
COLUMNS = StudyColumns("rps", HEAVY_RPS, ("lb",),
                       "no latency is printed where the fit could copy it: the latency Traefik adds is forecast as "
                       "its fitted CPU per request (80 % of 2 cores at 1500 r/s), the degradation onset as the fit "
                       "cell's 80 % CPU", mesh="lb")


def fitted_server_cpu_ms() -> float:
    """Server CPU per request: the summed peak over the heavy rate (the shipped topology holds this value)."""
    return SERVER_SUM_CORES / HEAVY_RPS / MS


def fitted_proxy_cpu_ms() -> float:
    """Traefik CPU per request: ONSET_CPU of its cores at the heavy rate (the shipped mesh model holds this value)."""
    return ONSET_CPU * PROXY_CORES / HEAVY_RPS / MS


def ghz(lb: str, rps: float, **extra: Any) -> PredictOptions:
    """A constant-rate ghz run: evenly paced sends from GHZ_CONNECTIONS workers that wait for their answers, and
    no warm-up calls (ghz makes none; fortio's would otherwise come first)."""
    return PredictOptions(topology=TOPOLOGY, mesh=MESH, lb=lb, load="fortio", uniform=True, fortio_warmup="none",
                          connections=GHZ_CONNECTIONS, rps=rps, **extra)


def ramp(lb: str, start: float, end: float, seconds: float) -> PredictOptions:
    """A rising or falling load as a rate profile (open load: Poisson sends thinned to the ramp)."""
    return PredictOptions(topology=TOPOLOGY, mesh=MESH, lb=lb, load="open", connections=GHZ_CONNECTIONS,
                          profile=RateProfile.ramp(start, end, seconds))


def _run(options: PredictOptions, settings: StudySettings, progress: Progress | None, **fixed: Any) -> Any:
    """A prediction with the study's settings, ``fixed`` overriding them (a run of fixed length and count)."""
    from meshsim.sim.experiments.predict import predict_options

    chosen = options.with_changes(**{**settings.predict_settings(), **fixed})
    if progress:
        progress(f"{options.lb} {options.profile.kind if options.profile else f'{options.rps:g} rps'}")
    return predict_options(chosen, None)


def _mean_ms(prediction: Any) -> tuple[float, float, float]:
    est = prediction.latency["mean"]
    return est.value / MS, est.lo / MS, est.hi / MS


def _added(proxy: Any, client: Any) -> tuple[float, tuple[float, float] | None]:
    """Mean latency added by the proxy (ms) with a conservative interval from the two predictions' intervals."""
    p, c = _mean_ms(proxy), _mean_ms(client)
    ci = (p[1] - c[2], p[2] - c[1]) if all(math.isfinite(x) for x in (*p, *c)) else None
    return p[0] - c[0], ci


# -- the cells -----------------------------------------------------------------------------------------------------

def server_cells(long_run: Any, balance: dict[str, float]) -> list[Cell]:
    """Server CPU (summed: fit; per replica: predicted, over per-minute windows) and balance over the replicas."""
    windows = long_run.timeseries.windows
    summed = max(w.cpu_cores["server/app"] for w in windows)
    per_replica = max(v for w in windows for k, v in w.instance_cores.items() if k.startswith("server/app#"))
    minute = f"{long_run.timeseries.window_s:g} s windows over {long_run.inputs['duration_s']:g} s"
    cells = [
        Cell("3.4.2/f12-13", {"lb": "client", "rps": HEAVY_RPS, "part": "server, 3 replicas summed"},
             "cpu_cores", SERVER_SUM_CORES, summed, role="fit",
             note=f"fits the server's CPU per request ({fitted_server_cpu_ms():.4f} ms): peak of the summed CPU, "
                  f"{minute}; the peak is taken at the highest rate"),
        Cell("3.4.2/f12-13", {"lb": "client", "rps": HEAVY_RPS, "part": "server, busiest replica"},
             "cpu_cores", 0.17, per_replica, role="derived",
             note=f"derived: the fitted sum shared by three balanced replicas; busiest replica in its busiest window "
                  f"({minute}). 3 x 0.17 = 0.51 is more than the summed peak "
                  "(0.4) although the text says the replicas are balanced: balanced replicas at 0.4 in total hold "
                  "0.133 each, and the Poisson noise of a minute at 500 r/s per replica is ~0.6 %; the 0.17 is likely a "
                  "short spike or a read of a different moment, which a balanced model cannot reproduce"),
    ]
    for lb, ratio in balance.items():
        cells.append(Cell("3.4.2/f6-7", {"lb": lb, "rps": HEAVY_RPS, "part": "server replicas"},
                          "balance_ratio", 1.0, ratio, role="derived",
                          note="derived: round robin, which the document names, balances by construction; busiest / "
                               "idlest replica's requests over the run; the text: 'quase perfeito', "
                               "'a mesma quantidade de requisições' (round robin in grpc-go and in Traefik)"))
    return cells


def proxy_fit_cell(proxy_heavy: Any) -> Cell:
    util = proxy_heavy.utilization["lb:server"] * 100
    return Cell("3.2+3.4.3", {"lb": "proxy", "rps": HEAVY_RPS, "part": "Traefik CPU"}, "cpu_percent",
                ONSET_CPU * 100, util, role="fit",
                note=f"fits Traefik's CPU per request ({fitted_proxy_cpu_ms():.4f} ms on {PROXY_CORES:g} cores) from "
                     "the protocol: the heavy rate was chosen where the proxy starts to degrade (3.2), past 80 % of "
                     "its CPU (3.4.3); the text prints no latency at the lowest rate to fit instead")


def onset_from_sweep(sweep: list[dict[str, float]], proxy_cpu_ms: float) -> float | None:
    """Proxy CPU (%) at which the added latency has grown past its light-load value by the proxy's own CPU per
    request (queueing as long as the work itself: the knee), linearly interpolated; None if never reached."""
    base = sweep[0]["added_ms"]
    points = [(s["cpu_percent"], s["added_ms"] - base - proxy_cpu_ms) for s in sweep]
    for (u0, e0), (u1, e1) in zip(points, points[1:]):
        if e1 >= 0 > e0:
            return u0 + (u1 - u0) * (-e0) / (e1 - e0)
    return None


# -- the runs ------------------------------------------------------------------------------------------------------

def sweep_proxy(settings: StudySettings, progress: Progress | None, client_mean_ms: float,
                proxy_util_heavy: float) -> list[dict[str, float]]:
    """Proxy at increasing CPU (ghz-paced, steady state): the added latency against Traefik's utilisation."""
    targets = (0.3, 0.6, 0.75, 0.85, 0.92, 0.97) if settings.short else \
        (0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.93, 0.96, 0.98)
    rows = []
    for target in targets:
        rate = HEAVY_RPS * target / proxy_util_heavy
        p = _run(ghz("proxy", rate), settings, progress)
        rows.append({"rps": round(rate, 1), "cpu_percent": p.utilization["lb:server"] * 100,
                     "mean_ms": p.latency["mean"].value / MS, "p99_ms": p.latency["p99"].value / MS,
                     "added_ms": p.latency["mean"].value / MS - client_mean_ms})
    return rows


def run_ramps(settings: StudySettings, progress: Progress | None) -> dict[str, Any]:
    """Rising and falling loads between the document's light and heavy rates, both balancers, with time series."""
    seconds = 12.0 if settings.short else EXPERIMENT_S
    out: dict[str, Any] = {}
    for name, (start, end) in (("rising", (RATES[0], HEAVY_RPS)), ("falling", (HEAVY_RPS, RATES[0]))):
        for lb in ("client", "proxy"):
            p = _run(ramp(lb, start, end, seconds), settings, progress, replications=1 if settings.short else 2,
                     precision=None)
            out[f"{name}-{lb}"] = {"lb": lb, "from_rps": start, "to_rps": end, "seconds": seconds,
                                   "mean_ms": p.latency["mean"].value / MS, "p99_ms": p.latency["p99"].value / MS,
                                   "timeseries": p.timeseries.to_dict()}
    return out


def ramp_onset(series: dict[str, Any], proxy_cpu_ms: float) -> float | None:
    """The rising ramp's first window whose mean latency exceeds the first window's by the proxy's CPU per request:
    the proxy CPU (%) there (the ramp's Poisson sends make this an early bound)."""
    windows = series["windows"]
    base = windows[0]["mean_ms"]
    for w in windows:
        if w["mean_ms"] is not None and w["mean_ms"] - base >= proxy_cpu_ms:
            return w["utilization"].get("lb:server", 0.0) * 100
    return None


def balance_ratio(prediction: Any) -> float:
    jobs: dict[str, float] = {}
    for w in prediction.timeseries.windows:
        for name, rate in w.instance_jobs_per_s.items():
            if name.startswith("server/app#"):
                jobs[name] = jobs.get(name, 0.0) + rate * (w.end_s - w.start_s)
    return max(jobs.values()) / min(jobs.values())


def experiment_row(prediction: Any) -> dict[str, Any]:
    return {"mean_ms": round(prediction.latency["mean"].value / MS, 4),
            "p50_ms": round(prediction.latency["p50"].value / MS, 4),
            "p99_ms": round(prediction.latency["p99"].value / MS, 4),
            "proxy_cpu_percent": round(prediction.utilization.get("lb:server", 0.0) * 100, 2),
            "server_cores": round(prediction.cpu_cores.get("server/app", 0.0), 4)}


def claim_cells(const: dict[tuple[str, float], Any], at70: tuple[Any, Any], onset: float | None) -> list[Cell]:
    """The proxy's two latency claims: ~1 ms added near 70 % CPU, degradation past 80 %."""
    proxy70, client70 = at70
    added, ci = _added(proxy70, client70)
    cpu70 = proxy70.utilization["lb:server"] * 100
    return [
        Cell("3.5", {"lb": "proxy - client", "proxy_cpu_percent": round(cpu70, 1),
                                 "rps": round(proxy70.inputs["load"]["rps"], 1)}, "added_ms", 1.0, added, ci,
             note="mean latency through Traefik minus client-side at the rate where the simulated proxy runs at "
                  "70 % of its CPU; the text: 'cerca de 1 milissegundo' near 70 % (3.5; also the Resumo and chapter 4)",
             naive=fitted_proxy_cpu_ms()),
        Cell("3.4.3/f14-15", {"lb": "proxy", "load": "rising, ghz-paced sweep"}, "cpu_percent", ONSET_CPU * 100,
             onset, note="proxy CPU at which the simulated queueing in Traefik reaches its own CPU per request (the "
                         "knee of latency vs CPU), from a sweep of steady ghz-paced rates; fixed before any run"
             if onset is not None else "the sweep never reached the knee (queueing = work) below 98 % CPU"),
    ]


class GrpcLbStudy(Study):
    name = "grpc-lb"
    title = "gRPC load balancing: client-side vs one Traefik proxy over 3 replicas (Moura, UFPE 2022)"
    source = ("J. F. da Matta Ribeiro Moura, 'Avaliação do Impacto de Balanceadores de Carga sobre o gRPC', TCC "
              "CIn-UFPE 2022 (seed 002); numbers stated in its text: measurements/published/thesis002_claims.csv")

    def run(self, settings: StudySettings, progress: Progress | None = None) -> StudyResult:
        short = settings.short
        length = 3.0 if short else 10.0  # constant runs; one window each for the replicas' balance
        const = {(lb, rate): _run(ghz(lb, rate), settings, progress, duration_s=length, timeseries_s=length)
                 for lb in ("client", "proxy") for rate in RATES}
        long_s, window = (12.0, 2.0) if short else (EXPERIMENT_S, CPU_WINDOW_S)
        long_run = _run(ghz("client", HEAVY_RPS), settings, progress, duration_s=long_s, timeseries_s=window,
                        replications=1, precision=None)
        util_heavy = const[("proxy", HEAVY_RPS)].utilization["lb:server"]
        rate70 = HEAVY_RPS * 0.70 / util_heavy
        at70 = (_run(ghz("proxy", rate70), settings, progress), _run(ghz("client", rate70), settings, progress))
        client_mean = const[("client", HEAVY_RPS)].latency["mean"].value / MS
        sweep = sweep_proxy(settings, progress, client_mean, util_heavy)
        proxy_ms = fitted_proxy_cpu_ms()
        onset = onset_from_sweep(sweep, proxy_ms)
        ramps = run_ramps(settings, progress)
        balance = {lb: balance_ratio(const[(lb, HEAVY_RPS)]) for lb in ("client", "proxy")}
        cells = [*server_cells(long_run, balance), proxy_fit_cell(const[("proxy", HEAVY_RPS)]),
                 *claim_cells(const, at70, onset)]
        extras = {"fitted": {"server_cpu_ms_per_request": fitted_server_cpu_ms(),
                             "proxy_cpu_ms_per_request": proxy_ms, "proxy_cores": PROXY_CORES},
                  "experiments": {f"{lb}-{rate:g}": experiment_row(p) for (lb, rate), p in const.items()},
                  "proxy_sweep": sweep, "ramps": ramps,
                  "ramp_onset_cpu_percent": ramp_onset(ramps["rising-proxy"]["timeseries"], proxy_ms)}
        return StudyResult(self.name, self.title, self.source, tuple(cells),
                           tuple(study_notes(const, extras, onset)),
                           {**settings.to_dict(), "ghz_connections": GHZ_CONNECTIONS}, extras, COLUMNS)


def _ramp_rise(ramps: dict[str, Any], key: str) -> tuple[float, float]:
    """Mean latency (ms) of a ramp's first and last windows."""
    windows = ramps[key]["timeseries"]["windows"]
    return windows[0]["mean_ms"], windows[-1]["mean_ms"]


def study_notes(const: dict[tuple[str, float], Any], extras: dict[str, Any], onset: float | None) -> list[str]:
    client = [const[("client", r)].latency["mean"].value / MS for r in RATES]
    proxy = [const[("proxy", r)].latency["mean"].value / MS for r in RATES]
    ramp_onset_cpu = extras["ramp_onset_cpu_percent"]
    (c0, c1), (p0, p1) = _ramp_rise(extras["ramps"], "rising-client"), _ramp_rise(extras["ramps"], "rising-proxy")
    return [
        f"Time scales (3.4.1: proxy in milliseconds, client-side in microseconds): simulated mean client-side "
        f"{client[0] * 1000:.0f}, {client[1] * 1000:.0f}, {client[2] * 1000:.0f} us and through Traefik "
        f"{proxy[0]:.2f}, {proxy[1]:.2f}, {proxy[2]:.2f} ms at 500, 1000, 1500 r/s: the proxy's grows with the rate "
        "as the text says; the client-side's barely moves (its servers are at most ~13 % busy).",
        "Fitted: the server's CPU per request (summed peak 0.4 CPU at 1500 r/s) and Traefik's (80 % of 2 cores at "
        "1500 r/s, from the protocol); the text gives no lowest-rate latency, so nothing else is fitted.",
        "Not in the document, so assumed and not tuned: the network between zones (the project's fitted "
        "intra-cluster hop; inter-zone round trips are usually longer), where ghz ran, ghz's concurrency "
        f"({GHZ_CONNECTIONS}, its default), Traefik's CPU limit (none: 2 cores), the ramps' end points (the "
        "document's light and heavy rates over its 6 minutes) and the split of Traefik's CPU between request and "
        "response.",
        "Degradation onset: with ghz's evenly paced sends Traefik queues little until late"
        + (f" (the knee at {onset:.0f} % CPU)" if onset is not None else " (no knee below 98 % CPU)")
        + "; the rising ramp, simulated with Poisson sends, degrades earlier"
        + (f" ({ramp_onset_cpu:.0f} % CPU)" if ramp_onset_cpu is not None else " (not within the ramp)")
        + ". Real Traefik also pays Go's garbage collector and scheduler, which this two-worker queue does not "
          "model; the document's 80 % lies between the two arrival processes."
        if onset is None or ramp_onset_cpu is None or ramp_onset_cpu <= 80 <= onset else
        f"Degradation onset: the paced sweep puts the knee at {onset:.0f} % CPU, the Poisson ramp at "
        f"{ramp_onset_cpu:.0f} % (the document: 80 %).",
        f"Added latency near 70 % CPU: the model's ~1.07 ms of Traefik CPU per request alone is above the text's "
        "~1 ms; the extra network hop and a little queueing add to it. A Traefik cheaper per request would need a "
        "lower CPU share at the heavy rate than the protocol implies.",
        f"Rising ramp (extras.ramps, time series): mean latency {c0:.2f} -> {c1:.2f} ms client-side and "
        f"{p0:.2f} -> {p1:.2f} ms through Traefik, first to last window; Traefik's CPU and its latency rise "
        "together, as figs. 14-15 describe.",
    ]


STUDY = GrpcLbStudy
