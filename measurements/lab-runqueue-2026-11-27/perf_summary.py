"""The distribution of each run-queue wait (perf's "sch delay": from a thread's wake-up to its switch-in) of the lab's
threads, from `perf sched timehist` lines (time, [cpu], task[tid/pid], sch delay ms, run time ms; perf/*.timehist.gz),
and who ran on the core while a lab thread waited longer than 1 ms.
Usage: python perf_summary.py perf/NAME.timehist.gz REQUESTS  (prints markdown rows)."""

from __future__ import annotations

import bisect
import collections
import gzip
import re
import sys

TASK = re.compile(r"(?P<name>.*)\[(?P<tid>\d+)(?:/(?P<pid>\d+))?\]$")


def read(path: str) -> list[tuple[float, int, str, int, float, float]]:
    """(switch-out time s, cpu, name, pid, sch delay s, run time s) per switch-in."""
    out = []
    with gzip.open(path, "rt") as handle:
        for line in handle:
            t, cpu, task, sch, run = line.split()
            m = TASK.match(task)
            if m is None:
                continue
            out.append((float(t), int(cpu.strip("[]")), m["name"], int(m["pid"] or m["tid"]), float(sch) / 1e3,
                        float(run) / 1e3))
    return out


def kinds(events: list) -> dict[int, str]:
    """pid -> kind: Envoy (its workers are wrk:worker_N), the load generator (the fortio started last), the fortio
    apps, or a neighbour (anything else that is not a kernel thread)."""
    envoy = {pid for _, _, name, pid, _, _ in events if name.startswith("wrk:worker") or name == "envoy"}
    fortio = sorted({pid for _, _, name, pid, _, _ in events if name == "fortio"})
    out = {pid: "envoy" for pid in envoy}
    out.update({pid: "fortio apps" for pid in fortio[:-1]})
    if fortio:
        out[fortio[-1]] = "load generator (fortio)"
    return out


def quantile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))]


def holders(events: list, kind: dict[int, str]) -> collections.Counter:
    """Who ran on the core a lab thread waited more than 1 ms for (seconds per kind, over those waits)."""
    by_cpu: dict[int, list] = collections.defaultdict(list)
    for e in events:
        by_cpu[e[1]].append(e)
    starts = {cpu: [e[0] - e[5] for e in es] for cpu, es in by_cpu.items()}
    held: collections.Counter = collections.Counter()
    for t, cpu, _, pid, sch, run in events:
        if pid not in kind or sch <= 1e-3:
            continue
        begin, end = t - run - sch, t - run
        i = max(0, bisect.bisect_left(starts[cpu], begin) - 50)
        for t2, _, name2, pid2, _, run2 in by_cpu[cpu][i:]:
            if t2 - run2 >= end:
                break
            overlap = min(t2, end) - max(t2 - run2, begin)
            if overlap > 0:
                held["lab " + kind[pid2] if pid2 in kind else "neighbours (other processes)"
                     if "kworker" not in name2 and "ksoftirq" not in name2 else "kernel threads"] += overlap
    return held


def main() -> None:
    events = read(sys.argv[1])
    requests = int(sys.argv[2])
    kind = kinds(events)
    print("| kind | switch-ins per request | wait p50 ms | p90 | p99 | p99.9 | max | share > 1 ms | its share of the wait |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in ("envoy", "fortio apps", "load generator (fortio)"):
        waits = sorted(e[4] for e in events if kind.get(e[3]) == name)
        if not waits:
            continue
        long = [w for w in waits if w > 1e-3]
        print(f"| {name} | {len(waits) / requests:.1f} | " + " | ".join(
            f"{quantile(waits, q) * 1e3:.3f}" for q in (0.5, 0.9, 0.99, 0.999)) + f" | {waits[-1] * 1e3:.2f} | "
            f"{len(long) / len(waits) * 100:.1f} % | {sum(long) / max(sum(waits), 1e-12) * 100:.0f} % |")
    held = holders(events, kind)
    total = sum(held.values()) or 1.0
    print("\nwhile a lab thread waited > 1 ms, its core ran: " + ", ".join(
        f"{k} {v / total * 100:.0f} %" for k, v in held.most_common()))


if __name__ == "__main__":
    main()
