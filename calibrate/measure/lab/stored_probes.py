"""Which lab probes are already stored: what ``calibrate --lab --resume`` skips.

A lab run folder's name carries a time stamp, so a probe is recognised by its manifest instead: the same lab setup
(mesh, proxy path, features, topology, workers, CPU limit, replicas, payload) and the same load (rps, connections,
duration, fortio's pacing flags). Folders that cannot be read, or that hold failed runs, are not finished probes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from meshsim.errors import MeshsimError
from meshsim.run_folder import MANIFEST, RunManifest, read_manifest

from meshsim.calibrate.measure.lab.probe import ProbeSettings
from meshsim.calibrate.measure.lab.spec import LabSpec


def probe_key(spec: LabSpec, settings: ProbeSettings) -> tuple:
    """What a lab probe's manifest says about its setup and load (as ``probe`` writes it)."""
    return ("lab", spec.mesh, spec.path, tuple(spec.features), spec.topology,
            spec.workers if spec.has_proxies else None, spec.cpu_limit, max(s.replicas for s in spec.services),
            settings.payload_bytes, float(settings.rps), settings.connections, float(settings.duration_s),
            settings.uniform, settings.jitter, settings.nocatchup)


def manifest_key(m: RunManifest) -> tuple:
    s, load = m.setup, m.load
    return (m.source, s.mesh, s.path, tuple(s.features), s.topology, s.proxy_workers, s.proxy_cpu_limit, s.replicas,
            s.payload_bytes, float(load.rps if load.rps is not None else -1), load.connections,
            float(load.duration_s if load.duration_s is not None else -1), load.uniform, load.jitter, load.nocatchup)


@dataclass
class StoredProbes:
    """The finished lab runs under one folder; ``take`` hands each out at most once (a plan may repeat a probe)."""

    by_key: dict[tuple, list[Path]] = field(default_factory=dict)

    @classmethod
    def scan(cls, out_dir: Path) -> "StoredProbes":
        stored = cls()
        folder = Path(out_dir)
        if not folder.is_dir():
            return stored
        for run in sorted(folder.iterdir()):
            if run.name.startswith(".") or not (run / MANIFEST).is_file():
                continue  # a write in progress (atomic temp folder) or not a run
            try:
                manifest = read_manifest(run)
            except MeshsimError:
                continue
            if manifest.status in ("ok", "saturated"):
                stored.by_key.setdefault(manifest_key(manifest), []).append(run)
        return stored

    def take(self, spec: LabSpec, settings: ProbeSettings) -> Path | None:
        """The oldest stored folder of this probe not handed out yet (None: it must be measured)."""
        folders = self.by_key.get(probe_key(spec, settings)) or []
        return folders.pop(0) if folders else None
