"""Per run folder below the given folders: rate, p50 and, per process, CPU per request (its manifest's cpu_seconds
over the run's requests) and worker sleeps per request (run-queue.json's voluntary switches).

Run: python tracing_table.py by-connections chain-by-rate repeats-1500 chain-and-single-800
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml


def rows(folder: Path) -> list[str]:
    out = []
    for run in sorted(folder.glob("*/lab-*")):
        queue = json.loads((run / "run-queue.json").read_text())
        fortio = json.loads((run / "fortio.json").read_text())
        manifest = yaml.safe_load((run / "manifest.yaml").read_text())
        n = queue["requests"]
        p50 = fortio["DurationHistogram"]["Percentiles"][0]["Value"] * 1e3
        out.append(f"{run.parent.name}/{run.name}: {fortio['ActualQPS']:.0f} rps, p50 {p50:.2f} ms, "
                   f"{manifest['setup'].get('proxy_workers')} worker(s)")
        for name, c in queue["components"].items():
            if name.endswith("/app"):
                continue
            cpu = manifest["cpu_seconds"][name] / n * 1e3
            out.append(f"    {name:15} CPU {cpu:.3f} ms per request, sleeps {c['voluntary_switches'] / n:.2f} "
                       f"per request")
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(f"== {arg}")
        print("\n".join(rows(Path(arg))))
