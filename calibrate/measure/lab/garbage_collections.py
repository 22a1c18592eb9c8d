"""The lab apps' garbage collections over a load, from the Go runtime's own trace (``GODEBUG=gctrace=1``).

The lab's apps are fortio processes (Go). Each collection they run prints one line to the app's log, e.g.

    gc 128 @5.161s 3%: 0.063+5.1+0.18 ms clock, 0.12+0.25/0.32/0.35+0.37 ms cpu, 4->4->2 MB, 4 MB goal, ...

whose ``ms cpu`` part is the stop-the-world sweep termination, the mark phase's assist / background / idle workers
and the stop-the-world mark termination (CPU time summed over the Ps). A probe notes where each app's log ends before
the load and reads the lines written until it ends: the collections of the load (a line is written when its
collection ends, so one running at either edge counts at the edge it ends on). The run folder's
``garbage-collections.json`` keeps, per app process, how many collections ran, the mark phase's CPU (the three mark
workers: what the collection adds to the app's work; the stop-the-world parts are waits on a busy host more than
CPU) and their wall-clock time; ``collections_per_request`` relates them to the run's requests.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

FILE_KEY, FILE = "garbage_collections", "garbage-collections.json"  # the manifest's files key, the file
_LINE = re.compile(r"^gc \d+ @[\d.]+s \d+%: ([\d.]+)\+([\d.]+)\+([\d.]+) ms clock, "
                   r"[\d.]+\+([\d.]+)/([\d.]+)/([\d.]+)\+[\d.]+ ms cpu")


def go_trace_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The app processes' environment beside ``environ``: Go's trace of each collection on, after whatever GODEBUG
    settings the user has (a later setting of the same name wins)."""
    return {"GODEBUG": ",".join(filter(None, (environ.get("GODEBUG", ""), "gctrace=1")))}


@dataclass(frozen=True)
class Collections:
    """One process's collections over a load: how many, their mark phase's CPU and wall-clock time (ms, summed)."""

    cycles: int
    mark_cpu_ms: float
    wall_ms: float

    @property
    def mark_cpu_per_cycle_ms(self) -> float:
        return self.mark_cpu_ms / self.cycles if self.cycles else 0.0


def parse(lines: Iterable[str]) -> Collections:
    """The collections in ``lines`` of a Go process's log (other lines are skipped)."""
    cycles, cpu, wall = 0, 0.0, 0.0
    for line in lines:
        m = _LINE.match(line)
        if m:
            cycles += 1
            wall += sum(float(m.group(k)) for k in (1, 2, 3))
            cpu += sum(float(m.group(k)) for k in (4, 5, 6))
    return Collections(cycles, cpu, wall)


def snapshot(logs: Mapping[str, str]) -> dict[str, int]:
    """Where each process's log (name -> path) ends now."""
    return {name: _size(path) for name, path in logs.items()}


def over_load(logs: Mapping[str, str], before: Mapping[str, int]) -> dict[str, Collections]:
    """Each process's collections written to its log since ``before`` (a process whose log is gone: none)."""
    out: dict[str, Collections] = {}
    for name, path in logs.items():
        try:
            with open(path, "rb") as f:
                f.seek(before.get(name, 0))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        out[name] = parse(text.splitlines())
    return out


def run_files(collections: Mapping[str, Collections], requests: int) -> dict[str, tuple[str, bytes]] | None:
    """The run folder's ``garbage-collections.json`` (None without apps to report on)."""
    if not collections:
        return None
    data = {"requests": requests, "source": "each app's GODEBUG=gctrace=1 lines written during the load",
            "processes": {name: asdict(c) for name, c in sorted(collections.items())}}
    return {FILE_KEY: (FILE, json.dumps(data, indent=1).encode())}


def collections_per_request(data: Mapping[str, Any], component: str) -> tuple[float, float] | None:
    """(collections per request, mark CPU per collection in ms) of a component's processes over the run's
    requests (replicas summed), or None when it ran no collection."""
    rows = [row for name, row in data.get("processes", {}).items() if name.split("#", 1)[0] == component]
    cycles = sum(int(r["cycles"]) for r in rows)
    requests = int(data.get("requests") or 0)
    if not cycles or not requests:
        return None
    return cycles / requests, sum(float(r["mark_cpu_ms"]) for r in rows) / cycles


def _size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0
