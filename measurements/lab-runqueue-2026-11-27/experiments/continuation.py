"""SimPy-only experiment (not shipped): a thread that is on a core runs the jobs queued at it back to back, without
a second wait for a core.

In the engine (sim/engine/stations.py) a job that arrives while its worker is busy is booked on the node's cores as
a separate burst from the moment its worker frees: it waits in the node's FCFS queue again, behind every burst booked
meanwhile, so at host saturation a worker's busy period holds several core waits and almost no job finds its worker
idle (no wake is paid). On Linux the thread finishes its event, epoll_wait returns the next one at once (no sleep,
no switch) and it runs in the same timeslice; then it blocks, and pays a wake for the next job.

``cont``: a job that found its worker busy runs on the core its worker's previous burst ran on, from that burst's
end (and its post work, after the response, right after it). Bursts of other threads already booked on that core
from there on are pushed later in the core's book (the core's work is conserved, as the kernel's run queue behind a
running thread is delayed); but their finishes were handed to their callers when they were booked, so each pushed
burst stays early by the push (the approximation; the output gives its total per request, ``pushed``). A job whose
worker's previous burst is no longer in the book (forgotten from a long backlog) pushes the forgotten backlog.
``cont+post``: also every job's post work (after its response) right after it on the same core (in the engine it is
a separate burst with its own core wait).
``gap``: as ``cont``, but only where the core is free from the previous burst's end for the whole job (nothing is
pushed, so no bias; elsewhere the engine's booking). It then books what the engine books, on another core at most:
its differences from ``engine`` are the sensitivity of one replay to which core a burst took.
``engine``: the engine as it is. All replay with the same seeds.

Usage: python continuation.py MODE MODEL SIM_S REPLICATIONS GROUP=DIR,DIR... (each group's runs replayed with the
group's runs as the replay's baselines; the one-connection baselines only give the hop, and a GROUP with a ``/``
does not replay its baselines), or ``python continuation.py table continuation.out`` (the README's tables).
Prints per run: achieved rps, p50, p99 (measured / predicted, error), per process CPU ms per request (measured /
predicted) and the model's wakes per request (jobs that found their worker asleep and paid its resume CPU) beside
the kernel's voluntary context switches per request where the run kept run-queue.json (every thread of the
process: the workers' sleeps and the others').
"""

from __future__ import annotations

import json
import math
import re
import sys
from bisect import bisect_left, bisect_right
from pathlib import Path

from meshsim.calibrate.fit.model_file import read_model
from meshsim.calibrate.measure.dataset import load_run
from meshsim.calibrate.validation.compare import measured_latency
from meshsim.calibrate.validation.replay import replay
from meshsim.sim.engine import simpy_replication, stations
from meshsim.sim.experiments.predict import predict_options
from replay_runs import run_folders  # run from this folder, as the other experiments

WAKES: dict[str, int] = {}  # component -> recorded jobs that found their worker asleep (paid resume_cpu)
JOBS: dict[str, int] = {}  # component -> recorded jobs
ORIGINAL_RUN = stations.NodeCores.run
STARTED = [0, 0]  # requests started in the recording windows of the replications run, and those replications
ORIGINAL_REPLICATION = simpy_replication.run_replication


def counted_replication(*args, **kwargs):
    """The engine's replication, counting the requests it started in its window (the wakes' denominator)."""
    result = ORIGINAL_REPLICATION(*args, **kwargs)
    STARTED[0] += result.started
    STARTED[1] += 1
    return result


def core_of(node: stations.NodeCores, end: float) -> int | None:
    """The core whose book holds the interval ending at ``end`` (None: forgotten)."""
    for core, ends in enumerate(node.ends):
        k = bisect_left(ends, end)
        if k < len(ends) and ends[k] == end:
            return core
    return None


def run_recording_core(self: stations.NodeCores, start: float, work: float) -> float:
    """The engine's booking, remembering the core it took (``self.took``) for the thread's next continuation."""
    end = ORIGINAL_RUN(self, start, work)
    self.took = core_of(self, end) if work > 0 else None
    return end


def run_on(node: stations.NodeCores, core: int, at: float, work: float) -> float:
    """Book ``work`` on ``core`` from ``at`` (the thread keeps its core), pushing the bursts booked there later."""
    if MODE == "gap" and work > 0.0 and not gap_at(node, core, at, work):
        return run_recording_core(node, at, work)  # no gap there: the engine's booking
    if work <= 0.0:
        node.took = core
        return at
    work *= node.slowdown
    if node.recording:
        node.busy += work
    node.took = core
    starts, ends = node.starts[core], node.ends[core]
    if at < node.floor[core]:  # its previous burst was forgotten in a long backlog: that backlog is pushed
        node.floor[core] += work
        end = at + work  # runs where the forgotten backlog was (which ends `work` later now)
        node.took = None
        _push(node, core, 0, node.floor[core])
        return end
    i = bisect_right(ends, at)
    if i < len(ends) and starts[i] < at:  # its own previous burst was pushed by another continuation: after it
        at = ends[i]
        i += 1
    end = at + work
    starts.insert(i, at)
    ends.insert(i, end)
    _push(node, core, i + 1, end)
    if len(ends) > stations.PRUNE_AT:
        node._trim(core)
    return end


# continuations booked, bursts of other threads pushed, their summed shift (s), and the shift of those that are a
# job on a request's path (not post work nor background: only these make a latency early): the bias
PUSHED = [0, 0, 0.0, 0.0]


def gap_at(node: stations.NodeCores, core: int, at: float, work: float) -> bool:
    """Whether ``core`` is free from ``at`` for ``work`` (mode ``gap`` continues only then: no push, no bias)."""
    ends, starts = node.ends[core], node.starts[core]
    i = bisect_right(ends, at)
    return at >= node.floor[core] and (i == len(ends) or starts[i] >= at and starts[i] - at >= work * node.slowdown)


def _push(node: stations.NodeCores, core: int, i: int, carry: float) -> None:
    """Shift the core's intervals from the i-th on so none begins before ``carry`` (gaps absorb the shift)."""
    starts, ends = node.starts[core], node.ends[core]
    PUSHED[0] += 1
    while i < len(starts) and starts[i] < carry:
        shift = carry - starts[i]
        PUSHED[1] += 1
        PUSHED[2] += shift
        on_path = node.__dict__.setdefault("path_ends", set())
        if ends[i] in on_path:
            PUSHED[3] += shift
            on_path.discard(ends[i])
            on_path.add(ends[i] + shift)
        starts[i] += shift
        ends[i] += shift
        carry = ends[i]
        i += 1
    if ends:
        node.last[core] = max(node.last[core], ends[-1])
    node.last[core] = max(node.last[core], node.floor[core])


class Continuing:
    """A station's view of its node's cores: a burst that starts exactly where one of the station's own bursts ended
    and a worker is still busy until then (``Station._book`` starts a job queued at its worker at the worker's
    ``free_at``) runs on that burst's core (``run_on``); every other burst is the engine's booking. ``post_too``: the
    post work after a job (booked from the job's finish) continues too."""

    def __init__(self, node: stations.NodeCores, station: stations.Station, post_too: bool) -> None:
        self.node, self.station, self.post_too = node, station, post_too
        self.core_at_end: dict[float, int] = {}  # end of each of the station's recent bursts -> its core
        self.previous_end = -1.0  # the end of the burst booked last (its post work starts there)

    def run(self, start: float, work: float) -> float:
        core = self.core_at_end.get(start)
        queued = core is not None and start in self.station.free_at
        post = core is not None and start == self.previous_end and (self.post_too or self.continued)
        if MODE != "engine" and (queued or post):
            end, self.continued = run_on(self.node, core, start, work), queued
        else:
            end, self.continued = run_recording_core(self.node, start, work), False
        if self.node.took is not None:
            if len(self.core_at_end) > 4 * stations.PRUNE_AT:  # forget the oldest half (dicts keep their order)
                for old in list(self.core_at_end)[:2 * stations.PRUNE_AT]:
                    del self.core_at_end[old]
            self.core_at_end[end] = self.node.took
        self.previous_end = end
        if self.timed and self.calls == 0:  # the job's own burst (the second call is its post work)
            self.node.__dict__.setdefault("path_ends", set()).add(end)
        self.calls += 1
        return end

    continued = False
    timed = False  # the job being booked is on a request's path
    calls = 0  # node bookings of the job being booked so far


ORIGINAL_BOOK = stations.Station._book


def make_book(post_too: bool):
    def _book(self, now, work, server, post, timed):
        """The engine's Station._book on a ``Continuing`` view of its node, counting jobs and wakes."""
        key = self.name.split("#")[0]
        if isinstance(self.node, stations.NodeCores) and self.quota is None:
            self.node = Continuing(self.node, self, post_too)
            draw = self._wake_next

            def counted_wake() -> float:  # the engine draws exactly when a job finds its worker asleep
                if self.recording:
                    WAKES[key] = WAKES.get(key, 0) + 1
                return draw()
            self._wake_next = counted_wake
        if self.recording:
            JOBS[key] = JOBS.get(key, 0) + 1
        if isinstance(self.node, Continuing):
            self.node.timed, self.node.calls = timed and work > 0, 0
        return ORIGINAL_BOOK(self, now, work, server, post, timed)
    return _book


def measured_switches(run) -> dict[str, float]:
    name = run.manifest.files.get("run_queue")
    if name is None:
        return {}
    data = json.loads((run.folder / name).read_text())
    return {c: m["voluntary_switches"] / data["requests"] for c, m in data["components"].items()}


def report(group: str, run, pred: dict) -> None:
    meas, _ = measured_latency(run)
    lat, rps = pred["latency_ms"], pred["achieved_rps"]
    err = lambda p, m: f"{(p / m - 1) * 100:+.0f}%"
    print(f"{group} {run.id[4:]} ({STARTED[1]} replications)  rps {run.result.actual_rps:.0f} / {rps:.0f} {err(rps, run.result.actual_rps)}"
          f"  p50 {meas['p50']:.2f} / {lat['p50']:.2f} {err(lat['p50'], meas['p50'])}"
          f"  p99 {meas['p99']:.2f} / {lat['p99']:.2f} {err(lat['p99'], meas['p99'])}", flush=True)
    if PUSHED[0]:
        print(f"    continuations {PUSHED[0] / STARTED[0]:.2f} per request; bursts of others pushed later in the book "
              f"(their finishes stay early): {PUSHED[1] / STARTED[0]:.2f} per request, by {PUSHED[2] / max(PUSHED[1], 1) * 1e3:.3f}"
              f" ms each on average; on requests' paths {PUSHED[3] / STARTED[0] * 1e3:.2f} ms per request", flush=True)
    switches = measured_switches(run)
    requests = max(STARTED[0], 1)  # started in the jobs' recording windows, every replication
    for comp in sorted(pred["cpu_cores"]):
        measured = run.cpu_per_request(comp)
        predicted = pred["cpu_cores"][comp] / max(rps, 1e-9)
        m = f"{measured * 1e3:.3f}" if measured is not None else "-"
        e = err(predicted, measured) if measured else ""
        s = f"{switches[comp]:.2f}" if comp in switches else "-"
        print(f"    {comp:16} cpu ms/req {m} / {predicted * 1e3:.3f} {e:>5}  wakes/req kernel-voluntary {s} / "
              f"model {WAKES.get(comp, 0) / requests:.2f} of {JOBS.get(comp, 0) / requests:.2f} jobs", flush=True)


MODES = ("engine", "cont", "cont+post", "gap")
HEAD = re.compile(r"(\S+) (\S+) \(\d+ replications\)  rps (\d+) / \d+ (\S+)  p50 (\S+) / \S+ (\S+)  p99 (\S+) / \S+ (\S+)")
PROC = re.compile(r"\s+(\S+)\s+cpu ms/req \S+ / \S+ +(\S+)  wakes/req kernel-voluntary (\S+) / model (\S+) of")
PUSH = re.compile(r"\s+continuations .*: (\S+) per request, by (\S+) ms each.*paths (\S+) ms per request")


def parsed(path: str) -> dict[str, dict[str, dict]]:
    """run -> mode -> its figures, from continuation.out (each mode's output after a line ``== MODE``)."""
    rows: dict[str, dict[str, dict]] = {}
    mode = run = ""
    for line in Path(path).read_text().splitlines():
        if line.startswith("== "):
            mode = line[3:].strip()
        elif head := HEAD.match(line):
            group, name = head.group(1), head.group(2)
            run = f"{group.split('/')[0]} {name.split('-b1024-')[0]} {name[-9:]}"
            rows.setdefault(run, {})[mode] = {
                "rps": float(head.group(3)), "rps_e": head.group(4), "p50": float(head.group(5)),
                "p50_e": head.group(6), "p99": float(head.group(7)), "p99_e": head.group(8), "pushed_ms": 0.0,
                "sidecar": ([], [], []), "app": ([], [], [])}
        elif (proc := PROC.match(line)) and run:
            kind = "sidecar" if proc.group(1).endswith("sidecar") else "app" if proc.group(1) in ("s1/app", "s2/app") else ""
            if kind:
                cpu, wakes, kernel = rows[run][mode][kind]
                cpu.append(float(proc.group(2).rstrip("%")) if proc.group(2).endswith("%") else math.nan)
                wakes.append(float(proc.group(4)))
                kernel.append(float(proc.group(3)) if proc.group(3) != "-" else math.nan)
        elif (push := PUSH.match(line)) and run:
            rows[run][mode]["pushed_ms"] = float(push.group(1)) * float(push.group(2))
            rows[run][mode]["pushed_path_ms"] = float(push.group(3))
    return rows


def _mean(xs) -> float:
    xs = [x for x in xs if x == x]
    return sum(xs) / len(xs) if xs else math.nan


def table(path: str) -> None:
    """The README's tables from continuation.out: per run and mode, the signed errors of rps, p50 and p99; then the
    sidecars' and forwarding apps' mean CPU error and wakes per request, and the continuation's bias."""
    rows = parsed(path)
    present = [m for m in MODES if any(m in r for r in rows.values())]
    modes = " / ".join(present)
    print(f"| run | rps measured | rps error: {modes} | p50 ms measured | p50 error | p99 ms measured | p99 error |")
    print("|---|---|---|---|---|---|---|")
    for run, by in rows.items():
        cells = lambda k: " / ".join(by[m][k] if m in by else "." for m in present)
        e = by.get("engine") or next(iter(by.values()))
        print(f"| {run} | {e['rps']:.0f} | {cells('rps_e')} | {e['p50']:.2f} | {cells('p50_e')} | {e['p99']:.2f} | "
              f"{cells('p99_e')} |")
    print()
    print("| run | sidecars' CPU error, engine / cont | apps' CPU error | sidecars' wakes per request: kernel voluntary "
          "switches / engine / cont | apps' wakes per request: kernel / engine / cont | cont: others' jobs on requests' "
          "paths pushed, ms per request | cont's rps error with that added to its latency |")
    print("|---|---|---|---|---|---|---|")
    fmt = lambda x, f: "-" if x != x else format(x, f)
    for run, by in rows.items():
        e, c = by.get("engine"), by.get("cont")
        if not (e and c):
            continue
        cols = []
        for kind in ("sidecar", "app"):
            cols.append(f"{fmt(_mean(e[kind][0]), '+.0f')} / {fmt(_mean(c[kind][0]), '+.0f')} %")
        for kind in ("sidecar", "app"):
            cols.append(f"{fmt(_mean(e[kind][2]), '.2f')} / {fmt(_mean(e[kind][1]), '.2f')} / "
                        f"{fmt(_mean(c[kind][1]), '.2f')}")
        # a closed loop (fortio's connections) carries connections / latency: its p50 as the latency
        p50 = c["p50"] * (1 + float(c["p50_e"].rstrip("%")) / 100)
        rps = c["rps"] * (1 + float(c["rps_e"].rstrip("%")) / 100)
        path = c.get("pushed_path_ms", math.nan)
        bound = rps * p50 / (p50 + path) / c["rps"] - 1
        print(f"| {run} | {' | '.join(cols)} | {fmt(path, '.2f')} | {fmt(bound * 100, '+.0f')} % |")


def main() -> None:
    global MODE
    if sys.argv[1] == "table":
        table(sys.argv[2])
        return
    MODE, model_path, sim_s, reps = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    stations.NodeCores.run = run_recording_core  # the engine's booking; `engine` never continues on its core
    stations.Station._book = make_book(MODE == "cont+post")
    simpy_replication.run_replication = counted_replication
    model = read_model(model_path)
    for spec in sys.argv[5:]:
        group, paths = spec.split("=", 1)
        runs_here = [load_run(f) for f in run_folders(paths.split(","))]
        for run in runs_here:
            if run.manifest.setup.path == "baseline" and (run.manifest.load.connections < 2 or "/" in group):
                continue  # the one-connection baselines (the hop's time); a GROUP/ replays its baselines elsewhere
            plan, _ = replay(model, run, runs_here, topology=None, sim_duration_s=sim_s, replications=reps, seed=1,
                             processes=1)
            WAKES.clear()
            JOBS.clear()
            STARTED[:] = [0, 0]
            PUSHED[:] = [0, 0, 0.0, 0.0]
            # no saturation search: its replications at other rates would count in the wakes per request
            pred = predict_options(plan.options.with_changes(mesh=Path(model_path), engine="simpy",
                                                             saturation=False)).to_dict()
            report(group, run, pred)
            for note in plan.notes:
                if "forwarding apps:" in note or "wake" in note and "cannot" in note:
                    print(f"    note: {note[:200]}", flush=True)


if __name__ == "__main__":
    main()
