"""Before (one run queue) / after (per-core run queues) per held-out run, from validation/*-{shared,per-core}.txt.
Usage: python before_after.py (prints markdown)."""

from __future__ import annotations

import re
from pathlib import Path

ROW = re.compile(r"^  (p50|p99|rps) (?:ms)?\s+(\S+)\s+(\S+)\s+(\S+)")


def parse(path: Path) -> dict[str, dict[str, tuple[float, float]]]:
    runs: dict[str, dict[str, tuple[float, float]]] = {}
    current = None
    for line in path.read_text().splitlines():
        if line.startswith("lab-"):
            current = line.split()[0] if "HELD-OUT" in line else None
            if current:
                runs[current] = {}
        m = ROW.match(line)
        if current and m:
            runs[current][m[1]] = (float(m[2]), float(m[3]))
    return runs


def err(measured: float, predicted: float) -> str:
    return f"{(predicted - measured) / measured * 100:+.0f} %"


print("| set | run | p50 measured | p50 shared / per-core | p99 measured | p99 shared / per-core "
      "| rps measured | rps shared / per-core |")
print("|---|---|---|---|---|---|---|---|")
for shared_file in sorted(Path("validation").glob("*-shared.txt")):
    name = shared_file.name[:-len("-shared.txt")]
    shared, per_core = parse(shared_file), parse(shared_file.with_name(f"{name}-per-core.txt"))
    for run, a in shared.items():
        b = per_core[run]
        short = re.sub(r"^lab-|-b1024-20261127T", " ", run).strip()
        print(f"| {name} | {short} | {a['p50'][0]:.2f} | {err(*a['p50'])} / {err(*b['p50'])} | {a['p99'][0]:.2f} | "
              f"{err(*a['p99'])} / {err(*b['p99'])} | {a['rps'][0]:.0f} | {err(*a['rps'])} / {err(*b['rps'])} |")
