"""Per held-out run, the signed errors of two validation files side by side, and the median |error| of every
sidecar's (and the proxy load balancer's) CPU:  python per_run.py BEFORE.txt AFTER.txt"""
import re
import statistics
import sys

ROW = re.compile(r"^  (p50 ms|p99 ms|rps)\s+\S+\s+\S+\s+(\S+)", re.M)
CPU = re.compile(r"cpu (\S*(?:sidecar|lb:server))\s+\S+\s+\S+\s+(\S+)")


def runs(path: str) -> dict[str, tuple[dict[str, str], list[str]]]:
    out = {}
    for block in re.split(r"\n(?=lab-)", open(path).read()):
        head = block.split()[0] if block.split() else ""
        if head.startswith("lab-") and "-baseline-" not in head and "HELD-OUT" in block.split("\n")[0]:
            out[head] = (dict(ROW.findall(block)), [e for _, e in CPU.findall(block)])
    return out


before, after = runs(sys.argv[1]), runs(sys.argv[2])
for run, (b, bc) in before.items():
    a, ac = after[run]
    print(f"{run[4:-19]:34} p50 {b['p50 ms']:>5} -> {a['p50 ms']:>5} | p99 {b['p99 ms']:>5} -> {a['p99 ms']:>5} | "
          f"rps {b['rps']:>5} -> {a['rps']:>5} | CPU {' '.join(bc)} -> {' '.join(ac)}")
for name, table in (("before", before), ("after", after)):
    cells = [float(e.rstrip("%")) for _, cpu in table.values() for e in cpu]
    print(f"{name}: {len(cells)} CPU cells, median |error| {statistics.median(map(abs, cells)):.1f} %, "
          f"signed median {statistics.median(cells):+.1f} %")
