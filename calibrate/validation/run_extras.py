"""A file a lab run keeps beside fortio's (listed in its manifest's ``files``), read as JSON for a check."""

from __future__ import annotations

import json
from typing import Any, Callable, TypeVar

from meshsim.calibrate.measure.dataset import Run
from meshsim.errors import MeshsimError

T = TypeVar("T")


def stored_json(run: Run, key: str, what: str, parse: Callable[[Any], T]) -> T | None:
    """``parse`` of the run's file under ``key`` (None when the run has none: an older run); MeshsimError naming the
    file when it is not ``what``."""
    name = run.manifest.files.get(key)
    if name is None:
        return None
    path = run.folder / name
    try:
        return parse(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MeshsimError(f"{path}: not {what} ({exc})") from None
