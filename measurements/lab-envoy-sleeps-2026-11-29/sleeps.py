"""Per sidecar in a host-wide `perf script` trace (collect.sh): its worker threads' sleeps (switched out in state S)
and what each waking cycle -- from the switch-in after a sleep to the next sleep -- did: the epoll_wait returns and
the events they carried, preemptions (switched out runnable), time on the CPU; and a least-squares split of a
cycle's CPU time into a part per cycle and a part per event. Usage: python sleeps.py FOLDER [FOLDER ...] (each
holds round folders with perf-script.txt.gz and the probe's run folder; beside them TOPOLOGY-envoys.txt)."""

import collections
import gzip
import json
import re
import sys
from pathlib import Path

import numpy as np

LINE = re.compile(r"^\s*(.+?)\s+(\d+)/(\d+)\s+([\d.]+):\s+(\S+):\s+(.*)$")
SWITCH = re.compile(r"prev_comm=(.+?) prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=(.+?) next_pid=(\d+)")
WORKER = "wrk:"  # Envoy names its worker threads wrk:worker_N


def roles(folder: Path) -> dict[int, str]:
    """Envoy pid -> its sidecar (client/sidecar, s1/sidecar, ...), from TOPOLOGY-envoys.txt."""
    listing = folder.parent / f"{folder.name.split('-q')[0]}-envoys.txt"
    out = {}
    for line in listing.read_text().splitlines():
        pid, config = int(line.split()[0]), re.search(r"config/(\w+)_sidecar", line).group(1)
        out[pid] = f"{config}/sidecar"
    return out


def cycles(path: Path) -> tuple[dict[int, list[dict]], dict[int, int], float]:
    """tid -> its waking cycles, tid -> pid, and the trace's span (s)."""
    out: dict[int, list[dict]] = collections.defaultdict(list)
    pid_of: dict[int, int] = {}
    state: dict[int, dict] = {}
    slept_at: dict[int, float] = {}
    on_at: dict[int, float] = {}
    first = last = None
    for line in gzip.open(path, "rt"):
        m = LINE.match(line)
        if not m:
            continue
        pid, tid, t, event, rest = int(m.group(2)), int(m.group(3)), float(m.group(4)), m.group(5), m.group(6)
        pid_of[tid] = pid
        first = t if first is None else first
        last = t
        if event == "syscalls:sys_exit_epoll_wait":
            c = state.get(tid)
            if c is not None:
                n = int(rest.split()[-1], 16)
                c["returns"] += 1
                c["events"] += n
                c["zero"] += n == 0
        elif event == "sched:sched_switch":
            s = SWITCH.search(rest)
            prev, pstate, nxt = int(s.group(2)), s.group(3), int(s.group(5))
            if s.group(1).startswith(WORKER):
                c = state.get(prev)
                if c is not None and prev in on_at:
                    c["on"] += t - on_at.pop(prev)
                if pstate[0] in "SD":
                    if c is not None:
                        out[prev].append(c)
                    state.pop(prev, None)
                    slept_at[prev] = t
                elif c is not None:
                    c["preempted"] += 1
            if s.group(4).startswith(WORKER):
                on_at[nxt] = t
                if nxt in slept_at:
                    state[nxt] = {"slept": t - slept_at.pop(nxt), "returns": 0, "events": 0, "zero": 0,
                                  "preempted": 0, "on": 0.0}
    return out, pid_of, (last - first) if first is not None else 0.0


def report(rnd: Path) -> None:
    run = next(rnd.glob("lab-*"))
    rps = json.loads((run / "fortio.json").read_text())["ActualQPS"]
    per_tid, pid_of, span = cycles(rnd / "perf-script.txt.gz")
    requests = rps * span
    role_of = roles(rnd.parent)
    by_role: dict[str, list[dict]] = collections.defaultdict(list)
    for tid, cs in per_tid.items():
        by_role[role_of.get(pid_of.get(tid, -1), "?")] += cs
    print(f"{rnd.parent.name}/{rnd.name}: {rps:.0f} rps, {span:.2f} s traced")
    for role, cs in sorted(by_role.items()):
        slept = np.array([c["slept"] for c in cs]) * 1e6
        events = np.array([c["events"] for c in cs], dtype=float)
        on = np.array([c["on"] for c in cs]) * 1e6
        fit = np.linalg.lstsq(np.column_stack([np.ones_like(events), events]), on, rcond=None)[0]
        print(f"  {role:15s} {len(cs) / requests:.2f} sleeps and {events.sum() / requests:.2f} events per request; "
              f"sleep p50 {np.percentile(slept, 50):.0f} us, mean {slept.mean():.0f}; per cycle {events.mean():.2f} "
              f"events, {np.mean([c['preempted'] for c in cs]):.2f} preemptions, {on.mean():.0f} us on CPU "
              f"({on.sum() / requests / 1e3:.3f} ms per request) = {fit[0]:.0f} + {fit[1]:.1f} per event")


for top in sys.argv[1:]:
    for rnd in sorted(Path(top).glob("round*")):
        report(rnd)
