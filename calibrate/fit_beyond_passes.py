"""What ``fit_runs`` adds to a model beyond the passes, each from the runs that show it: the held fraction of a
pass (bursts, by simulation), the network hop's tail (baseline runs, by simulation) and memory (recorded RSS).
Each step writes its part into the model dict with its source, or a note saying why it could not."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from meshsim.calibrate.load import memory_fit
from meshsim.calibrate.measure.dataset import Run
from meshsim.errors import MeshsimError
from meshsim.progress import Progress


def add_held_fraction(model: dict[str, Any], usable: Sequence[Run], notes: list[str], say: Progress) -> None:
    """With bursts among the runs, the fraction of a pass that holds its worker, fitted by simulation, replaces the
    CPU-based ``cpu_fraction``; without them (one-connection runs cannot show it) the CPU-based estimate stays, or,
    with no CPU data either, the lab's measured fraction is used as a prior and the fit says so. A model whose
    sidecar sides got their CPU measured (``proxy.sides``) keeps those: CPU seconds are the direct reading of what
    holds a worker, and a burst's latency also carries host-level scheduling delay that no held fraction explains."""
    from meshsim.calibrate.load.held_fraction import apply_held_fraction, apply_prior, burst_runs, fit_held_fraction

    if not model.get("proxy"):
        return
    bursts = burst_runs(usable)
    if model["proxy"].get("sides"):  # CPU measured per side says what holds each side's worker, directly
        if bursts:
            notes.append(f"{len(bursts)} burst runs not used for the held fraction: each side's comes from its "
                         "measured CPU per request (proxy.sides)")
        return
    if not bursts:
        apply_prior(model, notes, say)
        return
    say(f"fitting the held fraction of a pass by simulation from {len(bursts)} burst runs ...")
    with tempfile.TemporaryDirectory(prefix="meshsim-held-") as work:
        fit = fit_held_fraction(model, usable, Path(work), progress=say)
    apply_held_fraction(model, fit, notes)


def add_network_hop(model: dict[str, Any], usable: Sequence[Run], notes: list[str], say: Progress) -> None:
    """``calibration.network_hop``: the hop of the baseline runs' (shipped) topology that makes its simulated baseline
    reproduce their percentiles up to p99.9; a topology that does not describe the runs is noted, not fatal."""
    from meshsim.calibrate.fit.network_hop_fit import baseline_runs_for_hop, fit_network_hop

    if not baseline_runs_for_hop(usable):
        return
    try:
        fitted = fit_network_hop(usable, progress=say)
    except MeshsimError as exc:
        notes.append(f"network hop not fitted: {exc}")
        return
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
