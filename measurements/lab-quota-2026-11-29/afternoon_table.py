"""The afternoon's interleaved runs: the 1-worker sidecar pair at 3000 rps requested, 4 connections, with and without
the 0.1-core quota. Per run: the rate carried and each sidecar's CPU per request, sleeps (voluntary switches) and
preemptions (involuntary switches) per request, from its run-queue.json and fortio.json.
Usage: python afternoon_table.py afternoon > afternoon.txt"""
import json
import sys
from pathlib import Path


def main(root: Path) -> None:
    print("folder   started   carried rps   per request and sidecar: CPU ms, sleeps, preemptions (client; server)")
    for folder in sorted(root.iterdir(), key=lambda p: next(p.glob("lab-*")).name[-18:]):
        run = next(folder.glob("lab-*"))
        queue = json.loads((run / "run-queue.json").read_text())
        rps = json.loads((run / "fortio.json").read_text())["ActualQPS"]
        n = queue["requests"]
        sides = "; ".join(f"{v['run_s'] * 1e3 / n:.3f} {v['voluntary_switches'] / n:.2f} "
                          f"{v['involuntary_switches'] / n:.2f}"
                          for k, v in queue["components"].items() if k.endswith("sidecar"))
        print(f"{folder.name:8s} {run.name[-9:-3]}  {rps:8.0f}      {sides}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
