"""Per run: achieved rps, p50/p99, other processes' cores, and per lab process its CPU per request (ms), sleeps
(voluntary switches) and preemptions (involuntary switches) per request, from the run folders' own files.
Usage: python summary.py FOLDER [FOLDER ...] (each holds label folders of run folders)."""

import json
import sys
from pathlib import Path

import yaml

for top in sys.argv[1:]:
    for run in sorted(Path(top).glob("*/lab-*")):
        manifest = yaml.safe_load((run / "manifest.yaml").read_text())
        result = json.loads((run / "fortio.json").read_text())
        requests = result["DurationHistogram"]["Count"]
        queues = json.loads((run / "run-queue.json").read_text())["components"]
        pct = {p["Percentile"]: p["Value"] * 1e3 for p in result["DurationHistogram"]["Percentiles"]}
        cells = []
        for component, cpu in sorted(manifest["cpu_seconds"].items()):
            q = queues.get(component, {})
            cells.append(f"{component} {1e3 * cpu / requests:.3f} ms, {q.get('voluntary_switches', 0) / requests:.2f} "
                         f"sleeps, {q.get('involuntary_switches', 0) / requests:.2f} preempted")
        print(f"| {run.parent.name} | {result['ActualQPS']:.0f} | {pct[50]:.3f} | {pct[99]:.3f} | "
              f"{manifest['where']['host_load']['other_cores']:.2f} | {'; '.join(cells)} |")
