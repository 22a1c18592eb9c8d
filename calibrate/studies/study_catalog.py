"""The study catalogue: what a study is, the settings every study run shares, and the registry of the five.

A study is a small class (SimPy's style: extension by classes, not flags) with a name, a title, the document it
re-creates and one method, :meth:`Study.run`, that builds its scenarios from the published tables, fits what the
document's protocol allows and predicts the rest. Helpers shared by every study (one prediction for a cell, the
metric read off a prediction) live here so that each study module holds only its own document's conditions.
"""

from __future__ import annotations

import importlib
import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from meshsim.errors import FieldError, MeshsimError
from meshsim.progress import Progress
from meshsim.request import PredictOptions

from meshsim.calibrate.studies.study_cells import StudyResult

# name -> module holding the Study subclass (imported on demand: a study may need optional components)
STUDY_MODULES: dict[str, str] = {
    "mesh-comparison": "meshsim.calibrate.studies.mesh_comparison_study",
    "istio-features": "meshsim.calibrate.studies.istio_features_study",
    "grpc-lb": "meshsim.calibrate.studies.grpc_lb_study",
    "network-paths": "meshsim.calibrate.studies.network_paths_study",
    "bookinfo-course": "meshsim.calibrate.studies.bookinfo_course_study",
}


@dataclass(frozen=True)
class StudySettings:
    """How a study run is made; recorded in its result.

    ``short`` is the test suite's setting: the same cells and the same fits on fewer, shorter replications (wider
    confidence intervals). ``time_limit_s`` bounds each prediction's replications, not the whole study.
    """

    short: bool = False
    seed: int = 1
    processes: int | None = None
    time_limit_s: float | None = None

    def predict_settings(self) -> dict[str, Any]:
        """The run-settings part of :class:`PredictOptions` every cell's prediction uses."""
        if self.short:
            return {"replications": 2, "precision": None, "seed": self.seed, "processes": self.processes,
                    "time_limit_s": self.time_limit_s, "saturation": False}
        return {"precision": 0.05, "seed": self.seed, "processes": self.processes,
                "time_limit_s": self.time_limit_s, "saturation": False}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Study(ABC):
    name: ClassVar[str]
    title: ClassVar[str]
    source: ClassVar[str]  # the document (authors, title, year), its seed file and the published tables used

    @abstractmethod
    def run(self, settings: StudySettings, progress: Progress | None = None) -> StudyResult:
        """Fit what the document's protocol allows, predict every other cell, compare."""

    def describe(self) -> dict[str, str]:
        return {"name": self.name, "title": self.title, "source": self.source}


def study_names() -> list[str]:
    return list(STUDY_MODULES)


def load_study(name: str) -> Study:
    """The registered study ``name`` (an instance of the module's ``STUDY`` class)."""
    if name not in STUDY_MODULES:
        raise FieldError("study", f"unknown study {name!r}; known: {', '.join(STUDY_MODULES)}")
    try:
        module = importlib.import_module(STUDY_MODULES[name])
    except ModuleNotFoundError as exc:
        if exc.name != STUDY_MODULES[name]:
            raise
        raise MeshsimError(f"study {name!r} is not part of this installation ({exc.name} missing)") from None
    study: Study = module.STUDY()
    return study


def list_studies() -> list[dict[str, str]]:
    return [load_study(name).describe() for name in STUDY_MODULES]


def run_study(name: str, settings: StudySettings, progress: Progress | None = None) -> StudyResult:
    return load_study(name).run(settings, progress)


# -- shared by every study -----------------------------------------------------------------------------------------

MS = 1e-3
LATENCY_KEYS = {"p50_ms": "p50", "p90_ms": "p90", "p99_ms": "p99", "p999_ms": "p99.9", "max_ms": "max",
                "mean_ms": "mean"}


def predicted_latency_ms(prediction: Any, metric: str) -> tuple[float, tuple[float, float] | None]:
    """A latency metric (``p50_ms``...) of a :class:`meshsim.sim.experiments.predict.Prediction` with its 95 % CI, in ms."""
    est = prediction.latency[LATENCY_KEYS[metric]]
    ci = (est.lo / MS, est.hi / MS) if math.isfinite(est.lo) and math.isfinite(est.hi) else None
    return est.value / MS, ci


def predict_cell(options: PredictOptions, settings: StudySettings, progress: Progress | None = None) -> Any:
    """One prediction for a study's condition, with the study run's shared settings."""
    from meshsim.sim.experiments.predict import predict_options

    return predict_options(options.with_changes(**settings.predict_settings()), progress)
