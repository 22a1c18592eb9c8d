"""``sweep``: the library function behind ``meshsim sweep``: every point of a grid as an independent task.

Points run locally in forked processes (default) or on a Dask cluster (``scheduler="tcp://HOST:PORT"``; dask is
imported only then). Each point is :func:`point_row`: a plain function of its options, seeded by them, so it gives the
same numbers wherever it runs. A finished point goes to the on-disk cache at once (``sim/experiments/sweep_cache.py``); points
already there are not run again, so an interrupted sweep resumes where it stopped. On an interrupt (Ctrl-C, SIGTERM,
SIGHUP: the CLI turns them into KeyboardInterrupt) the local workers are terminated (Dask tasks are cancelled), the
finished points are written to the output, and the result says ``interrupted after N of M points``. A SIGKILL
cannot be caught: the local workers end with the sweep then (meshsim.parent_death); the Dask path starts no local
workers.

An existing cluster (e.g. the Dask Helm chart or dask-kubernetes on Kubernetes): its worker image needs the same
meshsim version (``pip install 'meshsim[dask]'``); model files are not needed there, since each task carries its
loaded topology and mesh model. Reach the scheduler's port 8786 from the machine that runs ``meshsim sweep`` (e.g.
``kubectl port-forward svc/dask-scheduler 8786:8786``, then ``--scheduler tcp://127.0.0.1:8786``). The cache and the
output stay on that machine; workers only compute.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import uuid
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generator

import pandas as pd

from meshsim.distributions import MS
from meshsim.errors import FieldError, MeshsimError
from meshsim.interrupts import interrupts_deferred
from meshsim.outputs import OutputError, check_file, check_folder, write_file_with
from meshsim.parent_death import Parent, start_worker
from meshsim.progress import Progress
from meshsim.request import PredictOptions, build_request
from meshsim.sim.engine_choice import load_compiled_engine
from meshsim.sim.experiments.predict import check_request, predict_options, uses_compiled_engine
from meshsim.sim.experiments.replication_workers import stop_workers
from meshsim.sim.experiments.sweep_cache import PointCache, default_cache_dir, point_key
from meshsim.sweep_grid import NO_FEATURES, SweepGrid, SweepPoint

PERCENTILE_COLUMNS = ("p50", "p90", "p99", "p999", "max")
OnPoint = Callable[[int, int], None]  # (finished points, all points), after each point
TableReport = Callable[[pd.DataFrame], None]  # a finished table handed to a writer or a front end's page
Rows = Generator[tuple[int, dict[str, Any]], None, None]  # (point index, row) as points finish
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class SweepResult:
    table: pd.DataFrame  # one row per finished point, in grid order
    total: int
    computed: int  # points run by this call (the rest came from the cache)
    interrupted: str = ""  # "interrupted after N of M points" when stopped early

    @property
    def finished(self) -> int:
        return len(self.table)


def point_row(options: PredictOptions) -> dict[str, Any]:
    """Run one point and flatten its prediction into a row (latency in ms with 95 % CI bounds, CPU per component)."""
    prediction = predict_options(options)
    row: dict[str, Any] = {}
    for key in PERCENTILE_COLUMNS:
        estimate = prediction.latency[key]
        row[f"{key}_ms"] = estimate.value / MS
        row[f"{key}_ms_lo"] = estimate.lo / MS
        row[f"{key}_ms_hi"] = estimate.hi / MS
    # the grid's features column is the --vary item added to the mesh's defaults ("none": the defaults alone); this
    # one says what was on at the point (istio's telemetry, linkerd's mTLS)
    row["active_features"] = "+".join(prediction.inputs["features"]) or NO_FEATURES
    row["achieved_rps"] = prediction.achieved_rps.value
    row["bottleneck"] = prediction.bottleneck
    row["bottleneck_utilization"] = prediction.utilization.get(prediction.bottleneck, math.nan)
    row["saturated"] = bool(prediction.saturated)
    row["replications"] = prediction.replications
    row["seed"] = options.seed
    for component, cores in sorted(prediction.cpu_cores.items()):
        row[f"cpu_{component}"] = cores
    return row


def sweep(grid: SweepGrid, out: str | Path | None = None, report: TableReport | None = None,
          cache_dir: str | Path | None = None, scheduler: str | None = None, processes: int | None = None,
          on_point: OnPoint | None = None, progress: Progress | None = None) -> SweepResult:
    """Validate the grid, run every point not in the cache, write ``out`` (.csv or .parquet) and hand the finished
    table to ``report`` (a front end's page, e.g. meshsim/cli/sweep_page.py, which checks its own file first).

    The output holds the finished points even when interrupted. ``progress`` gets the lines that are not a point's
    (the compiled engine's one-off compile, before the first point)."""
    writer = table_writer(out) if out is not None else None
    check_folder(cache_dir if cache_dir is not None else default_cache_dir(), "cache")
    grid.validate()
    if processes is not None and (isinstance(processes, bool) or not isinstance(processes, int) or processes < 1):
        raise FieldError("processes", f"must be a whole number >= 1, got {processes!r}")
    points = grid.points()
    check_points(points)
    client = connect_scheduler(scheduler) if scheduler else None  # an unreachable one is refused before any work
    try:
        return _sweep_points(points, writer, report, cache_dir, client, processes, on_point, progress)
    finally:
        if client is not None:
            client.close()


def check_points(points: list[SweepPoint]) -> None:
    """Refuse, before any worker starts, every point that predict would refuse (its request, its cost, a run that
    measures nothing): the FieldError names the option and the point."""
    for point in points:
        try:
            check_request(build_request(point.options))
        except FieldError as exc:
            where = " ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in point.key_columns().values())
            raise FieldError(exc.field, f"at point {where} rps: {exc.problem}") from None


def _sweep_points(points: list[SweepPoint], writer: Callable[[pd.DataFrame], None] | None,
                  report: TableReport | None, cache_dir: str | Path | None, client: Any, processes: int | None,
                  on_point: OnPoint | None, progress: Progress | None = None) -> SweepResult:
    keys = [point_key(p.options) for p in points]
    cache = PointCache(cache_dir if cache_dir is not None else default_cache_dir())
    rows: dict[int, dict[str, Any]] = {}
    for index, key in enumerate(keys):
        cached = cache.get(key)
        if cached is not None:
            rows[index] = cached
    todo = [i for i in range(len(points)) if i not in rows]
    cached = len(rows)
    report_progress = on_point or (lambda _done, _total: None)
    interrupted = ""
    failed: OutputError | None = None
    runner = _dask_rows if client is not None else rows_in_local_processes
    finished: Rows | None = None
    try:
        if todo and uses_compiled_engine(build_request(points[i].options) for i in todo):
            if client is None:
                load_compiled_engine(progress)  # once, here: the local workers fork with it loaded
            else:
                _load_compiled_on_workers(client, progress)
        report_progress(len(rows), len(points))
        finished = runner([points[i].options for i in todo], todo, client if client is not None else processes)
        for index, row in finished:
            with interrupts_deferred():  # a point reaches the output only with its cache entry (the resume needs it)
                cache.put(keys[index], row)
                rows[index] = row
            report_progress(len(rows), len(points))
    except KeyboardInterrupt:
        interrupted = f"interrupted after {len(rows)} of {len(points)} points"
    except OutputError as exc:  # the cache cannot take a point (a full disk): the finished ones still go to out
        failed = exc
    finally:
        if finished is not None:
            finished.close()  # an interrupt outside the runner's wait still stops its workers now
    table = _table(points, rows)
    try:
        _write_table(table, writer, report)
    except OutputError:
        if failed is None:
            raise
    if failed is not None:  # the first failure (the cache's) is the one to name; its finished points are on disk
        raise failed
    return SweepResult(table, len(points), len(rows) - cached, interrupted)


def _write_table(table: pd.DataFrame, writer: TableReport | None, report: TableReport | None) -> None:
    if writer is not None:
        writer(table)
    if report is not None and len(table):
        report(table)


def _table(points: list[SweepPoint], rows: dict[int, dict[str, Any]]) -> pd.DataFrame:
    records = [{**points[i].key_columns(), **rows[i]} for i in sorted(rows)]
    return pd.DataFrame.from_records(records)


def rows_in_local_processes(options: list[PredictOptions], indices: list[int], processes: Any,
                ) -> Rows:
    """Points in forked processes; an interrupt terminates them before it propagates."""
    if not options:
        return
    workers = min(processes or os.cpu_count() or 1, len(options))
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                               initializer=start_worker, initargs=(Parent.here(),))
    try:
        with interrupts_deferred():  # submitting forks the workers: an interrupt inside a fork would be lost
            futures = {pool.submit(point_row, o): i for o, i in zip(options, indices)}
        for future in as_completed(futures):
            yield futures[future], future.result()
    except BaseException:
        stop_workers(pool)
        raise
    pool.shutdown()


def _dask_rows(options: list[PredictOptions], indices: list[int], client: Any,
               ) -> Rows:
    """Points as tasks of an existing Dask cluster; an interrupt cancels the tasks not finished."""
    if not options:
        return
    futures: dict[Any, int] = {}
    try:
        futures = {client.submit(point_row, o, key=f"meshsim-point-{point_key(o)}", pure=False): i
                   for o, i in zip(options, indices)}
        from distributed import as_completed as dask_completed

        for future in dask_completed(list(futures), loop=client.loop):
            yield futures[future], future.result()
    except BaseException:
        client.cancel(list(futures))
        raise


def _load_compiled_on_workers(client: Any, progress: Progress | None) -> None:
    """One task per Dask worker loads the compiled engine before the first point: a worker without it in its cache
    builds it then, said here, instead of during its first point (a task, not ``client.run``: a compile in
    the worker's event loop would stall its heartbeats)."""
    workers = list(client.scheduler_info()["workers"])
    if progress:
        progress(f"loading the compiled engine on {len(workers)} Dask worker(s) (a worker without it in its cache "
                 "builds it first: up to four minutes)")
    futures = [client.submit(load_compiled_engine, key=f"meshsim-load-compiled-{uuid.uuid4().hex}", workers=[address],
                             allow_other_workers=False, pure=False) for address in workers]
    try:
        client.gather(futures)
    except BaseException:
        client.cancel(futures)
        raise


def connect_scheduler(address: str) -> Any:
    """A ``distributed.Client`` on ``address``; an unreachable scheduler is a user error naming ``scheduler``."""
    try:
        from distributed import Client
    except ModuleNotFoundError:
        raise MeshsimError("--scheduler needs the Python package 'distributed': pip install 'meshsim[dask]'") from None
    if not isinstance(address, str) or "://" not in address:
        raise FieldError("scheduler", f"expected an address like tcp://HOST:PORT, got {address!r}")
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as exc:
        raise FieldError("scheduler", f"cannot reach the Dask scheduler at {address}: {exc}") from None


def table_writer(out: str | Path) -> Callable[[pd.DataFrame], None]:
    """The writer for ``out`` by its suffix, checked before anything runs (parquet needs pyarrow)."""
    path = Path(out)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        check_file(path, "out")
        return lambda table: write_file_with(path, "out", lambda tmp: table.to_csv(tmp, index=False))
    if suffix == ".parquet":
        try:
            import pyarrow  # noqa: F401  (pandas writes parquet through it)
        except ModuleNotFoundError:
            raise FieldError("out", "writing parquet needs the Python package 'pyarrow': "
                                    "pip install 'meshsim[parquet]' (or write FILE.csv)") from None
        check_file(path, "out")
        return lambda table: write_file_with(path, "out", lambda tmp: table.to_parquet(tmp, index=False))
    raise FieldError("out", f"expected FILE.csv or FILE.parquet, got {str(out)!r}")
