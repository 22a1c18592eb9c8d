"""Finished sweep points on disk, under the content hash of everything that determined them.

A point's key hashes the engine's version, the topology's and mesh model's content (their file hash, or their full
value when they were built in code or changed by an option) and every option of the point, so a changed model file,
seed or setting misses the cache instead of reading a stale number. One small JSON file per point, written to a
temporary name and renamed, so an interrupt never leaves half a file: an interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from meshsim import __version__
from meshsim.interrupts import interrupts_deferred
from meshsim.outputs import write_file
from meshsim.request import PredictOptions
from meshsim.sim.experiments.predict import ENGINE

CACHE_ENV = "MESHSIM_CACHE"  # overrides the default cache folder
# the rows' format, part of a point's key, so that a cached row of another format is not read as this one's
# (2: active_features; 3: a node can be the bottleneck, and a point is saturated when its answers fall behind;
# 4: the start-up transient cut by MSER-5 and a steady state's percentiles pooled, sim/experiments/transient_cut.py)
ROW_FORMAT = 4


def default_cache_dir() -> Path:
    """``$MESHSIM_CACHE``, else ``$XDG_CACHE_HOME/meshsim/points``, else ``~/.cache/meshsim/points``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "meshsim" / "points"


def _model_identity(model: Any) -> str:
    content = getattr(model, "content_hash", "")
    # a hash of the file names the file; a model changed in code (or built in code) is identified by its value
    return f"{content}|{model!r}" if not isinstance(model, (str, Path)) else str(model)


def point_key(options: PredictOptions) -> str:
    """Hex digest of everything that determines a point's numbers."""
    described: dict[str, Any] = {"meshsim": __version__, "engine": ENGINE, "row_format": ROW_FORMAT}
    for f in fields(options):
        value = getattr(options, f.name)
        if f.name in ("topology", "mesh"):
            value = _model_identity(value)
        elif f.name == "profile" and value is not None:
            value = asdict(value)
        described[f.name] = value
    text = json.dumps(described, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class PointCache:
    """A folder of ``<key>.json`` rows (two-letter shards keep folders small)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        path = self._path(key)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):  # unreadable or damaged: recompute it
            return None

    def put(self, key: str, row: dict[str, Any]) -> None:
        """Store a point (OutputError naming --cache when it cannot be written)."""
        path = self._path(key)
        # a point is stored whole or not at all: an interrupt between the write and the rename would leave the
        # temporary file behind, so it waits until the point is in place (and a failed write removes its file)
        with interrupts_deferred():
            write_file(path, json.dumps(row), "cache", parents=True)  # in column order
