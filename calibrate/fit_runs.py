"""``fit_runs``: run folders in, a fitted mesh model file out (the library behind ``meshsim fit``)."""

from __future__ import annotations

import datetime as dt
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from meshsim.calibrate.load import load_dependence, side_cpu
from meshsim.calibrate.load.collector_wake import add_collector_wakeup
from meshsim.calibrate.load.feature_cpu import apply_feature_cpu, feature_increments
from meshsim.calibrate.fit_beyond_passes import add_beyond_passes, add_memory
from meshsim.calibrate.measure.dataset import Run, load_runs
from meshsim.calibrate.fit.deconvolution import ComponentFit
from meshsim.calibrate.fit.families import Family, candidates
from meshsim.calibrate.fit.model_file import build_model, proxy_skeleton, write_model
from meshsim.calibrate.fit.baseline_cpu import baseline_cpu
from meshsim.calibrate.fit.sim_check import with_lab_scheduler
from meshsim.calibrate.fit.decomposition import Decomposition, decompose
from meshsim.calibrate.fit.fit_inputs import check_fit_names, check_identified
from meshsim.calibrate.load.wake_replays import fit_wakeups_on_replays
from meshsim.distributions import Distribution
from meshsim.distribution_spec import spec_with_meta
from meshsim.errors import MeshsimError, ModelError
from meshsim.outputs import check_file, check_folder
from meshsim.progress import Progress

METHOD = ("interval-censored maximum likelihood on fortio histogram buckets (raw access-log samples when present); "
          "families lognormal/gamma/Weibull, plain or shifted, and two-component mixtures (body + lognormal tail), "
          "chosen by AIC; proxy passes and feature increments deconvolved by likelihood: the baseline run's "
          "empirical distribution convolved (FFT on a grid) with k i.i.d. copies of the fitted pass reproduces "
          "each mode's histogram")


@dataclass(frozen=True)
class ComponentRow:
    component: str
    family: str
    mean_ms: float
    p50_ms: float
    p99_ms: float
    aic: float
    ks: float
    n: int
    runs: tuple[str, ...]


@dataclass
class FitSummary:
    mesh: str
    out: Path | None
    rows: list[ComponentRow]
    flagged: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    model: dict[str, Any] = field(default_factory=dict)
    report_files: list[Path] = field(default_factory=list)
    decomposition: Decomposition | None = None
    checks: list[Any] = field(default_factory=list)  # simcheck.ModeCheck per run when check=True

    def table(self) -> str:
        head = f"{'component':32} {'family':44} {'mean ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'KS':>7} {'n':>8}"
        lines = [head, "-" * len(head)]
        for r in self.rows:
            lines.append(f"{r.component:32} {r.family[:44]:44} {r.mean_ms:8.4f} {r.p50_ms:8.4f} {r.p99_ms:8.4f} "
                         f"{r.ks:7.4f} {r.n:8d}")
        for f in self.flagged:
            lines.append(f"FLAGGED {f}")
        for e in self.errors:
            lines.append(f"SKIPPED {e}")
        for n in self.notes:
            lines.append(f"note: {n}")
        for c in self.checks:
            meas = "/".join(f"{v:.3f}" for v in c.measured_ms)
            sim = "/".join(f"{v:.3f}" for v in c.model_ms)
            verdict = "ok" if c.within(0.10) else "OFF BY MORE THAN 10 %"
            lines.append(f"check {c.run_id}: p50/p90/p99 measured {meas} ms, simulated {sim} ms: {verdict}")
        if self.out is not None:
            lines.append(f"wrote {self.out}")
        return "\n".join(lines)


def _row(name: str, dist: Distribution, fit: Any, runs: Sequence[str]) -> ComponentRow:
    return ComponentRow(name, fit.family.name, dist.mean * 1e3, dist.quantile(0.5) * 1e3, dist.quantile(0.99) * 1e3,
                        fit.aic, fit.gof.ks if fit.gof else float("nan"), fit.n, tuple(runs))


def _fit_meta(comp: ComponentFit, runs: Sequence[str]) -> dict[str, Any]:
    g = comp.gof[0]
    return {"family": comp.best.family.name, "aic": round(comp.best.aic, 1), "ks": round(g.ks, 5),
            "chi2_per_dof": round(g.chi2 / g.dof, 2), "n": comp.best.n, "runs": list(runs),
            "runner_up": [f"{f.family.name} (dAIC {f.aic - comp.best.aic:.1f})"
                          for f in comp.fits[1:] if f.aic >= comp.best.aic][:2],
            **({"rejected": list(comp.rejected)} if comp.rejected else {})}


def _spec(comp: ComponentFit, runs: Sequence[str], what: str) -> dict[str, Any]:
    return spec_with_meta(comp.best.distribution, source=f"fitted by meshsim fit from runs {', '.join(runs)}: {what}",
                          fit=_fit_meta(comp, runs))


def _reference_payload(runs: Sequence[Run]) -> tuple[int, list[Run]]:
    """The payload most runs share (ties: the smallest) and the runs at other payloads.

    A pass fitted over runs of different payloads would convolve a pooled baseline with a pooled pass, which is
    not the pool of the per-payload convolutions: decomposition stays within one payload."""
    counts = Counter(r.manifest.setup.payload_bytes for r in runs)
    ref = max(counts, key=lambda b: (counts[b], -b))
    return ref, [r for r in runs if r.manifest.setup.payload_bytes != ref]


def _choose_group(runs: Sequence[Run]) -> tuple[float | None, list[Run], list[Run]]:
    """Reference rate group (most runs; ties: highest rate) and the other runs.

    The decomposition assumes requests do not queue inside the proxies, which one connection guarantees: when
    there are one-connection runs, only they form the reference group (runs with more connections still count
    for the load dependence, where they show how passes share a worker's wake-up).
    """
    pool = [r for r in runs if r.manifest.load.connections == 1] or list(runs)
    counts = Counter(r.rps for r in pool)
    ref = max(counts, key=lambda q: (counts[q], q or 0.0))
    group = [r for r in pool if r.rps == ref]
    return ref, group, [r for r in runs if r not in group]


def _features(d: Decomposition, defaults: Iterable[str], descriptions: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    names = sorted({n.split(".")[1] for n in d.components if n.startswith("feature.")})
    for f in names:
        comps = {side: d.components.get(f"feature.{f}.{side}") for side in ("inbound", "outbound", "pass")}
        runs = sorted({r for side in comps for r in d.runs_of.get(f"feature.{f}.{side}", ())})
        if comps["pass"] is not None:
            per_pass: Any = _spec(comps["pass"], d.runs_of[f"feature.{f}.pass"], f"{f} increment per pass")
        else:
            inbound = comps["inbound"]
            assert inbound is not None
            spec_in = _spec(inbound, d.runs_of[f"feature.{f}.inbound"], f"{f} increment per inbound pass")
            outbound = comps["outbound"]
            spec_out = (_spec(outbound, d.runs_of[f"feature.{f}.outbound"], f"{f} increment per outbound pass")
                        if outbound is not None else dict(spec_in, source=spec_in["source"] + " (no both-sidecars "
                                                         "run: outbound assumed equal to inbound)"))
            per_pass = {"inbound_request": spec_in, "inbound_response": spec_in,
                        "outbound_request": spec_out, "outbound_response": spec_out}
        out[f] = {"default": f in set(defaults), "description": descriptions.get(f, f"{f} (fitted increment)"),
                  "per_pass": per_pass, "source": f"fitted from runs {', '.join(runs)}"}
    return out


def fit_runs(
    run_dirs: Sequence[str | Path],
    mesh: str,
    out: str | Path | None,
    report_dir: str | Path | None = None,
    progress: Progress | None = None,
    *,
    include_flagged: bool = False,
    default_features: Iterable[str] = (),
    feature_descriptions: Mapping[str, str] | None = None,
    families: Sequence[Family] | None = None,
    version: str | None = None,
    description: str | None = None,
    refine: bool = False,
    check: bool = False,
    network_hop: bool = True,
    connection_balance: str = "hash",
) -> FitSummary:
    """Fit a mesh model from run folders; writes ``out`` (atomically) unless it is None.

    ``refine``: afterwards move the pass shifts until the simulator, driven by the runs' own fortio workload,
    reproduces their means (simulation-based refinement). ``check``: simulate every run with the written model
    and report measured vs simulated p50/p90/p99 in the summary. ``network_hop``: fit the baseline runs' topology's
    client <-> entry hop (heavy-tailed, from p50..p99.9) into ``calibration.network_hop`` and ``cluster.cross_node``.
    ``connection_balance``: how the proxy's listener hands connections to its workers (a fact of its version, see
    ``meshsim.mesh.BALANCE``); the replays of bursts and idle gaps use it.
    """
    report_progress = progress or (lambda _m: None)
    if out is not None:  # checked before minutes of fitting, not after
        check_file(out, "out", parents=True)
    if report_dir is not None:
        check_folder(report_dir, "report")
    batch = load_runs(run_dirs, progress=report_progress)
    check_fit_names(mesh, batch.runs, default_features, feature_descriptions or {})
    summary = FitSummary(mesh, None, [], errors=list(batch.errors))
    usable = _same_payload(fittable_runs(batch.runs, include_flagged, summary), summary, report_progress)
    ref_rps, ref_runs, other_runs = _choose_group(usable)
    if other_runs:
        report_progress(f"reference rate {ref_rps} rps, one connection; {len(other_runs)} other runs (other rates or more "
            "connections) used for load dependence")
    workers = Counter(r.manifest.setup.proxy_workers for r in usable if r.manifest.setup.proxy_workers)
    n_workers = workers.most_common(1)[0][0] if workers else 2
    extra = load_dependence.baseline_dependence(usable)
    fams = families or candidates()
    decomp = decompose(ref_runs, fams, report_progress)
    check_identified(decomp, ref_runs)
    replay = load_dependence.wake_runs(usable)
    if other_runs and replay:
        def assemble(with_extra: load_dependence.LoadDependenceFit, with_decomp: Decomposition) -> dict[str, Any]:
            return _assemble(mesh, with_decomp, with_extra, usable, n_workers, ref_rps, other_runs, [], [],
                             default_features, feature_descriptions, version, description, connection_balance)

        decomp = fit_wakeups_on_replays(assemble, decomp, replay, usable, ref_runs, other_runs, extra, fams, report_progress)
    summary.decomposition = decomp
    model = _assemble(mesh, decomp, extra, usable, n_workers, ref_rps, other_runs, summary.notes, summary.flagged,
                      default_features, feature_descriptions, version, description, connection_balance)
    add_beyond_passes(model, saturated_runs(batch.runs, usable), usable, summary.notes, report_progress,
                      network_hop)
    # after the held fractions, which decide how much of a feature's increment is already CPU
    apply_feature_cpu(model.get("features") or {}, model.get("proxy"), feature_increments(decomp), usable,
                      summary.notes)
    add_collector_wakeup(model, usable, summary.notes, report_progress)
    summary.rows.append(_row("baseline (network + app)", decomp.baseline.distribution, decomp.baseline,
                             decomp.baseline_runs))
    for name, comp in decomp.components.items():
        summary.rows.append(_row(name, comp.best.distribution, comp.best, decomp.runs_of[name]))
    summary.model = model
    if out is not None:
        summary.out = write_model(model, out)
    if (refine or check) and summary.out is not None:
        _refine_and_check(summary, summary.out, ref_runs, refine, check, report_progress)
    if report_dir is not None:
        from meshsim.calibrate.fit.fit_report import write_report

        summary.report_files = write_report(decomp, Path(report_dir), report_progress)
    return summary


def _leaf_waits(run: Run) -> bool:
    try:
        return run.manifest.load.leaf_delay_s > 0
    except ModelError:  # a distribution of delays: waits too
        return True


def fittable_runs(runs: Sequence[Run], include_flagged: bool, summary: FitSummary) -> list[Run]:
    """The runs to fit: every ok run, and the flagged ones too with ``include_flagged`` (each flag is reported)."""
    usable = []
    for run in runs:
        if _leaf_waits(run):  # the passes are deconvolved from the baseline: a leaf's wait is not in it
            summary.flagged.append(f"{run.id}: its leaf apps wait (delay= in {run.manifest.load.url}) -> not fitted")
            continue
        if run.status != "ok":
            why = "; ".join(run.quality.reasons) or f"manifest status {run.manifest.status}"
            verdict = "FITTED (--include-flagged)" if include_flagged else "not fitted (use --include-flagged)"
            summary.flagged.append(f"{run.id}: {run.status}: {why} -> {verdict}")
            if not include_flagged:
                continue
        usable.append(run)
    if not usable:
        problems = "; ".join(summary.errors + summary.flagged) or "no run folders given"
        raise MeshsimError(f"meshsim fit: no usable runs ({problems})")
    return usable


def saturated_runs(runs: Sequence[Run], usable: Sequence[Run]) -> list[dict[str, Any]]:
    """The saturated runs left out of the fit, each a calibration result of its own: the rate its setup carried.

    A run that fell behind its requested rate has no defined arrival process to replay, so its latencies are not
    fitted; what it carried is still a measured capacity of that setup (a load ladder's top rung on a slower host).
    ``meshsim validate`` counts these runs with the calibration, never as held-out."""
    fitted = {r.id for r in usable}
    return [{"run": r.id, "topology": r.manifest.setup.topology, "path": r.manifest.setup.path,
             "features": list(r.manifest.setup.features), "connections": r.manifest.load.connections,
             "requested_rps": r.rps, "achieved_rps": round(float(r.result.actual_rps), 1),
             "source": f"fortio ActualQPS of run {r.id}"}
            for r in runs if r.status == "saturated" and r.id not in fitted]


def _same_payload(usable: list[Run], summary: FitSummary, report_progress: Progress) -> list[Run]:
    """The runs at the reference payload; the others are noted and left out."""
    payload, other_payload = _reference_payload(usable)
    if not other_payload:
        return usable
    note = (f"runs at payloads other than {payload} B not used for the passes (the per-KB cost is not fitted): "
            + ", ".join(r.id for r in other_payload))
    report_progress(note)
    summary.notes.append(note)
    return [r for r in usable if r not in other_payload]


def _refine_and_check(summary: FitSummary, model_file: Path, ref_runs: Sequence[Run], refine: bool, check: bool,
                      report_progress: Progress) -> None:
    """Refine the written model's pass shifts by simulation and/or simulate every reference run with it."""
    from meshsim.calibrate.fit import sim_check as simcheck

    with tempfile.TemporaryDirectory(prefix="meshsim-fit-") as work:
        if refine:
            changes = simcheck.refine(model_file, ref_runs, model_file, Path(work), progress=report_progress)
            summary.notes.append("refined by simulation: pass shift changes (ms) " +
                                 ", ".join(f"{k} {v:+.4f}" for k, v in changes.items()))
        if check:
            summary.checks = simcheck.simulate_runs(model_file, ref_runs, progress=report_progress)


def _proxy_section(mesh: str, decomp: Decomposition, n_workers: int, cpu_limit: float | None,
                   balance: str = "hash") -> dict[str, Any] | None:
    """The sidecar proxy's block with its fitted passes (None when no proxy pass was fitted)."""
    comps = decomp.components
    if "proxy.inbound_pass" not in comps and "proxy.pass" not in comps:
        return None
    proxy = proxy_skeleton(mesh, n_workers, cpu_limit, "workers and cpu_limit from the run manifests; "
                           "header_bytes and per_kb_ms not identified (one payload size): pass times include "
                           "the payload of the runs" + ("" if balance == "hash" else f"; connection_balance "
                           f"{balance}: given to meshsim fit (--connection-balance), a fact of the proxy's version"))
    proxy["connection_balance"] = balance
    proxy["loopback_in_passes"] = True  # a mode's latency beyond the baseline's: the app-sidecar hops included
    if "proxy.pass" in comps:
        spec = _spec(comps["proxy.pass"], decomp.runs_of["proxy.pass"], "one pass of the sidecar proxy")
        proxy["passes"] = {k: spec for k in ("inbound_request", "inbound_response", "outbound_request",
                                             "outbound_response")}
        return proxy
    spec_in = _spec(comps["proxy.inbound_pass"], decomp.runs_of["proxy.inbound_pass"],
                    "one pass of the server-side sidecar (request and response passes i.i.d.)")
    if "proxy.outbound_pass" in comps:
        spec_out = _spec(comps["proxy.outbound_pass"], decomp.runs_of["proxy.outbound_pass"],
                         "one pass of the client-side sidecar (request and response passes i.i.d.)")
    else:
        spec_out = dict(spec_in, source=spec_in["source"] + " (no both-sidecars run: outbound = inbound)")
    proxy["passes"] = {"inbound_request": spec_in, "inbound_response": spec_in,
                       "outbound_request": spec_out, "outbound_response": spec_out}
    return proxy


def _lb_section(mesh: str, decomp: Decomposition, n_workers: int) -> dict[str, Any] | None:
    """The central proxy-LB's block with its fitted passes (None when no LB pass was fitted)."""
    if "load_balancer.pass" not in decomp.components:
        return None
    spec = _spec(decomp.components["load_balancer.pass"], decomp.runs_of["load_balancer.pass"],
                 "one pass of the proxy LB")
    lb = {**proxy_skeleton(mesh, n_workers, None, "fitted proxy-LB passes"), "policy": "round_robin",
          "passes": {"request": spec, "response": spec}}
    lb.pop("placement", None)
    lb.pop("header_bytes", None)
    lb.pop("per_kb_ms", None)
    return lb


def _assemble(mesh: str, decomp: Decomposition, extra: load_dependence.LoadDependenceFit, usable: Sequence[Run], n_workers: int,
              ref_rps: float | None, other_runs: Sequence[Run], notes: list[str], flagged: list[str],
              default_features: Iterable[str], feature_descriptions: Mapping[str, str] | None, version: str | None,
              description: str | None, balance: str = "hash") -> dict[str, Any]:
    """The mesh model (schema meshsim/mesh/v1) from a decomposition and what runs at other rates added."""
    notes.extend(decomp.notes)
    comps = decomp.components
    limits = {r.manifest.setup.proxy_cpu_limit for r in usable}
    cpu_limit = limits.pop() if len(limits) == 1 else None
    sources = {r.id: r.manifest.provenance for r in usable}
    proxy = _proxy_section(mesh, decomp, n_workers, cpu_limit, balance)
    lb = _lb_section(mesh, decomp, n_workers)
    features = _features(decomp, default_features, feature_descriptions or {})
    cpu = load_dependence.cpu(usable, decomp, extra.notes)
    notes.extend(extra.notes)
    if any(n in comps for n in ("proxy.inbound_pass", "proxy.outbound_pass", "load_balancer.pass")):
        notes.append("a proxy's request and response passes are fitted as i.i.d. (end-to-end latencies "
                     "cannot tell them apart)")
    if not other_runs:
        notes.append(f"all runs at {ref_rps} rps: no load dependence can be fitted; the passes hold "
                     "whatever wake-up cost that rate implies")
    if proxy is not None and extra.wakeup is not None:
        proxy["wakeup"] = extra.wakeup
    if proxy is not None:
        add_memory(proxy, features, usable, notes)
    fractions = load_dependence.cpu_fractions(cpu, decomp, notes, extra.cpu_without_wake)
    for section, block in (("proxy", proxy), ("load_balancer", lb)):
        if block is not None and section in fractions:
            block["cpu_fraction"], why = fractions[section]
            block["source"] = f"{block['source']}; {why}"
        elif block is not None:
            notes.append(f"{section}: no usable CPU per request in the runs: cpu_fraction not written "
                         "(the default 1 treats every pass as CPU work)")
    if proxy is not None:
        side_cpu.apply_sides(proxy, side_cpu.fit_sides(cpu, decomp, extra.cpu_without_wake), notes)
    gof = {"baseline": {**decomp.baseline.summary(), "runs": list(decomp.baseline_runs)}}
    gof.update({name: _fit_meta(c, decomp.runs_of[name]) for name, c in comps.items()})
    calibration = {
        "fitted_at": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "fitted_from": [r.id for r in usable],
        "reference_rps": ref_rps,
        "method": METHOD,
        "goodness_of_fit": gof,
        "baseline": spec_with_meta(decomp.baseline.distribution, source="network + app of the baseline runs "
                                   f"{', '.join(decomp.baseline_runs)} (for a matching topology)"),
        "flagged_runs": flagged,
        "cpu": cpu,
        **({"baseline_cpu": held} if (held := baseline_cpu(usable)) else {}),
        **({"baseline_wakeup": extra.baseline_wakeup} if extra.baseline_wakeup else {}),
        "notes": "; ".join(notes) or "none",
    }
    versions = sorted({r.manifest.setup.mesh_version for r in usable if r.manifest.setup.mesh_version})
    model = build_model(
        name=mesh,
        version=version or (versions[0] if len(versions) == 1 else ", ".join(versions)),
        description=description or f"{mesh} fitted by meshsim fit from {len(usable)} runs at {ref_rps} rps.",
        sources=sources, proxy=proxy, features=features, load_balancer=lb, calibration=calibration,
    )
    return with_lab_scheduler(model, usable)
