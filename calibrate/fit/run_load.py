"""How a calibration's runs drove fortio, as the model's ``cluster.load`` block (``meshsim.cluster_facts``).

A prediction with the model drives a fortio load the same way where its flags say nothing, and says when they drive
it otherwise (warm-up, -jitter, -uniform): at many connections those decide how bursts form and which worker each
connection lands on, so a model fitted from one cluster's runs predicts that cluster's other runs only with its load
driven the same way.
"""

from __future__ import annotations

from typing import Any, Sequence

from meshsim.calibrate.measure.dataset import Run
from meshsim.fortio_warmup import DEFAULT_VERSION, checked_version, warmup_mode


def load_block(version: str | None, warmup: str | None, jitter: bool, uniform: bool, source: str) -> dict[str, Any]:
    """The ``cluster.load`` block: the fortio version where known (its warm-up follows), else the warm-up."""
    block: dict[str, Any] = {"generator": "fortio"}
    if version:
        block["version"] = version
        if warmup is not None:
            block["warmup"] = warmup
    else:
        block["warmup"] = warmup_mode(DEFAULT_VERSION, warmup)
    return {**block, "jitter": bool(jitter), "uniform": bool(uniform), "source": source}


def runs_load_block(runs: Sequence[Run]) -> tuple[dict[str, Any] | None, str]:
    """(the block, '') when every run drove fortio alike; (None, why) otherwise."""
    if not runs:
        return None, "no runs"
    ways = set()
    for run in runs:
        load = run.manifest.load
        ways.add((checked_version(run.result.version), run.result.warmup, bool(load.jitter), bool(load.uniform)))
    if len(ways) > 1:
        return None, (f"the {len(runs)} runs drove fortio in {len(ways)} ways (version, warm-up, -jitter, -uniform): "
                      "no cluster.load written")
    version, warmup, jitter, uniform = ways.pop()
    if version is None:
        return None, "the runs' fortio version has no known warm-up: no cluster.load written"
    return load_block(version, warmup, jitter, uniform,
                      f"how the {len(runs)} runs drove fortio: Version {version} in their results, -jitter "
                      f"{'on' if jitter else 'off'} and -uniform {'on' if uniform else 'off'} in their manifests; a "
                      "prediction whose fortio differs says so"), ""
