"""What ``fit_runs`` adds to a model beyond the passes, each from the runs that show it: the cluster's wake-up and the
graded share of the proxies' (by simulation), the held fraction of a pass (bursts, by simulation), the network hop's
tail (baseline runs, by simulation), how often a thread keeps a lab host's core till the next tick (loaded runs' p99,
by simulation), memory (recorded RSS) and how the runs drove fortio.
Each step writes its part into the model dict with its source, or a note saying why it could not."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from meshsim.calibrate.load import memory_fit
from meshsim.calibrate.fit.run_load import runs_load_block
from meshsim.calibrate.load.graded_share import add_graded_share
from meshsim.calibrate.measure.dataset import Run
from meshsim.errors import MeshsimError
from meshsim.progress import Progress


def add_beyond_passes(model: dict[str, Any], saturated: list[dict[str, Any]], usable: Sequence[Run],
                      notes: list[str], report_progress: Progress, network_hop: bool) -> None:
    """Measured capacities (``saturated``: the saturated runs left out of the fit), the cluster's wake-up and the
    graded share of the proxies' (before the burst replays that need them), each side's held fraction, the
    cluster's network hop."""
    if saturated:
        model["calibration"]["saturated_runs"] = saturated
    on_topology = network_hop and add_cluster_on_topology(model, usable, notes, report_progress)
    if not on_topology:
        add_cluster_wakeup(model, usable, notes, report_progress)
    add_graded_share(model, usable, notes, report_progress)
    add_held_fraction(model, usable, notes, report_progress)
    if network_hop and not on_topology:
        add_network_hop(model, usable, notes, report_progress)
    add_tick_hold(model, usable, notes, report_progress)
    block, why = runs_load_block(usable)
    if block is not None:
        model.setdefault("cluster", {})["load"] = block
    else:
        notes.append(why)
    if model.get("cluster"):
        model["cluster"]["source"] = ("the calibration cluster's own runs (each entry says which): predictions with "
                                      "this model use them in place of the topology's (predict --cluster topology "
                                      "keeps the topology's)")


def add_held_fraction(model: dict[str, Any], usable: Sequence[Run], notes: list[str], report_progress: Progress) -> None:
    """With bursts among the runs, each side's fraction of a pass that holds its worker, fitted by simulation (the
    server-only bursts give the inbound side, both sidecars then the outbound; then each feature's own from bursts
    with it on, ``feature_held``), bounded by the CPU-based fraction
    where the runs measured the proxy's CPU: a pass holds its worker only as long as it computes. A model whose
    sidecar sides got their CPU measured (``proxy.sides``) keeps those: CPU seconds are the direct reading of what
    holds a worker, and a burst's latency also carries host-level scheduling delay that no held fraction explains.
    Without bursts (one-connection runs cannot show it) the CPU-based estimate stays, or, with no CPU data either,
    the lab's measured fraction is used as a prior and the fit says so."""
    from meshsim.calibrate.load.feature_held import apply_feature_fractions, fit_feature_fractions
    from meshsim.calibrate.load.held_fraction import (apply_held_fraction, apply_prior, burst_runs, cpu_bounds,
                                                      fit_held_fraction)

    if not model.get("proxy"):
        return
    bursts = burst_runs(usable)
    if model["proxy"].get("sides"):  # CPU measured per side says what holds each side's worker, directly
        if bursts:
            notes.append(f"{len(bursts)} burst runs not used for the held fraction: each side's comes from its "
                         "measured CPU per request (proxy.sides)")
        return
    if not bursts:
        apply_prior(model, notes, report_progress)
        return
    report_progress(f"fitting the held fraction of a pass by simulation from {len(burst_runs(usable))} burst runs ...")
    with tempfile.TemporaryDirectory(prefix="meshsim-held-") as work:
        fits = fit_held_fraction(model, usable, Path(work), progress=report_progress, bounds=cpu_bounds(model))
        apply_held_fraction(model, fits, notes)
        # then each feature's own, from its bursts, with the sides' fractions in place
        apply_feature_fractions(model, fit_feature_fractions(model, usable, Path(work), progress=report_progress),
                                notes)


def add_tick_hold(model: dict[str, Any], usable: Sequence[Run], notes: list[str], report_progress: Progress) -> None:
    """``cluster.tick_hold``: how often a thread keeps a core of the lab's host till the scheduler's next tick, from
    the runs with several connections on that host (their p99, by simulation; calibrate/load/tick_hold_fit.py).
    Last, since every part before it shapes the replayed tails."""
    from meshsim.calibrate.load.tick_hold_fit import fit_tick_hold, tick_hold_runs

    chosen = tick_hold_runs(usable, model)
    if not model.get("proxy") or not chosen:
        return
    report_progress(f"fitting how often a thread keeps a core till the next tick from {len(chosen)} "
                    "runs with several connections on the host ...")
    with tempfile.TemporaryDirectory(prefix="meshsim-tick-") as work:
        fit = fit_tick_hold(model, usable, Path(work), progress=report_progress)
    if fit is None:
        return
    model.setdefault("cluster", {})["tick_hold"] = fit.block()
    notes.append(f"cluster.tick_hold: share {fit.share:g} of the bursts that find the host's cores taken wait for "
                 f"the next {fit.tick_ms:g} ms tick, from {', '.join(fit.runs)}")


def add_cluster_on_topology(model: dict[str, Any], usable: Sequence[Run], notes: list[str],
                            report_progress: Progress) -> bool:
    """A cluster's runs on one shipped topology whose client and server are on different nodes (Istio's pipeline on
    ``single``): its cross-node hop and wake-up are fitted on that topology, and every later replay of the fit (the
    bursts' held fractions, the check, ``meshsim validate``) uses it (``calibration.replay_topology``), as
    ``meshsim predict --topology NAME`` does: a burst then queues on the fortio client's and the app's cores in the
    fit as in the prediction, and the wake-up explains only what that queueing does not. The hop first (one
    connection: short idle gaps, a wake-up hardly shows), the wake-up with it, the hop again with the wake-up.
    False (nothing written) when the runs are not of that kind or their topology does not describe them."""
    from meshsim.calibrate.fit.network_hop_fit import baseline_runs_for_hop, hop_key
    from meshsim.calibrate.fit.sim_check import fit_topology
    from meshsim.catalog import load_topology

    chosen = baseline_runs_for_hop(usable)
    names = {r.manifest.setup.topology for r in usable}
    if not chosen or len(names) != 1 or any(r.lab_host_cores is not None for r in usable):
        return False
    name = names.pop()
    try:
        if hop_key(load_topology(name)) != "cross_node":
            return False
    except MeshsimError:
        return False
    trial = {**model, "calibration": {**model["calibration"], "replay_topology": name},
             "cluster": {k: v for k, v in (model.get("cluster") or {}).items() if k not in ("wakeup", "cross_node")}}
    report_progress(f"fitting the cluster's network hop and wake-up on topology {name!r}, where its runs were made")
    first: list[str] = []  # the hop without a wake-up is a first step: its note is replaced by the final one's
    said: list[str] = []  # written to ``notes`` only if the whole step succeeds
    if not _fit_hop_into(trial, usable, fit_topology(trial), first, report_progress):
        notes.extend(first)
        return False
    add_cluster_wakeup(trial, usable, said, report_progress)
    if not (trial.get("cluster") or {}).get("wakeup"):  # none fitted: the topology's own assumed one is not used
        trial["cluster"]["wakeup"] = {"delay_ms": 0.0, "tau_ms": 1.0, "source": (
            "meshsim fit: no wake-up fitted from the baseline runs; none, in place of the topology's assumed one")}
        said.extend(first)
    else:
        wake = trial["cluster"]["wakeup"]
        wake["source"] = f"{wake['source']} (replayed on topology {name!r} with the cross-node hop fitted before it)"
        if not _fit_hop_into(trial, usable, fit_topology(trial), said, report_progress):
            notes.append(f"{said[-1]} (with the wake-up fitted on it): fitted on the calibration baseline instead")
            return False
    notes.extend(said)
    model.clear()
    model.update(trial)
    model["calibration"]["replay_topology_source"] = (
        f"every run names topology {name!r}, whose client and server are on different nodes: the fit's replays and "
        "meshsim validate simulate that topology on this cluster (cluster.cross_node, cluster.wakeup), as predict does")
    return True


def _fit_hop_into(model: dict[str, Any], usable: Sequence[Run], topology: Any, notes: list[str],
                  report_progress: Progress) -> bool:
    """The cross-node hop fitted on ``topology`` written into ``model`` (False, with a note, when it fails)."""
    from meshsim.calibrate.fit.network_hop_fit import fit_network_hop

    try:
        fitted = fit_network_hop(usable, topology=topology, progress=report_progress)
    except MeshsimError as exc:
        notes.append(f"network hop not fitted: {exc}")
        return False
    _write_hop(model, fitted, notes)
    return True


def add_cluster_wakeup(model: dict[str, Any], usable: Sequence[Run], notes: list[str], report_progress: Progress) -> None:
    """``cluster.wakeup``: how the cluster's apps wake after idling, from baseline runs at idle gaps far enough
    apart (one connection and a burst of connections at one rate, or one connection at several rates); replays of
    burst runs (the held fraction) then see the baseline a burst really has."""
    from meshsim.calibrate.load.baseline_wake import fit_baseline_wake

    fit = fit_baseline_wake(model, usable, progress=report_progress)
    if fit is None:
        notes.append("cluster.wakeup not fitted: no two baseline runs at idle gaps far enough apart")
        return
    if fit.delay_ms <= 0.0:
        notes.append("cluster.wakeup: the baseline runs show no wake-up (best fit without one)")
        return
    model.setdefault("cluster", {})["wakeup"] = fit.block()
    notes.append(f"cluster.wakeup: delay {fit.delay_ms:g} ms, tau {fit.tau_ms:g} ms, from {', '.join(fit.runs)}")


def add_network_hop(model: dict[str, Any], usable: Sequence[Run], notes: list[str], report_progress: Progress) -> None:
    """``calibration.network_hop``: the hop of the baseline runs' (shipped) topology that makes its simulated baseline
    reproduce their percentiles up to p99.9; a topology that does not describe the runs is noted, not fatal."""
    from meshsim.calibrate.fit.network_hop_fit import baseline_runs_for_hop, fit_network_hop

    chosen = baseline_runs_for_hop(usable)
    if not chosen:
        return
    try:
        fitted = fit_network_hop(usable, topology=_on_fitted_cluster(model, chosen), progress=report_progress)
    except MeshsimError as exc:
        notes.append(f"network hop not fitted: {exc}")
        return
    _write_hop(model, fitted, notes)


def _write_hop(model: dict[str, Any], fitted: Any, notes: list[str]) -> None:
    """``calibration.network_hop`` (and ``cluster.cross_node`` for a hop between nodes) from a hop fit."""
    rows = fitted.fit.summary()["measured_vs_fitted_ms"]
    tails = "; ".join(f"{run} p99 {r['p99'][0]:.3f}/{r['p99'][1]:.3f}, p99.9 {r['p99.9'][0]:.3f}/{r['p99.9'][1]:.3f}"
                      for run, r in rows.items() if "p99" in r and "p99.9" in r)
    notes.append(f"network hop: {fitted.key} of topology {fitted.topology!r} fitted as "
                 f"{', '.join(f'{k} {v:.4g}' for k, v in _flat_numbers(fitted.spec()).items())} "
                 f"(measured/fitted ms: {tails or 'runs too short for p99.9'}) -> calibration.network_hop")
    model["calibration"]["network_hop"] = {
        "topology": fitted.topology, "hop": fitted.key, "distribution": fitted.spec(),
        "source": f"replace network.{fitted.key} of topology {fitted.topology!r} with this distribution to predict "
                  "these runs' tails (the fitted passes already hold their own loopback hops)"}
    if fitted.key == "cross_node":  # a hop between two of the cluster's nodes: every prediction on it uses it
        model.setdefault("cluster", {})["cross_node"] = {
            **fitted.spec(), "source": f"fitted by meshsim fit from baseline runs {', '.join(fitted.runs)}: the "
            f"cross-node hop that makes topology {fitted.topology!r} (with the cluster's wake-up) reproduce their "
            "p50..p99.9 (calibrate/fit/network_hop_fit.py)"}


def _on_fitted_cluster(model: Mapping[str, Any], runs: Sequence[Run]) -> Any:
    """The baseline runs' topology with the cluster's fitted wake-up (None: as shipped, when none was fitted)."""
    from meshsim.catalog import load_topology
    from meshsim.cluster_facts import ClusterFacts
    from meshsim.wakeup import parse_wakeup
    from meshsim.yamlio import Section

    wake = (model.get("cluster") or {}).get("wakeup")
    names = {r.manifest.setup.topology for r in runs}
    if not wake or len(names) != 1:
        return None
    facts = ClusterFacts(wakeup=parse_wakeup(Section(wake, "cluster.wakeup")))
    return facts.applied_to(load_topology(names.pop()))


def _flat_numbers(spec: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of a distribution spec, nested keys joined by dots (body.median_ms), for a one-line note."""
    out: dict[str, float] = {}
    for key, value in spec.items():
        if isinstance(value, Mapping) and key != "fit":
            out.update(_flat_numbers(value, f"{prefix}{key}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"{prefix}{key}"] = float(value)
    return out


def add_memory(proxy: dict[str, Any], features: dict[str, Any], usable: Sequence[Run], notes: list[str]) -> None:
    """The proxy's memory block and its features' memory_mb from the sidecars' RSS the runs recorded."""
    block, per_feature, memory_notes = memory_fit.memory_from_runs(usable)
    notes.extend(memory_notes)
    if block is None:
        return
    proxy["memory"] = block
    for name, mb in per_feature.items():
        if name in features:
            features[name]["memory_mb"] = mb
