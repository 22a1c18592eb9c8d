"""Per section of busy_tick.out and per Q: median |error| and the signed errors (%) of p50, p99 and achieved rps.

    python busy_tick_summary.py busy_tick.out
"""
import re
import statistics
import sys
from collections import defaultdict

LINE = re.compile(r"Q=(\S+) (\S+)\s+meas p50 (\S+) p99 (\S+) rps (\S+) \| pred p50 (\S+) p99 (\S+) rps (\S+)")
groups: dict[tuple[str, str], list[tuple[float, ...]]] = defaultdict(list)
section = ""
for line in open(sys.argv[1]):
    if line.startswith("# ["):
        section = line[2:line.index("]") + 1]
    elif (m := LINE.match(line)):
        q, _, *values = m.groups()
        groups[(section, q)].append(tuple(map(float, values)))


def errors(rows, measured: int, predicted: int) -> str:
    e = [100 * (r[predicted] / r[measured] - 1) for r in rows]
    return f"{statistics.median(map(abs, e)):.1f} % ({' '.join(f'{x:+.0f}' for x in e)})"


for (section, q), rows in groups.items():
    print(f"{section} Q={q} n={len(rows)}: p50 {errors(rows, 0, 3)} | p99 {errors(rows, 1, 4)} | "
          f"rps {errors(rows, 2, 5)}")
