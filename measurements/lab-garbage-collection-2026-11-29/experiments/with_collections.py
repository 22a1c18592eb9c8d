"""Copy a collection's chain baselines to OUT with a garbage-collections.json that says: s1's and s2's apps collect
once per EVERY requests at CPU ms of mark CPU each (what the gctrace of a saturated sidecar chain showed at 09:36:
48 and 2.0). An experiment on runs measured before the probe recorded collections; nothing here is a measurement.

Usage: python with_collections.py OUT EVERY CPU RUN_FOLDER_PARENT..."""
import json
import shutil
import sys
from pathlib import Path

import yaml

out, every, cpu = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
for parent in map(Path, sys.argv[4:]):
    for run in parent.glob("lab-*"):
        copy = out / parent.name / run.name
        shutil.copytree(run, copy)
        requests = json.loads((run / "fortio.json").read_text())["DurationHistogram"]["Count"]
        cycles = round(requests / every)
        rows = {app: {"cycles": cycles, "mark_cpu_ms": cpu * cycles, "wall_ms": 0.0} for app in ("s1/app", "s2/app")}
        manifest = yaml.safe_load((copy / "manifest.yaml").read_text())
        manifest.setdefault("files", {})["garbage_collections"] = "garbage-collections.json"  # as the probe lists it
        (copy / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        (copy / "garbage-collections.json").write_text(json.dumps(
            {"requests": requests, "source": f"with_collections.py: one per {every:g} requests, {cpu:g} ms",
             "processes": rows}))
