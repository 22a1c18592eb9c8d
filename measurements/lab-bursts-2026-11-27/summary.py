"""Tables of this folder's README from its validation texts: per burst run, measured and predicted p50/p99, and the
server sidecar's own view (Envoy's histogram) measured and predicted; then how long fortio took to send each burst
(the spread of its requests' start times within a burst, from the access logs).

    python summary.py validation.txt [validation-c1-c16.txt]
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import sys
from pathlib import Path

RUN = re.compile(r"^(lab-single-(\S+?)-q1000-c(\d+)-b1024-\S+)\s+(FIT|HELD-OUT)")
ROW = re.compile(r"^\s+(p50|p99) ms\s+([\d.]+)\s+([\d.]+)\s+([+-]\d+)%")
VIEW = re.compile(r"server/sidecar inbound \(the proxy's own histogram.*?\): p50 ([\d.]+) ms in .*? measured, "
                  r"([\d.]+) predicted.*?p99 ([\d.]+) ms in .*? measured, ([\d.]+) predicted")


def read(path: Path) -> dict[str, dict[str, str]]:
    runs: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in path.read_text().splitlines():
        if m := RUN.match(line):
            current = runs.setdefault(m.group(1), {"mode": m.group(2), "c": m.group(3)})
        elif current is not None and (m := ROW.match(line)):
            current[m.group(1)] = f"{m.group(2)} / {m.group(3)} ({m.group(4)} %)"
        elif current is not None and (m := VIEW.search(line)):
            current["view"] = f"{m.group(1)} / {m.group(2)}, {m.group(3)} / {m.group(4)}"
    return runs


def rounds(folder: Path) -> dict[str, str]:
    """Which round (folder) each run id is in."""
    return {run.name: sub.name for sub in folder.glob("round*") for run in sub.iterdir()}


def main(paths: list[str]) -> None:
    where = rounds(Path(__file__).parent)
    for path in paths:
        runs = read(Path(path))
        print(f"\n{path}\n")
        print("| mode | c | round | p50 measured / predicted | p99 measured / predicted | "
              "server sidecar's own view: p50, p99 measured / predicted (ms) |")
        print("|---|---|---|---|---|---|")
        order = sorted(runs.items(), key=lambda kv: (kv[1]["mode"], int(kv[1]["c"]), where.get(kv[0], "")))
        for run, row in order:
            print(f"| {row['mode']} | {row['c']} | {where.get(run, '?')} | {row.get('p50', '-')} | "
                  f"{row.get('p99', '-')} | {row.get('view', '-')} |")


def send_spreads(folder: Path) -> None:
    """Per run with 16 or more connections: the median over its bursts of the time between the first and the last
    request's start (fortio's access-log timestamp, the request's start: within a burst they spread over about
    1.5 ms where the latencies spread over 10 ms and more; a gap over 3 ms starts a new burst)."""
    print("\n| run | bursts | send spread p50 (ms) |\n|---|---|---|")
    for log in sorted(folder.glob("round*/lab-single-*-c*/access.jsonl.gz")):
        connections = int(re.search(r"-c(\d+)-", log.parent.name).group(1))
        if connections < 16:
            continue
        starts = sorted(json.loads(line)["timestamp"] / 1e6 for line in gzip.open(log))
        bursts, current = [], [starts[0]]
        for t in starts[1:]:
            if t - current[-1] > 3.0:
                bursts.append(current)
                current = []
            current.append(t)
        bursts.append(current)
        full = [b[-1] - b[0] for b in bursts if len(b) >= 0.9 * connections]
        print(f"| {log.parent.parent.name}/{log.parent.name[:44]} | {len(full)} | {statistics.median(full):.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:] or ["validation.txt"])
    send_spreads(Path(__file__).parent)
