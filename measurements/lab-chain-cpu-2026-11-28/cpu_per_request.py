"""Per run: the rate carried and each process's CPU (ms) and sleeps per request, from the run manifests.

    python cpu_per_request.py [FOLDER ...]   (default: every run folder under this one)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from meshsim.run_folder import read_manifest


def rows(root: Path) -> list[str]:
    out = []
    for manifest in sorted(root.rglob("manifest.yaml")):
        folder = manifest.parent
        m = read_manifest(folder)
        fortio = json.loads((folder / "fortio.json").read_text())
        n = fortio["DurationHistogram"]["Count"]
        cpu = " ".join(f"{k}={v / n * 1e3:.3f}" for k, v in sorted(m.cpu_seconds.items()))
        sleeps = " ".join(f"{k}={v / n:.2f}" for k, v in sorted((m.sleeps or {}).items()))
        out.append(f"{folder.relative_to(root)}  {fortio['ActualQPS']:.0f} rps\n  cpu ms/request: {cpu}\n"
                   f"  sleeps/request: {sleeps}")
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["."]:
        print("\n".join(rows(Path(arg))))
