"""What part of a feature's per-pass time holds the proxy worker, fitted by simulation from bursts with it on.

A feature's per-pass increment (Istio 1.2's Mixer filter: attributes gathered, a report batched, a policy check) is
fitted from one-connection runs like the pass it rides on, and holds the worker for the side's held fraction unless
its own bursts say otherwise. Where the runs have bursts with exactly this feature on (fortio's connections firing
together, no -uniform), each is replayed with the side fractions already fitted from the plain bursts and the
feature's fraction on that side searched as the sides' were (``held_fraction.search_fraction``): the server-only
bursts give the inbound side, both sidecars then the outbound given the inbound. The pass then holds its worker up to
one ceiling whose mean is the mix of the pass's and the feature's held parts (``meshsim.hold_ceiling``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from meshsim.calibrate.load.held_fraction import HeldFractionFit, search_fraction
from meshsim.calibrate.measure.dataset import Run
from meshsim.progress import Progress

# The median, not the mean: a feature's increment has a heavy tail (Mixer's outbound: mean 0.125 ms, p50 0.07) that
# frees its worker in the model but whose real bursts carry tails the model lacks (Istio 1.2's Mixer runs at c=16:
# p99 7.3 ms measured, 4.0 simulated); matched on means, the fraction made up for the missing tail in the body
# (p50 +9 and +11 %)
LEVEL = 0.5
SIDE_OF_PATH = (("inbound", "server-sidecar"), ("outbound", "both-sidecars"))  # in the order a run isolates a side


def feature_burst_runs(runs: Sequence[Run], feature: str, path: str) -> list[Run]:
    """Sidecar runs on ``path`` with exactly ``feature`` on, whose connections fire together at a fixed rate."""
    return [r for r in runs if r.manifest.setup.path == path and r.features == frozenset((feature,))
            and r.manifest.load.connections > 1 and not r.manifest.load.uniform and r.rps]


def _with_feature_fractions(model: Mapping[str, Any], feature: str, fractions: Mapping[str, float]) -> dict[str, Any]:
    features = dict(model["features"])
    block = dict(features[feature])
    block["sides"] = {**(block.get("sides") or {}), **{s: {"cpu_fraction": f} for s, f in fractions.items()}}
    features[feature] = block
    return {**model, "features": features}


def fit_feature_fractions(model: Mapping[str, Any], runs: Sequence[Run], work: Path, seed: int = 1,
                          progress: Progress | None = None) -> dict[str, list[HeldFractionFit]]:
    """Feature name -> the fitted fraction of each side its bursts show (features without such bursts, or fixed
    into the passes, are left out)."""
    report_progress = progress or (lambda _m: None)
    out: dict[str, list[HeldFractionFit]] = {}
    for name, block in (model.get("features") or {}).items():
        if not isinstance(block, Mapping) or block.get("fixed") or not block.get("per_pass"):
            continue
        fixed: dict[str, float] = {}
        for side, path in SIDE_OF_PATH:
            bursts = feature_burst_runs(runs, name, path)
            if not bursts:
                continue
            fit = search_fraction(lambda f, s=side: _with_feature_fractions(model, name, {**fixed, s: f}), bursts,
                                  side, 1.0, work, seed, what=f"feature {name}'s {side} per-pass time", level=LEVEL)
            fixed[side] = fit.fraction
            out.setdefault(name, []).append(fit)
            report_progress(f"held fraction of {name}'s {side} per-pass time {fit.fraction:.3g} from {len(bursts)} "
                            f"burst runs with it on")
    return out


def apply_feature_fractions(model: dict[str, Any], fits: Mapping[str, Sequence[HeldFractionFit]],
                            notes: list[str]) -> None:
    """Write each feature's fitted fractions (``features.NAME.sides``), each with its source."""
    for name, side_fits in fits.items():
        sides = model["features"][name].setdefault("sides", {})
        for fit in side_fits:
            sides[fit.side] = {"cpu_fraction": round(fit.fraction, 4), "source": fit.source}
            notes.append(f"features.{name}.sides.{fit.side}: {fit.source}")
