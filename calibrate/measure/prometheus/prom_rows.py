"""A Prometheus window as a summary row (``calibrate/measure/summary_rows.py``): the row Istio's benchmark
pipeline would have written for a fortio run of that rate, so ``meshsim fit --prometheus`` fits from windows as
``meshsim fit --rows`` fits from the pipeline's CSV.

What a window cannot say and the row needs is given by the caller: the mode (baseline or which sidecars and
features; the label's suffix), the connections the traffic came on, the payload, and which containers are the
client's and the server's sidecars. Percentiles go in as interpolated from the buckets (microseconds), CPU as the
window's mean (millicores), memory as its mean working set (MiB). The rows are appended to a CSV, so every window
read is kept, and the fit reads them back through ``read_rows`` with its checks.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from meshsim.calibrate.measure.prometheus.prom_histogram import whole_units
from meshsim.calibrate.measure.prometheus.prom_window import WindowMeasure
from meshsim.calibrate.measure.summary_rows import CPU_COLUMNS, MEMORY_COLUMNS, MIB
from meshsim.errors import MeshsimError
from meshsim.outputs import write_file

HEADER = ("StartTime", "ActualDuration", "Labels", "NumThreads", "ActualQPS", "p50", "p90", "p99",
          *CPU_COLUMNS.values(), *MEMORY_COLUMNS.values(), "Source", "Reporter")
# Source: the window, named in the fit's sources; Reporter: the workload whose proxy kept the histogram (its own view)


@dataclass(frozen=True)
class RowMeaning:
    """What the window was, in the row's terms."""

    mode: str  # e.g. none_mtls_both, or none_mtls_baseline for sidecars bypassed
    connections: int
    payload_bytes: int = 1024
    client_container: str = "client/sidecar"
    server_container: str = "server/sidecar"
    build: str = "prometheus"
    reporter: str = ""  # whose proxy kept the histogram, in the row's roles (reporter_of); "": the caller's own

    def __post_init__(self) -> None:
        if self.connections < 1:
            raise MeshsimError(f"--connections: must be >= 1, got {self.connections}")
        if "_" in self.build or not self.build:
            raise MeshsimError(f"row build label {self.build!r}: must be non-empty, without '_'")


def reporter_of(mode: str) -> str:
    """Whose proxy kept a window's histogram, in a row's roles: every shipped metric set is the calling side's
    proxy's (Istio's reporter="source", Linkerd's outbound, the source workload's Envoy), which a row with sidecars
    on the path calls the client's sidecar; a row with the sidecars bypassed has no proxy on its path ("")."""
    return "" if mode.endswith("_baseline") else "client"


def window_row(window: WindowMeasure, meaning: RowMeaning) -> dict[str, str]:
    """The row for one window (every value as the pipeline's CSV holds it)."""
    found = {key: window.quantile(key) for key in ("p50", "p90", "p99")}
    if window.metrics.whole_units:  # Envoy's whole milliseconds: the middle of the interval each is known to
        found = {key: whole_units(q) for key, q in found.items()}
    quantiles = {key: q.value * 1e3 for key, q in found.items()}  # ms -> us
    sides = {"client/sidecar": meaning.client_container, "server/sidecar": meaning.server_container}
    row = {"StartTime": dt.datetime.fromtimestamp(window.end - window.window_s, dt.timezone.utc).isoformat(),
           "ActualDuration": f"{window.window_s:g}",
           "Labels": f"{meaning.build}_qps_{window.rps:.1f}_c_{meaning.connections}_{meaning.payload_bytes}_"
                     f"{meaning.mode}",
           "NumThreads": str(meaning.connections), "ActualQPS": f"{window.rps:.3f}",
           "Source": f"{window.label} at {window.url}", "Reporter": meaning.reporter,
           **{key: f"{value:.1f}" for key, value in quantiles.items()}}
    for side, container in sides.items():
        cpu, memory = window.cpu_cores.get(container), window.memory_mb.get(container)
        row[CPU_COLUMNS[side]] = "" if cpu is None else f"{cpu * 1e3:.3f}"
        row[MEMORY_COLUMNS[side]] = "" if memory is None else f"{memory / MIB:.3f}"
    return row


def append_rows(path: str | Path, rows: Sequence[Mapping[str, str]]) -> Path:
    """Add ``rows`` to the CSV at ``path`` (made with the header when missing; refused when its header differs)."""
    target = Path(path)
    old = target.read_text(encoding="utf-8") if target.is_file() else ""
    if old and tuple(next(csv.reader(io.StringIO(old)), [])) != HEADER:
        raise MeshsimError(f"--rows-out {target}: its header is not the one meshsim writes ({', '.join(HEADER[:3])}"
                           ", ...); give a new file")
    out = io.StringIO()
    writer = csv.DictWriter(out, HEADER, lineterminator="\n")
    if not old:
        writer.writeheader()
    writer.writerows(rows)
    return write_file(target, old + out.getvalue(), "rows_out")
