"""Which runs identify which component, and fitting them in dependency order.

- baseline runs (network + app) are taken empirically: the known part of every later fit;
- server-sidecar runs add the inbound proxy's request and response passes (i.i.d. per pass);
- both-sidecars runs add the outbound proxy's two passes on top (inbound fixed from the step before; with no
  server-sidecar run, all four passes are fitted as one i.i.d. per-pass distribution);
- runs whose only feature is F (mtls, tracing, telemetry...) add F's per-pass increment: inbound from
  server-sidecar+F, outbound from both-sidecars+F; with only one of them the increment is shared by all passes;
- proxy-lb runs add a central proxy's two passes to the client-lb runs (or to the baseline when there are none,
  or when the client-lb runs balance in the caller's sidecar: its passes are not part of a proxy-lb run).
Runs with several features at once are not used (their increments are not separable) and are reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np
from meshsim.calibrate.fit.convolution import Grid, GridPmf, from_observation, power
from meshsim.calibrate.measure.dataset import Run
from meshsim.calibrate.fit.acceptance import FitRefused
from meshsim.calibrate.fit.deconvolution import ComponentFit, Term, component_pmf, fit_component
from meshsim.calibrate.fit.families import Family
from meshsim.calibrate.fit.mle import FitResult, fit_best
from meshsim.calibrate.fit.observations import Observation, from_result
from meshsim.errors import MeshsimError
from meshsim.progress import Progress

# fit(component name, its runs, the known parts' pmf, passes per request) -> the fitted pass pmf
FitStep = Callable[[str, list[Run], GridPmf, int], GridPmf]


@dataclass(frozen=True)
class ColdWakes:
    """Wake-ups inside the reference runs' proxy passes, which the fitted passes must not hold (the simulator adds
    them): per request, each proxy resumes its idle worker ``resumes`` times at ``resume_cpu_s`` each and wakes it
    cold ``colds`` times on average at ``cost_s`` each; per side (inbound, outbound) a pair (resumes, colds)."""

    cost_s: float
    resume_cpu_s: float
    inbound: tuple[float, float]
    outbound: tuple[float, float]

    def scaled(self, side: str, factor: float) -> "ColdWakes":
        """The same wake-ups with ``side``'s cold wakes scaled by ``factor`` (its resumes unchanged)."""
        resumes, colds = self.inbound if side == "inbound" else self.outbound
        return replace(self, **{side: (resumes, colds * factor)})

    def pmf(self, grid: Grid, side: str) -> GridPmf:
        """One proxy's wake-ups per request: a constant resume cost and 0, 1 or 2 cold wakes over its two passes
        (each cold with probability colds / 2)."""
        resumes, colds = self.inbound if side == "inbound" else self.outbound
        p = min(max(colds / 2, 0.0), 1.0)
        shift = int(round(self.resume_cpu_s * resumes / grid.dt))
        k = int(round(self.cost_s / grid.dt))
        mass = np.zeros(grid.n)
        for wakes, prob in ((0, (1 - p) ** 2), (1, 2 * p * (1 - p)), (2, p * p)):
            if shift + wakes * k < grid.n:
                mass[shift + wakes * k] += prob
        return GridPmf(grid, mass, terms=0)  # point masses at multiples of dt, not bin centres


@dataclass
class Decomposition:
    baseline: FitResult
    baseline_runs: tuple[str, ...]
    components: dict[str, ComponentFit] = field(default_factory=dict)
    runs_of: dict[str, tuple[str, ...]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    observations: dict[str, Observation] = field(default_factory=dict)
    baseline_obs: Observation | None = None


def _obs(run: Run) -> Observation:
    return from_result(run.result, label=run.id)


def _select(runs: Sequence[Run], path: str, features: frozenset[str]) -> list[Run]:
    return [r for r in runs if r.manifest.setup.path == path and r.features == features]


def _pooled(grid: Grid, runs: Sequence[Run]) -> GridPmf:
    """Empirical pmf of several runs of one mode, weighted by their request counts."""
    pmfs = [(from_observation(grid, _obs(r)), _obs(r).n) for r in runs]
    total = sum(n for _, n in pmfs)
    return GridPmf(grid, sum(p.mass * (n / total) for p, n in pmfs))


def decompose(
    runs: Sequence[Run],
    families: Sequence[Family] | None = None,
    progress: Progress | None = None,
    cold: ColdWakes | None = None,
    warm: Decomposition | None = None,
    explore: bool = True,
) -> Decomposition:
    """``cold``: cold wake-ups the proxy passes of these runs hold but the fitted passes must not (the simulator
    adds them itself); they are known parts of every sidecar run. ``warm``: a decomposition of the same runs over
    other cold wake-ups; its baseline is kept (no known parts under it) and each component also starts from its
    fit (``explore`` off: only from there, see ``fit_component``)."""
    report_progress = progress or (lambda _m: None)
    baselines = _select(runs, "baseline", frozenset()) or [r for r in runs if r.manifest.setup.path == "baseline"]
    if not baselines:
        raise MeshsimError("no baseline run among the runs given: proxy passes cannot be separated from "
                           "network + app (add a run with path: baseline)")
    observations = {r.id: _obs(r) for r in runs}
    grid = Grid.covering(list(observations.values()))
    base = _pooled(grid, baselines)
    main_base = max(baselines, key=lambda r: r.result.count)
    out = _baseline_fit(baselines, main_base, observations, families, warm, report_progress)

    def fit(name: str, chosen: list[Run], known: GridPmf, k: int) -> GridPmf:
        report_progress(f"fitting {name} from {', '.join(r.id for r in chosen)} ({k} passes over the known parts)")
        terms = [Term(observations[r.id], known, k) for r in chosen]
        comp = fit_component(name, terms, families, progress=report_progress,
                             warm=warm.components.get(name) if warm is not None else None, explore=explore)
        out.components[name] = comp
        if comp.rejected:
            out.notes.append(f"{name}: better-AIC candidates rejected ({'; '.join(comp.rejected)})")
        out.runs_of[name] = tuple(r.id for r in chosen)
        return component_pmf(comp)

    def woken(pmf: GridPmf, side: str) -> GridPmf:
        return pmf.plus(cold.pmf(grid, side)) if cold is not None else pmf

    server = _select(runs, "server-sidecar", frozenset())
    both = _select(runs, "both-sidecars", frozenset())
    p_in = None  # the two passes of each proxy as measured (fitted passes + cold wakes)
    pair_in = pair_out = None
    if server:
        p_in = fit("proxy.inbound_pass", server, woken(base, "inbound"), 2)
        pair_in = woken(power(p_in, 2), "inbound")
        if both:
            p_out = fit("proxy.outbound_pass", both, woken(base.plus(pair_in), "outbound"), 2)
            pair_out = woken(power(p_out, 2), "outbound")
    elif both:
        p_in = fit("proxy.pass", both, woken(woken(base, "inbound"), "outbound"), 4)
        pair_in, pair_out = woken(power(p_in, 2), "inbound"), woken(power(p_in, 2), "outbound")
        out.notes.append("no server-sidecar run: inbound and outbound passes share one fitted distribution")
    sidecar_runs = [r for r in runs if r.manifest.setup.path in ("server-sidecar", "both-sidecars")]
    if sidecar_runs and p_in is None:
        raise MeshsimError("sidecar runs need a run of the same path without features (plaintext, no tracing) "
                           "to fit the bare proxy passes")
    for feature in sorted({f for r in runs for f in r.features}):
        try:
            _fit_feature(feature, runs, base, pair_in, pair_out, fit, out)
        except MeshsimError as exc:  # an optional add-on that the runs cannot resolve is left out, not fatal
            out.notes.append(f"feature {feature}: not fitted, left out of the model ({exc})")
            for name in [n for n in out.components if n.startswith(f"feature.{feature}.")]:
                del out.components[name]
                out.runs_of.pop(name, None)
    multi = sorted({r.id for r in runs if len(r.features) > 1})
    if multi:
        out.notes.append(f"not used (several features at once, increments not separable): {', '.join(multi)}")
    _fit_proxy_lb(runs, grid, base, fit, out)
    return out


def _baseline_fit(baselines: Sequence[Run], main_base: Run, observations: dict[str, Observation],
                  families: Sequence[Family] | None, warm: Decomposition | None,
                  report_progress: Progress) -> Decomposition:
    """A decomposition holding the baseline's fit (``warm``'s when it fitted the same runs: nothing under it moved)."""
    ids = tuple(r.id for r in baselines)
    if warm is not None and warm.baseline_runs == ids:
        notes = [n for n in warm.notes if n.startswith("baseline: ")]
        base_fit = warm.baseline
    else:
        report_progress(f"fitting baseline (network + app) from {', '.join(ids)}")
        rejected: list[str] = []
        base_fit, _ = fit_best(observations[main_base.id], families, component="baseline (network + app)",
                               rejected=rejected)
        notes = [f"baseline: better-AIC candidates rejected ({'; '.join(rejected)})"] if rejected else []
    out = Decomposition(base_fit, ids, observations=observations, baseline_obs=observations[main_base.id])
    out.notes.extend(notes)
    return out


COLD_SHARES = (1.0, 0.5, 0.0)  # of the predicted cold wakes a reference run may hold, per side


# the sides whose cold wakes are known parts of a proxy pass's fit (a feature that refuses its runs is left out
# inside decompose, so only these can refuse; the load balancer's passes have no cold wakes under them)
COLD_SIDES = {"proxy.inbound_pass": ("inbound",), "proxy.outbound_pass": ("outbound",),
              "proxy.pass": ("inbound", "outbound")}


def decompose_with_cold_wakes(runs: Sequence[Run], cold: ColdWakes, families: Sequence[Family] | None = None,
                              progress: Progress | None = None, warm: Decomposition | None = None,
                              explore: bool = True) -> tuple[Decomposition, dict[str, float]]:
    """``decompose`` with the cold wakes the idle gaps predict as known parts. A busy machine keeps its cores
    awake, so a run may hold fewer than its gaps predict, and then no candidate reproduces it over all of them:
    the refusing side is tried with each smaller share (COLD_SHARES) and the share whose passes reproduce the runs
    most likely is kept (the passes must not hold the wake-ups the runs lack either).
    Returns the decomposition and the share of the predicted cold wakes taken per side."""
    report_progress = progress or (lambda _m: None)

    def attempt(share: dict[str, float]) -> Decomposition:
        known = cold.scaled("inbound", share["inbound"]).scaled("outbound", share["outbound"])
        return decompose(runs, families, report_progress, cold=known, warm=warm, explore=explore)

    full = {"inbound": 1.0, "outbound": 1.0}
    try:
        return attempt(full), full
    except FitRefused as exc:
        refused = exc
    if refused.component not in COLD_SIDES:
        raise refused
    tried: list[tuple[Decomposition, dict[str, float]]] = []
    for level in COLD_SHARES[1:]:
        sides = set(COLD_SIDES[refused.component])
        while True:  # a side that refuses in turn is taken down to the same share
            share = {s: level if s in sides else 1.0 for s in full}
            report_progress(f"{refused.component} refuses its runs over the predicted cold wakes; trying "
                + ", ".join(f"{share[s]:.0%} of the {s} side's" for s in sorted(sides)))
            try:
                tried.append((attempt(share), share))
                break
            except FitRefused as again:
                more = set(COLD_SIDES.get(again.component, ())) - sides
                if not more:
                    break
                sides |= more
    if not tried:
        raise refused
    common = set.intersection(*(set(d.components) for d, _ in tried))
    return max(tried, key=lambda t: sum(t[0].components[c].best.loglik for c in common))


def _fit_proxy_lb(runs: Sequence[Run], grid: Grid, base: GridPmf,
                  fit: FitStep, out: Decomposition) -> None:
    """Fit the central proxy's two passes over the client-lb runs (or the baseline ``base``)."""
    lb_runs = _select(runs, "proxy-lb", frozenset())
    if not lb_runs:
        return
    client_lb = _select(runs, "client-lb", frozenset())
    # client-lb through the caller's own sidecar holds that sidecar's two passes, which proxy-lb runs lack:
    # it is no known part of a proxy-lb run (the LB pass would come out as LB minus sidecar, about zero)
    via_sidecar = [r.id for r in client_lb if "client/sidecar" in r.manifest.cpu_seconds]
    if via_sidecar:
        out.notes.append("proxy-lb fitted against the baseline: the client-lb runs balance in the caller's "
                         f"sidecar ({', '.join(via_sidecar)}), whose passes proxy-lb runs do not have")
        client_lb = []
    elif not client_lb:
        out.notes.append("proxy-lb fitted against the baseline (no client-lb run)")
    ref = _pooled(grid, client_lb) if client_lb else base
    fit("load_balancer.pass", lb_runs, ref, 2)


def _fit_feature(feature: str, runs: Sequence[Run], base: GridPmf, pair_in: GridPmf | None, pair_out: GridPmf | None,
                 fit: FitStep, out: Decomposition) -> None:
    """Fit one feature's increment over the bare passes (inbound/outbound, or one shared by all passes);
    ``pair_in``/``pair_out``: each proxy's two bare passes as measured."""
    single = frozenset([feature])
    f_server = _select(runs, "server-sidecar", single)
    f_both = _select(runs, "both-sidecars", single)
    if (f_server or f_both) and pair_in is None:
        return
    if f_server:
        assert pair_in is not None
        f_in = fit(f"feature.{feature}.inbound", f_server, base.plus(pair_in), 2)
        if f_both and pair_out is not None:
            known = base.plus(pair_in).plus(pair_out).plus(power(f_in, 2))
            fit(f"feature.{feature}.outbound", f_both, known, 2)
        else:
            out.notes.append(f"feature {feature}: no both-sidecars run; outbound passes use the inbound increment")
    elif f_both and pair_in is not None and pair_out is not None:
        fit(f"feature.{feature}.pass", f_both, base.plus(pair_in).plus(pair_out), 4)
        out.notes.append(f"feature {feature}: only both-sidecars runs; one increment shared by all four passes")
