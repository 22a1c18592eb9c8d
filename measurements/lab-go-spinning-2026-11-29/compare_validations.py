"""validation/*-before.txt against *-after.txt: each chain3 run's p50, p99, achieved rps and s1's app and sidecar CPU
per request errors (%), and each file's summary line. Usage: python compare_validations.py validation"""
import re
import sys
from pathlib import Path

ROW = re.compile(r"^\s+(p50|p99|rps) (?:ms)?\s+\S+\s+\S+\s+([+-]\d+)%")
CPU = re.compile(r"^\s+cpu (s1/app|s1/sidecar)\s+\S+\s+\S+\s+([+-]\d+)%")
COLUMNS = ("p50", "p99", "rps", "s1/app", "s1/sidecar")


def runs(path: Path) -> list[tuple[str, dict[str, int]]]:
    out: list[tuple[str, dict[str, int]]] = []
    for line in path.read_text().splitlines():
        if m := re.match(r"^(lab-\S+)", line):
            out.append((m.group(1)[4:40] + (" (derivation)" if "TOPOLOGY" in line else ""), {}))
        elif out and (m := ROW.match(line) or CPU.match(line)):
            out[-1][1][m.group(1)] = int(m.group(2))
    return out


def summary(path: Path) -> str:
    line = next(x for x in path.read_text().splitlines() if x.startswith("summary over"))
    return line.split("median/worst: ")[1]


for before in sorted(Path(sys.argv[1]).glob("*-before.txt")):
    after = before.with_name(before.name.replace("-before", "-after"))
    print(f"== {before.name[:-11]} (before -> after)")
    for (name, b), (_, a) in zip(runs(before), runs(after)):
        if "chain3" in name:
            print(f"  {name:50s}" + " ".join(f"{c} {b.get(c, '-'):>4} -> {a.get(c, '-'):>4}" for c in COLUMNS))
    print(f"  summary before: {summary(before)}\n  summary after:  {summary(after)}")
