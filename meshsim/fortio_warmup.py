"""fortio's warm-up calls, per fortio version, read from fortio's source (fhttp/httprunner.go ``RunHTTPTest``).

Before its timed run, fortio's HTTP runner makes one untimed call per thread (= per connection): the
``All done N calls (plus c warmup)`` line. Connections and TLS sessions are set up by these calls. What every
checked version shares:

- the warm-up calls are neither timed nor counted: they run before ``periodicRunner.Run()``
  (periodic/periodic.go), which creates the histograms and takes ``start := time.Now()``;
- that one ``start`` is shared by all threads (``runOne(..., start, r)``): every thread's pacing and its
  ``-t`` deadline count from the end of the *last* warm-up call, and ``ActualDuration`` / ``ActualQPS`` are
  ``time.Since(start)`` and ``count / elapsed``;
- ``-exactly N`` skips the warm-up (``if o.Exactly <= 0``) and the summary prints ``plus 0 warmup``;
- the summary prints the requested ``-c`` as the warm-up count (cli/fortio_main.go), although the calls are
  made per actual thread (fewer when ``2 * c`` exceeds the call budget);
- the gRPC runner (fgrpc/grpcrunner.go) always warms up sequentially ("TODO: support parallel warmup").

What changed: up to 1.20 the warm-up fetch sits in the loop that builds each thread's client, so the calls go one
after another; 1.21.0 starts one goroutine per thread (errgroup) and waits for all of them; a later version adds
``-sequential-warmup`` ("restores pre 1.21 behavior", default off). The table below is that history as data, one
row per behaviour, each with the versions whose source was read. Tags the Go module proxy refused (so unread):
1.19.0, 1.19.1, 1.20.0, 1.20.1, 1.21.1, 1.22.0, 1.24.0-1.26.0, 1.30.0, 1.32.0, 1.33.0, 1.35.0, 1.40.0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from meshsim.errors import FieldError

WARMUP_MODES = ("parallel", "sequential", "none")
DEFAULT_VERSION = "1.68.2"  # the fortio the lab pins (tools/install/fortio.sh)
# the option fields these errors name (FieldError: the CLI says them as --fortio-version / --fortio-warmup)
VERSION_FIELD = "fortio_version"
WARMUP_FIELD = "fortio_warmup"


@dataclass(frozen=True)
class WarmupBehaviour:
    """fortio from ``since`` on (until the next row): its default warm-up and whether -sequential-warmup exists."""

    since: tuple[int, int, int]
    default: str
    sequential_flag: bool
    source: str


FORTIO_WARMUP: tuple[WarmupBehaviour, ...] = (
    WarmupBehaviour((1, 3, 1), "sequential", False,
                    "v1.3.1 and v1.11.0 fhttp/httprunner.go RunHTTPTest: client.Fetch() inside the per-thread "
                    "NewClient loop, before r.Run(); v1.68.2 bincommon/commonflags.go: -sequential-warmup "
                    "'restores pre 1.21 behavior'"),
    WarmupBehaviour((1, 21, 0), "parallel", False,
                    "v1.21.0 fhttp/httprunner.go RunHTTPTest: warmup.Go(client.Fetch) per thread, warmup.Wait() "
                    "before r.Run(); no sequential-warmup flag in bincommon (1.22.x not served by the proxy)"),
    WarmupBehaviour((1, 23, 0), "parallel", True,
                    "v1.23.0, v1.27.0, v1.38.0, v1.50.0, v1.60.3, v1.68.2 fhttp/httprunner.go RunHTTPTest: parallel "
                    "errgroup unless o.SequentialWarmup (fetch in the client loop); bincommon/commonflags.go "
                    "-sequential-warmup default false"),
)


def parse_version(version: str) -> tuple[int, int, int]:
    """``1.68.2`` or ``v1.68.2`` (fortio's JSON ``Version``); a pre-release suffix is ignored."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:[-+].*)?", version.strip())
    if m is None:
        raise FieldError(VERSION_FIELD, f"{version!r} is not a fortio version (want X.Y.Z, e.g. 1.68.2)")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def behaviour_of(version: str) -> WarmupBehaviour:
    v = parse_version(version)
    rows = [row for row in FORTIO_WARMUP if row.since <= v]
    if not rows:
        oldest = ".".join(map(str, FORTIO_WARMUP[0].since))
        raise FieldError(VERSION_FIELD, f"fortio {version} is older than the oldest version whose warm-up was "
                                        f"checked ({oldest})")
    return rows[-1]


def warmup_mode(version: str, requested: str | None = None) -> str:
    """The warm-up fortio ``version`` does: its default, or ``requested`` if that version can do it.

    ``none`` is fortio's ``-exactly N`` run (no warm-up); ``sequential`` needs -sequential-warmup where the
    default is parallel.
    """
    row = behaviour_of(version)
    if requested is None:
        return row.default
    if requested not in WARMUP_MODES:
        raise FieldError(WARMUP_FIELD, f"{requested!r} is not a warm-up (known: {', '.join(WARMUP_MODES)})")
    if requested in ("none", row.default) or (requested == "sequential" and row.sequential_flag):
        return requested
    why = ("parallel warm-up came in 1.21.0" if requested == "parallel"
           else "-sequential-warmup came after 1.21.0, by 1.23.0")
    raise FieldError(WARMUP_FIELD, f"fortio {version} has no {requested} warm-up (it warms up {row.default}; {why})")


def checked_version(version: str | None) -> str | None:
    """``version`` when its warm-up is known (a run's recorded fortio version), else None: the default applies."""
    try:
        behaviour_of(version or "")
    except FieldError:
        return None
    return version
