"""The wake-up fit on the model's own idle gaps: replay the sidecar runs, fit, replay with the fit, to a fixed point.

Split from ``fit_runs``: the fitter's sequence (decompose, load dependence, assemble) stays there; how the load
dependence and the gaps it is fitted on are made consistent lives here.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from meshsim.calibrate.fit.decomposition import Decomposition, decompose_with_cold_wakes
from meshsim.calibrate.fit.families import Family
from meshsim.calibrate.load import load_dependence
from meshsim.calibrate.load.wake_gaps import simulate_gaps
from meshsim.calibrate.measure.dataset import Run
from meshsim.progress import Progress

WAKE_REPLAYS = 3  # replays of the sidecar runs: with no wake-up first, then with the one fitted, until it settles
SETTLED = 0.05  # every wake-up parameter moved less than this (relative) since the last replay: settled


Assemble = Callable[[load_dependence.LoadDependenceFit, Decomposition], dict[str, Any]]  # a model dict from a fit so far


def fit_wakeups_on_replays(assemble: Assemble, decomp: Decomposition, replay: Sequence[Run], usable: Sequence[Run],
                           ref_runs: Sequence[Run], other_runs: Sequence[Run], extra: load_dependence.LoadDependenceFit,
                           fams: Sequence[Family], report_progress: Progress) -> Decomposition:
    """Replay the sidecar runs for their workers' idle gaps, fit the load dependence into ``extra``, and fit the
    passes again with the reference rate's cold wake-ups as known parts.

    The gaps are the model's own: the first replay has no wake-up, each next one the wake-up and passes the last
    fit gave, until the fit settles. At high rates a wake-up's CPU keeps the worker busy for the next pass, so a fit
    made on gaps replayed without it books fewer wakes in `meshsim validate` than it was fitted on, and comes out
    low on the very runs it was fitted from."""
    fitted: load_dependence.LoadDependenceFit | None = None
    for replayed in range(1, WAKE_REPLAYS + 1):
        model = assemble(replace(fitted, notes=list(fitted.notes)) if fitted else load_dependence.LoadDependenceFit(), decomp)
        report_progress(f"replaying {len(replay)} sidecar runs in the simulator for their workers' idle gaps "
            f"({'no wake-up yet' if fitted is None else 'with the wake-up fitted from the last replay'}) ...")
        with tempfile.TemporaryDirectory(prefix="meshsim-gaps-") as work:
            gaps = simulate_gaps(model, replay, Path(work), progress=report_progress if fitted is None else None)
        trial = replace(extra, notes=list(extra.notes))  # the baseline's part kept, this replay's wake-up fit added
        load_dependence.analyse(usable, ref_runs, other_runs, gaps, report_progress, trial)
        if trial.cold is None:
            if fitted is not None:
                fitted.notes.append(f"replay {replayed} with the fitted wake-up left it unidentified: the wake-up of "
                                    f"replay {replayed - 1} is kept")
            break
        settled = fitted is not None and _settled(fitted.wakeup or {}, trial.wakeup or {})
        fitted = trial
        report_progress("fitting the passes again with the reference rate's wake-ups as known parts")
        # the loop's fits in between start from the last one's optimum only; its last fit explores as the first did
        last = settled or replayed == WAKE_REPLAYS
        decomp, shares = decompose_with_cold_wakes(ref_runs, trial.cold, fams, report_progress, warm=decomp,
                                                   explore=last)
        if settled:
            break
    if fitted is None:
        extra.notes[:] = trial.notes
        return decomp
    if replayed > 1:
        fitted.notes.append(f"wake-up fitted on idle gaps replayed {replayed} times, each time with the last fit's "
                            "wake-up: " + (f"it moved less than {SETTLED:.0%} in the last" if settled else
                                           f"still moving after {WAKE_REPLAYS}, the last fit kept"))
    extra.wakeup, extra.cold, extra.cpu_without_wake = fitted.wakeup, fitted.cold, fitted.cpu_without_wake
    extra.notes[:] = fitted.notes
    fewer = {side: share for side, share in shares.items() if share < 1}
    if fewer:
        extra.notes.append("the reference runs refused the cold wakes their idle gaps predict; the passes were "
                           "fitted with " + ", ".join(f"{share:.0%} of the {side} side's" for side, share in
                                                      fewer.items()) + " (the simulator still adds all)")
        report_progress(extra.notes[-1])
    return decomp


def _settled(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    keys = ("delay_ms", "cpu_ms", "tau_ms", "resume_cpu_ms")
    return all(abs(float(after.get(k, 0.0)) - float(before.get(k, 0.0)))
               <= SETTLED * max(abs(float(before.get(k, 0.0))), 1e-4) for k in keys)
