"""What a collection costs in CPU by the kernel's clock: the forwarding apps' CPU per request with the collector on
(GOGC=100) and off (GOGC=off), from each GOGC run's run-queue.json (schedstat run time of every thread, user and
system), times the requests per collection the session's gctrace counted (45-49: 47 used). Beside it, the mark CPU
that Go's own gctrace prints for the same kind of run in the session (Go times its mark workers by the clock, so a
worker descheduled by the kernel still counts). Usage: python cpu_per_collection.py gogc > cpu-per-collection.txt"""
import json
import statistics
import sys
from pathlib import Path

from gogc_table import SETUPS

REQUESTS_PER_COLLECTION = 47  # session/*/garbage-collections.json: 45-49 for s1 and s2 in every run
GCTRACE_MARK_MS = {"base800": "1.39-1.51", "base20000": "1.39-1.51", "paced": "1.55-1.67", "gogc": "1.74-2.03",
                   "pair": "-"}  # the session's gctrace, README table "A collection costs more CPU the busier the host"


def cpu_per_request(folder: Path, component: str) -> float:
    queue = json.loads(next(folder.glob("lab-*/run-queue.json")).read_text())
    return queue["components"][component]["run_s"] * 1e3 / queue["requests"]


def main(root: Path) -> None:
    print(f"{'setup':42s} {'on ms/req':>10s} {'off ms/req':>10s} {'ms per collection':>18s} {'gctrace mark ms':>16s}")
    for key, words in SETUPS:
        on = [f for f in sorted(root.glob(f"{key}-100-*"))]
        off = [f for f in sorted(root.glob(f"{key}-off-*"))]
        if not on or not off or "s1/app" not in json.loads(next(on[0].glob("lab-*/run-queue.json")).read_text())[
                "components"]:
            continue
        for app in ("s1/app", "s2/app"):
            a = [cpu_per_request(f, app) for f in on]
            b = [cpu_per_request(f, app) for f in off]
            diff = statistics.mean(a) - statistics.mean(b)
            spread = (statistics.stdev(a) ** 2 / len(a) + statistics.stdev(b) ** 2 / len(b)) ** 0.5
            print(f"{words + ', ' + app:42s} {statistics.mean(a):10.4f} {statistics.mean(b):10.4f} "
                  f"{diff * REQUESTS_PER_COLLECTION:10.2f} +- {spread * REQUESTS_PER_COLLECTION:4.2f}"
                  f" {GCTRACE_MARK_MS[key]:>16s}")
    print("(3-7 runs each way per setup; +- one standard error of the difference, times the requests per collection)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
