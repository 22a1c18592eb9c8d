"""What ``meshsim fit`` refuses besides bad runs: names that name nothing, and a fit that identifies nothing.

A model named '' or a default-on feature no run measured would be written without a word (``--default-on
warpdrive`` was ignored); a fit from baseline runs alone wrote ``proxy: null``, a model with nothing fitted in it.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from meshsim.calibrate.fit.decomposition import Decomposition
from meshsim.calibrate.measure.dataset import Run
from meshsim.errors import FieldError, MeshsimError

# the paths whose runs identify a component: a sidecar's passes (and its features'), a proxy LB's passes
IDENTIFYING_PATHS = ("server-sidecar", "both-sidecars", "proxy-lb")


def check_fit_names(mesh: str, runs: Sequence[Run], default_features: Iterable[str],
                    descriptions: Mapping[str, str]) -> None:
    """The model's name is not empty; every feature named on the command line is one the runs measured."""
    if not isinstance(mesh, str) or not mesh.strip():
        raise FieldError("mesh", "empty: the fitted model needs a name (e.g. istio-1.2)")
    measured = sorted({feature for run in runs for feature in run.features})
    for field, names in (("default_on", list(default_features)), ("describe", list(descriptions))):
        for name in names:
            if not name.strip():
                raise FieldError(field, "an empty feature name")
            if name not in measured:
                raise FieldError(field, f"no run measured a feature {name!r} (the runs' features: "
                                        f"{', '.join(measured) or 'none'})")
        if len(set(names)) != len(names):
            raise FieldError(field, f"a feature is named twice in {names}")


def check_identified(decomposition: Decomposition, reference: Sequence[Run]) -> None:
    """A fit must identify at least one component (a proxy pass, a feature, a proxy LB's pass)."""
    if decomposition.components:
        return
    paths = sorted({run.manifest.setup.path for run in reference})
    raise MeshsimError(f"meshsim fit: the runs identify nothing: the reference runs ({len(reference)}) are "
                       f"{', '.join(paths)} only, which fit network + app; a proxy's passes need "
                       f"{' or '.join(IDENTIFYING_PATHS)} runs at the reference rate and one connection")
