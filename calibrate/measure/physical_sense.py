"""Is a loaded run physically possible? Checked where runs are loaded, before anything fits or validates them.

A fortio result can be well formed and still impossible: a histogram written in milliseconds where fortio writes
seconds reads as p50 677 ms at 200 rps on one connection, and a fit turns it into a 366 ms proxy pass. Each check
below raises one :class:`~meshsim.errors.ModelError` line naming the file and what is impossible:

- **units**: fortio's bucket edges are its table's steps times the resolution (``fortio_histogram.bucket_edges``);
  edges that sit on that table only when scaled by 1 000 or 1 000 000 are milliseconds or microseconds. The
  resolution, the rate, the connections and the duration the manifest records must be the result's own, and the
  access log (same requests) must lie within the histogram's range.
- **Little's law**: fortio is a closed loop, each connection waits for its answer before it sends again, so the mean
  number in flight, mean latency x achieved rate, cannot exceed the connections.
- **duration**: no recorded request can take longer than the run that recorded it.
"""

from __future__ import annotations

import math

import numpy as np

from meshsim.calibrate.measure.fortio_histogram import bucket_edges
from meshsim.calibrate.measure.fortio_result import FortioResult
from meshsim.errors import ModelError
from meshsim.run_folder import RunManifest

# Little's law: at saturation the shipped runs (measurements/, 222 runs) reach mean latency x rate = 0.997 x the
# connections; the mean used is a lower bound (each bucket at its start), so the only slack needed is for the two
# clocks, the requests' and the run's. 10 % is ten times what any shipped run needs; a unit slip is 1000x.
LITTLE_TOLERANCE = 1.10
# A request ends inside the run that timed it; 1 % for the two clocks (the longest shipped request is 3 % of its run).
DURATION_TOLERANCE = 1.01
# The access log times the same requests as the histogram, at slightly different points: over the 217 shipped runs
# with a log its extremes differ from the histogram's Min/Max by at most 2.5 %. A unit slip is a factor 1000.
LOG_RANGE_FACTOR = 2.0
# What the manifest says and the result records must agree (the lab and the cluster write both from one setting);
# the run's duration may differ from the requested one by its last requests, never by a factor of 10.
SAME = 0.01
DURATION_FACTOR = 10.0
_SCALES = ((1e3, "milliseconds"), (1e6, "microseconds"))


def check_physical_sense(result: FortioResult, manifest: RunManifest, manifest_path: str) -> None:
    """Refuse a run whose numbers cannot all be true (ModelError: one line naming the file)."""
    _check_histogram_units(result, manifest, manifest_path)
    _check_manifest_agrees(result, manifest, manifest_path)
    _check_access_log_range(result)
    _check_littles_law(result)
    _check_duration(result)


def _fail(path: str, problem: str) -> ModelError:
    return ModelError(f"{path}: {problem}")


def _on_fortio_table(edges: np.ndarray, resolution_s: float) -> bool:
    """Whether every edge is one of fortio's bucket edges at this resolution (to float rounding)."""
    table = bucket_edges(resolution_s)
    right = np.clip(np.searchsorted(table, edges), 0, table.size - 1)
    left = np.clip(right - 1, 0, table.size - 1)
    return bool(np.all(np.isclose(edges, table[right], rtol=1e-6, atol=0)
                       | np.isclose(edges, table[left], rtol=1e-6, atol=0)))


def _check_histogram_units(result: FortioResult, manifest: RunManifest, manifest_path: str) -> None:
    """The histogram's unit, inferred from where its bucket edges sit, against the resolution recorded."""
    resolution = result.resolution_s or manifest.load.resolution_s
    filed, said = result.resolution_s, manifest.load.resolution_s
    if filed and said and not math.isclose(filed, said, rel_tol=SAME):
        raise _fail(manifest_path, f"load.resolution_s is {said:g} s but {result.path} records Resolution "
                                   f"{filed:g} s: not the same run, or not the same unit")
    # the first bucket starts at the minimum and the last ends at the maximum (fortio_result.py): only the
    # edges between buckets are fortio's own
    edges = np.array([b.end for b in result.buckets[:-1]] + [b.start for b in result.buckets[1:]], dtype=float)
    edges = edges[edges > 0]
    if not resolution or resolution <= 0 or not edges.size or _on_fortio_table(edges, resolution):
        return
    for scale, unit in _SCALES:
        if _on_fortio_table(edges, resolution * scale):
            raise _fail(result.path, f"DurationHistogram is in {unit}, not seconds: its bucket edges are fortio's "
                                     f"at resolution {resolution * scale:g}, {scale:g} x the {resolution:g} s "
                                     "recorded")


def _check_manifest_agrees(result: FortioResult, manifest: RunManifest, manifest_path: str) -> None:
    """Connections, rate and duration: the manifest's and the result's are those of one run, in one unit."""
    load = manifest.load
    if load.generator == "fortio" and load.connections != result.num_threads:
        raise _fail(manifest_path, f"load.connections is {load.connections} but {result.path} records NumThreads "
                                   f"{result.num_threads}: not the same run")
    if load.rps and result.requested_rps and not math.isclose(load.rps, result.requested_rps, rel_tol=SAME):
        raise _fail(manifest_path, f"load.rps is {load.rps:g} but {result.path} records RequestedQPS "
                                   f"{result.requested_rps:g}: not the same run, or not the same unit")
    lasted = run_seconds(result)
    if load.duration_s and math.isfinite(lasted) and not \
            load.duration_s / DURATION_FACTOR <= lasted <= DURATION_FACTOR * load.duration_s + result.max_s:
        raise _fail(manifest_path, f"load.duration_s is {load.duration_s:g} s but the run in {result.path} lasted "
                                   f"{lasted:.4g} s: not the same run, or not the same unit (seconds)")


def run_seconds(result: FortioResult) -> float:
    """How long the run lasted: fortio's ActualDuration, else its calls over its achieved rate (ActualQPS is
    calls / duration), else NaN."""
    if math.isfinite(result.duration_s) and result.duration_s > 0:
        return result.duration_s
    return result.total_calls / result.actual_rps if result.actual_rps > 0 else math.nan


def _check_access_log_range(result: FortioResult) -> None:
    """The access log's latencies are the histogram's requests: within its range, up to fortio's timing points."""
    samples = result.samples
    if samples is None or not samples.size:
        return
    top, bottom = float(samples.max()), float(samples.min())
    if top > LOG_RANGE_FACTOR * result.max_s or bottom < result.min_s / LOG_RANGE_FACTOR:
        raise _fail(result.access_log or result.path,
                    f"latencies from {bottom:.4g} to {top:.4g} s, but {result.path} (the same requests) recorded "
                    f"{result.min_s:.4g} to {result.max_s:.4g} s: the log is not in seconds, or not of this run")


def _mean_lower_bound_s(result: FortioResult) -> float:
    """fortio's Avg lower-bounded by the buckets: every request at its bucket's start can only understate it."""
    return sum(b.start * b.count for b in result.buckets) / result.count


def _check_littles_law(result: FortioResult) -> None:
    """Mean in flight = mean latency x achieved rate <= connections (a closed loop: one request per connection)."""
    in_flight = _mean_lower_bound_s(result) * result.actual_rps
    if result.num_threads >= 1 and in_flight > LITTLE_TOLERANCE * result.num_threads:
        raise _fail(result.path, f"impossible for a closed loop: mean latency >= {_mean_lower_bound_s(result):.4g} "
                                 f"s at {result.actual_rps:.4g} rps keeps {in_flight:.4g} requests in flight on "
                                 f"{result.num_threads} connection(s) (Little's law; latencies not in seconds?)")


def _check_duration(result: FortioResult) -> None:
    """No request takes longer than the run it was timed in (histogram and access log)."""
    lasted = run_seconds(result)
    longest = max(result.max_s, float(result.samples.max()) if result.samples is not None and result.samples.size
                  else 0.0)
    if math.isfinite(lasted) and longest > DURATION_TOLERANCE * lasted:
        where = result.access_log if result.samples is not None and longest > result.max_s else result.path
        raise _fail(str(where), f"a request took {longest:.4g} s in a run that lasted {lasted:.4g} s")
