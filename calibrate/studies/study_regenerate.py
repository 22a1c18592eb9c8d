"""The shipped studies: regenerate docs/studies/<name>/ in one command, and the study table from those files.

``meshsim study regenerate docs/studies`` runs every study (or ``--studies NAME ...``) with full settings, one at a
time, and writes each into ``DIR/NAME`` (study.json, cells.csv, the figure); ``meshsim study table docs/studies``
prints the study table from the study.json files found there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from meshsim.errors import FieldError
from meshsim.progress import Progress

from meshsim.calibrate.studies.study_catalog import StudySettings, load_study, study_names
from meshsim.calibrate.studies.study_report import write_out
from meshsim.calibrate.studies.study_skill_report import readme_table


def regenerate(out_dir: str, settings: StudySettings, names: Sequence[str] | None = None,
               progress: Progress | None = None) -> str:
    """Run ``names`` (default: every study) one after another, write each into ``out_dir/NAME`` as soon as it is
    done, and return the study table of every study now in ``out_dir``."""
    studies = [load_study(name) for name in (names or study_names())]  # an unknown name fails before any run
    for study in studies:
        if progress:
            progress(f"study {study.name}")
        write_out(study.run(settings, progress), Path(out_dir) / study.name)
    return shipped_table(out_dir)


def shipped_studies(folder: str) -> list[dict[str, Any]]:
    """The study.json of every study that has a folder in ``folder``, in the catalogue's order."""
    root = Path(folder)
    if not root.is_dir():
        raise FieldError("folder", f"{folder} is not a folder (expected one holding a study.json per study)")
    found = []
    for name in study_names():
        path = root / name / "study.json"
        if not path.exists():
            continue
        try:
            found.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise FieldError("folder", f"{path}: cannot read it as JSON ({exc})") from None
        if "summary" not in found[-1] or "skill" not in found[-1]["summary"]:
            raise FieldError("folder", f"{path}: no summary with a skill block (made before the naive forecast; "
                                       "regenerate it)")
    if not found:
        raise FieldError("folder", f"{folder} holds no <study>/study.json (studies: {', '.join(study_names())})")
    return found


def shipped_table(folder: str) -> str:
    return readme_table(shipped_studies(folder))
