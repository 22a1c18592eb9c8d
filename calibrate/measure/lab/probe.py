"""One probe of a running lab: real ``fortio load`` against the lab's entry, CPU per process from /proc, a run folder.

A probe is failed (RunFailed, nothing stored) when fortio exits non-zero, when more than ``max_error_fraction`` of
its requests got a non-2xx code or a socket error, or when any lab process is not running before or after the load.
A probe that could not reach the requested rate is stored with status ``saturated``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from meshsim.errors import FieldError, Interrupted, RunFailed
from meshsim.run_folder import LoadSettings, RunManifest, Setup, write_run
from meshsim.calibrate.measure.lab.binaries import find_binary
from meshsim.calibrate.measure.lab.ledger import Ledger
from meshsim.calibrate.measure.lab.running import LabState
from meshsim.calibrate.measure.lab.processes import component_of
from meshsim.calibrate.measure.lab.rss_sampler import RssSampler, steady_mb
from meshsim.calibrate.measure.lab import garbage_collections, proxy_histograms, run_queue
from meshsim.calibrate.measure.lab.span_count import collector_spans, wait_for_span_export
from meshsim.calibrate.measure.lab.host_load import host_load, host_seconds
from meshsim.calibrate.measure.prometheus.prom_histogram import Bucket
from meshsim.calibrate.measure.lab.thread_sleeps import SLEEPS_NOTE, sleep_deltas, sleep_snapshot
from meshsim.calibrate.measure.lab.supervisor import (cpu_seconds_of, peak_rss_mb_of, rss_mb_of, start_recorded,
                                                      stop_recorded)

RESOLUTION_S = 0.00001  # fortio -r: 10 us buckets near the bottom (sub-millisecond proxy passes)
DEFAULT_MAX_ERROR_FRACTION = 0.001
SATURATION_RATIO = 0.95  # achieved/requested rps below this: the lab could not carry the load
PEAK_INTERVAL_S = 0.05  # how often fortio's peak memory is read while it runs
DEFAULT_OUT = Path("measurements") / "lab"


@dataclass(frozen=True)
class ProbeSettings:
    rps: float = 200.0
    connections: int = 1
    duration_s: float = 5.0
    payload_bytes: int = 0
    uniform: bool = False
    jitter: bool = False
    nocatchup: bool = False
    max_error_fraction: float = DEFAULT_MAX_ERROR_FRACTION
    leaf_delay_ms: float = 0.0  # fortio echo's `delay`: what each leaf app spends per request (hops forward the query)

    def __post_init__(self) -> None:
        if not 0 <= self.rps < math.inf:  # also refuses nan, which fortio's -qps would take for "as fast as it can"
            raise FieldError("rps", f"must be a finite number >= 0 (0 = as fast as possible), got {self.rps}")
        if self.connections < 1:
            raise FieldError("connections", f"must be >= 1, got {self.connections}")
        if not 0 < self.duration_s < math.inf:
            raise FieldError("duration_s", f"must be a finite number > 0 seconds, got {self.duration_s}")
        if self.payload_bytes < 0 or self.payload_bytes > 256 * 1024:
            raise FieldError("payload_bytes", f"must be 0..262144 bytes (fortio echo limit), got {self.payload_bytes}")
        if not 0 <= self.leaf_delay_ms <= 1000:
            raise FieldError("leaf_delay_ms", f"must be 0..1000 ms (fortio echo's delay limit), got {self.leaf_delay_ms}")
        if not 0 <= self.max_error_fraction < 1:
            raise FieldError("max_error_fraction", f"must be a fraction in [0, 1), got {self.max_error_fraction}")

    @property
    def expected_calls(self) -> int | None:
        """fortio's exact call count for -qps Q -t D -c C: int(Q*D) split evenly over the connections."""
        if self.rps <= 0:
            return None
        return int(self.rps * self.duration_s) // self.connections * self.connections


@dataclass(frozen=True)
class ProbeResult:
    folder: Path
    manifest: RunManifest
    result: Mapping[str, Any]

    def percentiles_ms(self) -> dict[str, float]:
        out = {}
        for p in self.result["DurationHistogram"].get("Percentiles") or []:
            out[f"p{p['Percentile']:g}".replace(".", "")] = round(p["Value"] * 1000, 4)
        return out

    def summary(self) -> dict[str, Any]:
        pct = self.percentiles_ms()
        return {"folder": str(self.folder), "status": self.manifest.status,
                "p50_ms": pct.get("p50"), "p90_ms": pct.get("p90"), "p99_ms": pct.get("p99"),
                "achieved_rps": round(float(self.result.get("ActualQPS", 0.0)), 2)}


def fortio_argv(fortio: Path, url: str, s: ProbeSettings, json_out: Path, access_log: Path,
                extra: Sequence[str] = (), label: str = "meshsim lab") -> list[str]:
    argv = [str(fortio), "load", "-qps", f"{s.rps:g}", "-c", str(s.connections), "-t", f"{s.duration_s:g}s",
            "-r", f"{RESOLUTION_S:g}", "-json", str(json_out), "-access-log-file", str(access_log),
            "-p", "50,75,90,99,99.9", "-loglevel", "warning", "-labels", label]
    argv += [flag for flag, on in (("-uniform", s.uniform), ("-jitter", s.jitter), ("-nocatchup", s.nocatchup)) if on]
    return [*argv, *extra, url]


def target_url(entry_url: str, payload_bytes: int, leaf_delay_ms: float = 0.0) -> str:
    """fortio echo's URL; ``fortio proxies`` mirror the path and query, so every leaf app sees the same query."""
    query = [f"size={payload_bytes}"] if payload_bytes else []
    query += [f"delay={leaf_delay_ms:g}ms"] if leaf_delay_ms else []
    return f"{entry_url}/echo" + ("?" + "&".join(query) if query else "")


def error_fraction(result: Mapping[str, Any]) -> tuple[float, int, int]:
    """(fraction, errors, total) from fortio's RetCodes: non-2xx codes and socket errors (code -1) are errors."""
    codes = {int(k): int(v) for k, v in (result.get("RetCodes") or {}).items()}
    total = sum(codes.values())
    errors = sum(v for k, v in codes.items() if not 200 <= k < 300)
    return (errors / total if total else 1.0), errors, total


@dataclass(frozen=True)
class FortioRun:
    result: dict[str, Any]
    access_log: Path
    argv: list[str]
    cpu_seconds: float  # fortio's own user+system CPU (rusage)
    peak_rss_mb: float | None  # fortio's highest VmHWM read while it ran (None: it ended before the first read)


def run_fortio(fortio: Path, url: str, settings: ProbeSettings, work: Path, extra: Sequence[str] = (),
               label: str = "meshsim lab", ledger: Ledger | None = None) -> FortioRun:
    """Run fortio load and return its result JSON, access log, command line and own resource use; the load
    generator's pid goes into ``ledger`` while it runs."""
    json_out, access = work / "fortio.json", work / "access.jsonl"
    argv = fortio_argv(fortio, url, settings, json_out, access, extra, label)
    with open(work / "fortio.log", "wb") as log:
        proc = start_recorded("client/load", argv, ledger, stdout=log, stderr=subprocess.STDOUT)
        # its memory from /proc while it runs: wait4's ru_maxrss is kept across execve, so it would hold this
        # (larger) process's peak rather than fortio's
        peak = RssSampler({"fortio": proc.pid}, interval_s=PEAK_INTERVAL_S, read=peak_rss_mb_of).start()
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: its pid is still its own
            peak.stop()
            _, status, usage = os.wait4(proc.pid, 0)  # rusage: the load generator's own CPU
        except KeyboardInterrupt:
            stop_recorded(proc, ledger)
            raise
        finally:
            peak.stop()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if ledger is not None:
            ledger.forget_process(proc.pid)
    if proc.returncode != 0 or not json_out.exists():
        tail = (work / "fortio.log").read_text(errors="replace").strip().splitlines()[-2:]
        raise RunFailed(f"lab probe: fortio load exited with code {proc.returncode} against {url}: {' | '.join(tail)}")
    return FortioRun(json.loads(json_out.read_text()), access, argv, usage.ru_utime + usage.ru_stime,
                     max(peak.samples.get("fortio", ()), default=None))


def _pids(state: LabState) -> dict[str, int]:
    return {p.name: p.pid for p in state.processes}


def _requests(result: Mapping[str, Any]) -> int:
    """The requests fortio timed (its warm-up calls excluded)."""
    return int(result["DurationHistogram"]["Count"])


def _cpu_snapshot(state: LabState) -> dict[str, float | None]:
    return {p.name: cpu_seconds_of(p.pid) for p in state.processes}


def _check_processes(state: LabState, when: str) -> None:
    stopped = [p for p in state.processes if not p.alive()]
    if stopped:
        names = ", ".join(f"{p.name} (pid {p.pid})" for p in stopped)
        raise RunFailed(f"lab probe: {when}: not running: {names}; the lab is broken, nothing stored "
                        f"(meshsim lab down, then up again)")


def machine_where(state: LabState) -> dict[str, Any]:
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"host": socket.gethostname(), "cpu_model": cpu_model, "cpus": os.cpu_count(),
            "kernel": platform.release(), "os": platform.platform(terse=True),
            "envoy_version": state.versions.get("envoy", ""), "fortio_version": state.versions.get("fortio", ""),
            "network": "loopback 127.0.0.1"}


def portable_command(argv: list[str], places: Mapping[str, str]) -> str:
    """A command line without this machine's absolute paths: binaries by name, known folders as placeholders."""
    binary = 3 if Path(argv[0]).name == "taskset" else 0  # taskset -c LIST binary ...
    out = []
    for index, arg in enumerate(argv):
        if index in (0, binary) and arg.startswith("/"):
            arg = Path(arg).name
        for folder, placeholder in places.items():
            arg = arg.replace(folder, placeholder)
        out.append(arg)
    return shlex.join(out)


def _run_id(state: LabState, s: ProbeSettings, when: float) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(when)) + f"{int(when * 1000) % 1000:03d}"
    spec = state.spec
    return f"lab-{spec.topology}-{spec.mode}-q{s.rps:g}-c{s.connections}-b{s.payload_bytes}-{stamp}"


def _cpu_usage(state: LabState, run: FortioRun, cpu_before: Mapping[str, float | None],
               cpu_after: Mapping[str, float | None]) -> dict[str, float]:
    """CPU seconds per component between two snapshots (replicas add up; client/app: fortio's rusage)."""
    cpu: dict[str, float] = {"client/app": round(run.cpu_seconds, 4)}
    for proc in state.processes:
        key = component_of(proc.name)
        before, after = cpu_before.get(proc.name), cpu_after.get(proc.name)
        if before is not None and after is not None:
            cpu[key] = round(cpu.get(key, 0.0) + after - before, 4)
    return cpu


def _usage(state: LabState, run: FortioRun, cpu_before: Mapping[str, float | None],
           cpu_after: Mapping[str, float | None],
           rss_samples: Mapping[str, Sequence[float]]) -> tuple[dict[str, float], dict[str, float]]:
    """CPU seconds over the load and steady resident memory during it (after it when unsampled), per component
    (replicas add up)."""
    cpu = _cpu_usage(state, run, cpu_before, cpu_after)
    memory: dict[str, float] = {} if run.peak_rss_mb is None else {"client/app": round(run.peak_rss_mb, 1)}
    for proc in state.processes:
        key = component_of(proc.name)  # replicas add up under one component
        rss = steady_mb(rss_samples.get(proc.name, ()))
        rss = rss if rss is not None else rss_mb_of(proc.pid)
        if rss is not None:
            memory[key] = round(memory.get(key, 0.0) + rss, 1)
    return cpu, memory


def _notes(state: LabState, settings: ProbeSettings, result: Mapping[str, Any], spans: int | None,
           saturated_at: float | None, cpu_window_s: float) -> list[str]:
    """The run's notes: what was loaded, spans collected, calls missed, saturation (``saturated_at``: the achieved
    rate when saturated), how usage was measured."""
    spec = state.spec
    notes = [f"lab {spec.topology} mode {spec.mode}; entry {state.entry_url}"]
    if settings.leaf_delay_ms:
        notes.append(f"leaf apps set to wait {settings.leaf_delay_ms:g} ms per request (fortio echo delay)")
    if state.trace_query_port is not None:
        notes.append(f"spans sent to jaeger, query API http://127.0.0.1:{state.trace_query_port}/api/traces")
    done = _requests(result)
    if spans is not None:
        calls = done + settings.connections  # + fortio's warm-up calls
        notes.append(f"collector received {spans} spans for {calls} requests (incl. warm-up)")
    if settings.expected_calls is not None and done < settings.expected_calls:
        notes.append(f"fortio completed {done} of {settings.expected_calls} planned calls (fell behind at the end)")
    if saturated_at is not None:
        notes.append(f"saturated: achieved {saturated_at:.1f} of {settings.rps:g} rps requested")
    notes.append(f"cpu_seconds: deltas of each process's CPU-time clock (ns) over a {cpu_window_s:.2f} s window "
                 "around the load (client/app: fortio's rusage); memory_mb: resident set size (VmRSS) during the load, "
                 "the median of the second half of samples every 0.25 s (client/app: fortio's peak RSS, the highest "
                 f"VmHWM read every {PEAK_INTERVAL_S:g} s while it ran); {SLEEPS_NOTE}")
    if state.cpu_limit_backend:
        notes.append(f"cpu limit via {state.cpu_limit_backend}")
    return notes


def _envoys(state: LabState) -> dict[str, int]:
    return {p.name: p.admin_port for p in state.processes if p.admin_port is not None}


def _histograms(state: LabState) -> proxy_histograms.Snapshot:
    """Every Envoy's request-time buckets now (none in a lab without Envoys)."""
    envoys = _envoys(state)
    return proxy_histograms.read(envoys, state.spec.services[0].name) if envoys else {}


def _histograms_after(state: LabState, before: proxy_histograms.Snapshot,
                      load_end: float) -> dict[str, list[Bucket]]:
    """Each Envoy view's buckets over the load, read after the Envoys' first stats flush past its end."""
    if not _envoys(state):
        return {}
    time.sleep(max(0.0, load_end + proxy_histograms.FLUSH_WAIT_S - time.time()))
    return proxy_histograms.over_load(before, _histograms(state))


def _extra_files(histograms: Mapping[str, list[Bucket]], waited: Mapping[str, run_queue.ThreadSched],
                 result: Mapping[str, Any], collections: Mapping[str, garbage_collections.Collections],
                 ) -> dict[str, tuple[str, bytes]] | None:
    """The run folder's files beside fortio's: Envoys' histograms, run-queue delays, the apps' collections."""
    extra = {**(proxy_histograms.run_files(histograms) or {}),
             **(run_queue.run_files(waited, _requests(result), run_queue.kernel_slice_ms()) or {}),
             **(garbage_collections.run_files(collections, _requests(result)) or {})}
    return extra or None


def _free_folder(out_dir: Path, run_id: str) -> Path:
    """``out_dir/run_id``, or with a suffix -2, -3 ... when a run of that id is already stored."""
    folder = out_dir / run_id
    suffix = 1
    while folder.exists():
        suffix += 1
        folder = out_dir / f"{run_id}-{suffix}"
    return folder


def _provenance(state: LabState, argv: list[str], work: Path) -> str:
    """How a run was made: the load's command and every lab process's, without machine paths."""
    places = {str(work): "$RUN", state.lab_dir: "$LAB"}
    commands = "\n".join(f"{p.name}: {portable_command(p.command, places)}" for p in state.processes)
    return (f"meshsim lab probe on host {machine_where(state)['host']} "
            f"($RUN = the probe's temp folder, $LAB = the lab folder)\n"
            f"load: {portable_command(argv, places)}\n"
            f"lab processes (started {state.started_at}):\n{commands}")


def probe(state: LabState, settings: ProbeSettings, out_dir: Path = DEFAULT_OUT,
          ledger: Ledger | None = None) -> ProbeResult:
    """Load the lab with fortio and store the run under ``out_dir``; RunFailed (nothing stored) on a failed run.
    ``ledger``: where the load generator's pid and the probe's temporary folder are recorded while they exist."""
    fortio = find_binary("fortio")
    url = target_url(state.entry_url, settings.payload_bytes, settings.leaf_delay_ms)
    _check_processes(state, "before the load")
    spans_before = collector_spans(state)
    with tempfile.TemporaryDirectory(prefix="meshsim-probe-") as tmp:
        work = Path(tmp)
        if ledger is not None:
            ledger.add_temp_dir(work)
        started = time.time()
        host_before = host_seconds()
        cpu_before, sched_before = _cpu_snapshot(state), run_queue.snapshot(_pids(state))
        sleeps_before = sleep_snapshot(state.processes)
        histograms_before, go_logs = _histograms(state), {p.name: p.log for p in state.processes if p.kind == "app"}
        collections_before = garbage_collections.snapshot(go_logs)
        sampler = RssSampler(_pids(state)).start()
        try:
            run = run_fortio(fortio, url, settings, work, label=f"meshsim lab {state.spec.topology} {state.spec.mode}",
                             ledger=ledger)
            rss_samples = sampler.stop()  # the load is over: later samples would be of the idle lab
            # the host's load over the load alone: while spans are exported the idle lab leaves the cores to others
            at_load_end = (host_seconds(), _cpu_snapshot(state), time.time() - started)
            waited = run_queue.over_load(sched_before, run_queue.snapshot(_pids(state)), component_of)
            collections = garbage_collections.over_load(go_logs, collections_before)
            result, access, argv = run.result, run.access_log, run.argv
            if state.collector_port is not None:
                wait_for_span_export(state)
            histograms = _histograms_after(state, histograms_before, started + at_load_end[2])
        except KeyboardInterrupt:
            raise Interrupted("lab probe interrupted; nothing stored for this run") from None
        finally:
            sampler.stop()
        cpu_after, sleeps_after = _cpu_snapshot(state), sleep_snapshot(state.processes)
        cpu_window_s = time.time() - started
        fraction, errors, total = error_fraction(result)
        _check_processes(state, "after the load")
        if fraction > settings.max_error_fraction:
            codes = result.get("RetCodes")
            raise RunFailed(f"lab probe: {errors} of {total} requests failed (codes {codes}) against {url}, above "
                            f"max_error_fraction {settings.max_error_fraction:g}; nothing stored")
        spans_after = collector_spans(state)
        cpu, memory = _usage(state, run, cpu_before, cpu_after, rss_samples)
        host_after, cpu_at_end, load_window_s = at_load_end
        lab_cpu = _cpu_usage(state, run, cpu_before, cpu_at_end)
        where = {**machine_where(state), "host_load": host_load(host_before, host_after, load_window_s, lab_cpu)}
        achieved = float(result.get("ActualQPS") or 0.0)
        saturated = settings.rps > 0 and achieved < SATURATION_RATIO * settings.rps
        spec = state.spec
        spans = (spans_after - spans_before) if spans_before is not None and spans_after is not None else None
        notes = _notes(state, settings, result, spans, achieved if saturated else None, cpu_window_s)
        manifest = RunManifest(
            id=_run_id(state, settings, started),
            source="lab",
            provenance=_provenance(state, argv, work),
            when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            where=where,
            setup=Setup(mesh=spec.mesh, path=spec.path, features=spec.features, topology=spec.topology,
                        mesh_version=f"envoy {state.versions['envoy']}" if spec.has_proxies else "",
                        proxy_workers=spec.workers if spec.has_proxies else None,
                        proxy_cpu_limit=spec.cpu_limit, replicas=max(s.replicas for s in spec.services),
                        payload_bytes=settings.payload_bytes),
            load=LoadSettings(generator="fortio", rps=settings.rps, connections=settings.connections,
                              duration_s=settings.duration_s, uniform=settings.uniform, jitter=settings.jitter,
                              nocatchup=settings.nocatchup, resolution_s=RESOLUTION_S, url=url),
            cpu_seconds=cpu,
            memory_mb=memory,
            sleeps=sleep_deltas(state.processes, sleeps_before, sleeps_after),
            status="saturated" if saturated else "ok",
            notes="; ".join(notes),
        )
        folder = _free_folder(out_dir, manifest.id)
        # fortio's JSON as written, except the temp folder in AccessLoggerInfo (no machine paths in stored runs).
        raw = (work / "fortio.json").read_bytes().replace(str(work).encode(), b"$RUN")
        extra = _extra_files(histograms, waited, result, collections)
        write_run(folder, manifest, raw, access if access.exists() else None, extra)
    return ProbeResult(folder, manifest, result)
