"""A sweep's grid as data: which topologies, meshes, feature sets, balancers, loads and rates, validated once.

``meshsim sweep`` (and any other front end) describes a grid with :class:`SweepGrid`: the axes plus the
:class:`~meshsim.request.PredictOptions` every point shares. :meth:`SweepGrid.validate` loads every topology and mesh
once and builds one request per combination of the non-rate axes, so a bad name or an option that does not apply is
refused (naming its field) before any point runs. :meth:`SweepGrid.points` lists the independent points; each point's
options carry the loaded topology and mesh objects, so a remote worker needs no model files.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from meshsim.catalog import load_mesh, load_topology
from meshsim.errors import FieldError
from meshsim.request import PredictOptions, build_request

NO_FEATURES = "none"  # the --vary features value for "the mesh's defaults only"
MAX_POINTS = 100_000  # a grid past this is a typo (e.g. 1:1e6:1e6), not a plan


def parse_rps_range(text: str) -> tuple[float, ...]:
    """``FROM:TO:N``: N rates evenly spaced from FROM to TO (both included); N = 1 needs FROM = TO."""
    parts = text.split(":")
    try:
        if len(parts) != 3:
            raise ValueError
        lo, hi, count = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        raise FieldError("rps", f"expected FROM:TO:N (e.g. 100:2000:20), got {text!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0 or hi < lo:
        raise FieldError("rps", f"need 0 < FROM <= TO, both finite, got {text!r}")
    if count < 1 or count > MAX_POINTS or (count == 1 and hi != lo):
        raise FieldError("rps", f"N must be in [1, {MAX_POINTS}] (1 only when FROM = TO), got {text!r}")
    if count == 1:
        return (lo,)
    step = (hi - lo) / (count - 1)
    # six decimals keep float noise (100.00000000000001) out of the cache keys; a rate under a millionth would
    # round to 0 and is kept as given (the points' check then says why it measures nothing)
    return tuple(round(r, 6) if r >= 1e-6 else r for r in (lo + i * step for i in range(count)))


def parse_feature_sets(text: str) -> tuple[tuple[str, ...], ...]:
    """``none,mtls,mtls+tracing``: each comma item is one feature set (``+`` joins features; ``none``: no extra)."""
    sets = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            raise FieldError("features", f"empty feature set in {text!r}")
        sets.append(() if item == NO_FEATURES else tuple(f.strip() for f in item.split("+") if f.strip()))
    return tuple(sets)


def feature_label(features: tuple[str, ...]) -> str:
    return "+".join(features) if features else NO_FEATURES


@dataclass(frozen=True)
class SweepPoint:
    """One independent task: its axis values (the row's key columns) and the options that run it."""

    topology: str
    mesh: str
    features: str
    lb: str
    load: str
    rps: float
    options: PredictOptions

    def key_columns(self) -> dict[str, object]:
        return {"topology": self.topology, "mesh": self.mesh, "features": self.features, "lb": self.lb,
                "load": self.load, "rps": self.rps}


@dataclass(frozen=True)
class SweepGrid:
    """The axes of a sweep and the options every point shares (its ``rps`` and axis fields are set per point).

    Each point runs ``base.replications`` replications (default 2) seeded from ``base.seed``: the same seed at every
    point gives common random numbers along a curve, and the same numbers wherever the point runs."""

    topologies: tuple[str, ...]
    meshes: tuple[str, ...]
    rps: tuple[float, ...]
    feature_sets: tuple[tuple[str, ...], ...] = ((),)
    lbs: tuple[str, ...] = ("client",)
    loads: tuple[str, ...] = ("open",)
    base: PredictOptions = field(default_factory=PredictOptions)

    def validate(self) -> None:
        """Refuse a bad axis or option before anything runs (FieldError naming the field)."""
        for name in ("topologies", "meshes", "rps", "feature_sets", "lbs", "loads"):
            values = getattr(self, name)
            if not values:
                raise FieldError(_FIELD[name], "give at least one value")
            if len(set(values)) != len(values):
                raise FieldError(_FIELD[name], f"a value appears twice in {list(values)}")
        if len(self.rps) * self.combinations() > MAX_POINTS:
            raise FieldError("rps", f"{len(self.rps) * self.combinations()} points: more than {MAX_POINTS}")
        for topology, mesh, features, lb, load in self._combos():
            build_request(self._options(topology, mesh, features, lb, load, self.rps[0]))

    def combinations(self) -> int:
        return len(self.topologies) * len(self.meshes) * len(self.feature_sets) * len(self.lbs) * len(self.loads)

    def points(self) -> list[SweepPoint]:
        """Every point, curve by curve (rates innermost), with the models loaded once."""
        topologies = {t: load_topology(t) for t in self.topologies}
        meshes = {m: load_mesh(m) for m in self.meshes}
        out = []
        for topology, mesh, features, lb, load in self._combos():
            for rps in self.rps:
                options = self._options(topologies[topology], meshes[mesh], features, lb, load, rps)
                out.append(SweepPoint(topology, mesh, feature_label(features), lb, load, rps, options))
        return out

    def _combos(self) -> itertools.product:
        return itertools.product(self.topologies, self.meshes, self.feature_sets, self.lbs, self.loads)

    def _options(self, topology: object, mesh: object, features: tuple[str, ...], lb: str, load: str,
                 rps: float) -> PredictOptions:
        return self.base.with_changes(topology=topology, mesh=mesh, features=tuple(self.base.features) + features,
                                      lb=lb, load=load, rps=rps, precision=None, saturation=False, processes=1,
                                      replications=2 if self.base.replications is None else self.base.replications)


_FIELD = {"topologies": "topology", "meshes": "mesh", "rps": "rps", "feature_sets": "features", "lbs": "lb",
          "loads": "load"}
