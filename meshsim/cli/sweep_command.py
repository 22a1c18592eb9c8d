"""``meshsim sweep``: parse the grid, call :func:`meshsim.sim.experiments.sweep_points.sweep`, show a progress bar,
exit code."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from meshsim.cli.flags import comma_list
from meshsim.cli.predict_command import MESHES_HELP, TOPOLOGIES_HELP
from meshsim.errors import FieldError
from meshsim.outputs import print_result
from meshsim.request import PredictOptions
from meshsim.sweep_grid import SweepGrid, parse_feature_sets, parse_rps_range


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("sweep", help="latency, CPU and bottleneck over a grid of topologies, meshes, features and "
                       "rates; locally in processes or on a Dask cluster; cached and resumable",
                       description="Every point of the grid is an independent simulation (the same seed at every "
                                   "point: common random numbers along a curve). Finished points are cached on disk "
                                   "under the content hash of their inputs, so an interrupted sweep resumes.")
    p.add_argument("--topology", type=comma_list, default=("chain3",),
                   help=f"comma list of topologies: {TOPOLOGIES_HELP} or FILE.yaml (default chain3)")
    p.add_argument("--mesh", type=comma_list, default=("istio",), help=f"comma list of meshes: {MESHES_HELP}")
    p.add_argument("--vary", action="append", default=[], metavar="features=SET,SET",
                   help="feature sets to compare, e.g. features=none,mtls,mtls+tracing (none: the mesh's defaults)")
    p.add_argument("--features", type=comma_list, default=(), help="features every point has (comma list)")
    p.add_argument("--lb", type=comma_list, default=("client",), help="comma list of client, proxy (default client)")
    p.add_argument("--load", type=comma_list, default=("open",), help="comma list of open, fortio, wrk2 (default open)")
    p.add_argument("--rps", required=True, metavar="FROM:TO:N", help="N offered rates from FROM to TO")
    p.add_argument("--connections", type=int, help="connections of the load (see meshsim predict)")
    p.add_argument("--duration", type=float, help="simulated seconds per replication (default: ~5000 requests)")
    p.add_argument("--warmup", type=float, help="seconds cut at the start of each replication")
    p.add_argument("--replications", type=int, default=2, help="replications per point (default 2)")
    p.add_argument("--seed", type=int, default=1, help="seed of every point (default 1)")
    p.add_argument("--out", required=True, metavar="FILE.csv|FILE.parquet", help="the table, one row per point")
    p.add_argument("--html", metavar="FILE", help="also write an HTML report with the curves")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="run the points on this Dask scheduler's cluster "
                   "(pip install 'meshsim[dask]'); default: local processes")
    p.add_argument("--processes", type=int, help="local processes (default: all cores)")
    p.add_argument("--cache", metavar="DIR", help="cache folder (default $MESHSIM_CACHE or ~/.cache/meshsim/points)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=run)


def grid_of(args: argparse.Namespace) -> SweepGrid:
    feature_sets: tuple[tuple[str, ...], ...] = ((),)
    for item in args.vary:
        key, _, values = item.partition("=")
        if key.strip() != "features" or not values:
            raise FieldError("vary", f"expected features=SET,SET,... (the axis sweep varies), got {item!r}")
        feature_sets = parse_feature_sets(values)
    base = PredictOptions(features=args.features, connections=args.connections, duration_s=args.duration,
                          warmup_s=args.warmup, replications=args.replications, seed=args.seed)
    return SweepGrid(args.topology, args.mesh, parse_rps_range(args.rps), feature_sets, args.lb, args.load, base)


def run(args: argparse.Namespace) -> int:
    from meshsim.cli.sweep_page import check_sweep_page, write_sweep_page
    from meshsim.sim.experiments.sweep_points import sweep

    args.flag_overrides = {"features": "--vary" if args.vary else "--features"}
    page = None
    if args.html:
        check_sweep_page(args.html)
        page = lambda table: write_sweep_page(table, args.html)  # noqa: E731
    bar = _ProgressBar(enabled=not args.no_progress)
    try:
        result = sweep(grid_of(args), args.out, page, args.cache, args.scheduler, args.processes, bar,
                       progress=lambda msg: print(f"meshsim sweep: {msg}", file=sys.stderr, flush=True))
    finally:
        bar.close()
    print_result(f"meshsim sweep: {result.finished} of {result.total} points in {args.out} ({result.computed} "
                 f"computed, {result.finished - result.computed} from the cache)"
                 + (f"; report {args.html}" if args.html else ""))
    if result.interrupted:
        print(f"meshsim sweep: {result.interrupted}; the cache and {args.out} keep them: run the same command "
              "again to resume", file=sys.stderr)
        return 130
    return 0


class _ProgressBar:
    """tqdm on stderr, made on the first report (the total is known then)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=done, unit="point", file=sys.stderr, desc="meshsim sweep")
        else:
            self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
