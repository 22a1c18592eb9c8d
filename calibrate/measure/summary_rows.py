"""Summary rows: what a cluster's performance pipeline publishes when it keeps no histograms.

Istio's pipeline (istio/tools perf/benchmark) writes one row per fortio run to ``benchmark.csv``: the run's label
(``<build>_qps_<rate>_c_<connections>_<payload>_<mode>``), its duration, connections and rate, p50/p90/p99 in
microseconds, and each istio-proxy's average CPU (millicores) and memory (MiB) over the run. A row says less than a
run folder: three percentiles instead of a histogram, no access log, CPU averaged over minutes. What it cannot
identify is said by the fit that reads it (``calibrate/summary_fit.py``); what the row does not say about how it
was made (fortio's pacing flags and version) is given by the reader's caller, with its source.

``read_rows`` reads such a CSV into :class:`SummaryRow` values, one line naming the file, the row and the column
for anything it cannot read or that is not physically possible (a rate or a latency that is not finite and > 0,
percentiles out of order, a mean latency above what the connections allow).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from meshsim.errors import ModelError

# The label's mode suffix -> (path, features). The pipeline's modes of Istio 1.7 (../shared/data/README.md):
# *_baseline bypasses the sidecars; none_mtls_both: both sidecars with mTLS and no telemetry filters;
# v2-stats-nullvm_both: both sidecars with mTLS and the default telemetry (stats filter, null VM).
# Any *_baseline mode (the sidecars are installed with that mode's configuration, and bypassed) is a baseline run.
MODES: dict[str, tuple[str, tuple[str, ...]]] = {
    "none_mtls_both": ("both-sidecars", ("mtls",)),
    "v2-stats-nullvm_both": ("both-sidecars", ("mtls", "telemetry")),
}
LABEL = re.compile(r"^(?P<build>[^_]+)_qps_(?P<rps>[0-9.]+)_c_(?P<c>[0-9]+)_(?P<payload>[0-9]+)_(?P<mode>.+)$")
PERCENTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
CPU_COLUMNS = {"client/sidecar": "cpu_mili_avg_istio_proxy_fortioclient",
               "server/sidecar": "cpu_mili_avg_istio_proxy_fortioserver"}
MEMORY_COLUMNS = {"client/sidecar": "mem_Mi_avg_istio_proxy_fortioclient",
                  "server/sidecar": "mem_Mi_avg_istio_proxy_fortioserver"}
MIB = 1.048576  # MB per MiB
LITTLE_TOLERANCE = 1.5  # the p50 stands in for the mean here: a closed loop holds at most its connections


@dataclass(frozen=True)
class SummaryRow:
    """One run as a summary row: its setup, rate, percentiles (seconds), CPU (cores) and memory (MB) per proxy."""

    id: str
    source: str  # file and row
    mode: str
    path: str  # baseline | both-sidecars
    features: tuple[str, ...]
    rps: float
    connections: int
    payload_bytes: int
    duration_s: float
    quantiles_s: Mapping[float, float]
    cpu_cores: Mapping[str, float] = field(default_factory=dict)
    memory_mb: Mapping[str, float] = field(default_factory=dict)
    measured: str = ""  # what measured the row, when it says (column Source: a Prometheus window and its server)
    # whose proxy timed the percentiles, in the row's roles ("client": the caller's sidecar), when a proxy did
    # (column Reporter: a Prometheus window of a sidecar's histogram); "" when the caller did (fortio, the pipeline)
    reporter: str = ""

    @property
    def origin(self) -> str:
        """The row's file, and what measured it when the row says: what a fitted number's source names."""
        file = self.source.rsplit(":", 1)[0]
        return f"{file} ({self.measured})" if self.measured else file

    @property
    def bypassed(self) -> bool:
        """Sidecars present but not on the path: their CPU is what an idle proxy spends."""
        return self.path == "baseline"


def _number(row: Mapping[str, str], column: str, where: str) -> float:
    raw = row.get(column)
    try:
        value = float(raw) if raw is not None else math.nan
    except ValueError:
        raise ModelError(f"{where}: column {column}: not a number: {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ModelError(f"{where}: column {column}: must be a finite number >= 0, got {raw!r}")
    return value


def _row(row: Mapping[str, str], where: str, modes: Mapping[str, tuple[str, tuple[str, ...]]]) -> SummaryRow | None:
    label = (row.get("Labels") or "").strip()
    match = LABEL.match(label)
    if match is None:
        raise ModelError(f"{where}: column Labels: {label!r} is not <build>_qps_<rate>_c_<connections>_<bytes>_<mode>")
    if match["mode"].endswith("_baseline"):
        path, features = "baseline", ()
    elif match["mode"] in modes:
        path, features = modes[match["mode"]]
    else:
        return None  # a mode this fit does not model (another telemetry flavour): left out, counted by the caller
    rps, connections = float(match["rps"]), int(match["c"])
    if not rps > 0 or connections < 1:
        raise ModelError(f"{where}: column Labels: rate and connections must be > 0 in {label!r}")
    quantiles = {p: _number(row, col, where) * 1e-6 for col, p in PERCENTILES.items()}
    values = [quantiles[p] for p in sorted(quantiles)]
    if not values[0] > 0 or any(b < a for a, b in zip(values, values[1:])):
        raise ModelError(f"{where}: p50/p90/p99 must be > 0 and in order, got "
                         f"{'/'.join(f'{v * 1e6:g}' for v in values)} us")
    if quantiles[0.5] * rps > LITTLE_TOLERANCE * connections:
        raise ModelError(f"{where}: p50 {quantiles[0.5] * 1e3:g} ms at {rps:g} rps needs {quantiles[0.5] * rps:.1f} "
                         f"requests in flight, more than the {connections} connections hold (Little's law): the "
                         "latency unit is not microseconds, or the rate is wrong")
    duration = _number(row, "ActualDuration", where)
    if not duration > 0 or values[-1] > duration:
        raise ModelError(f"{where}: column ActualDuration: {duration:g} s is not > 0 or shorter than p99")
    cpu = {k: _number(row, c, where) * 1e-3 for k, c in CPU_COLUMNS.items() if row.get(c) not in (None, "")}
    memory = {k: _number(row, c, where) * MIB for k, c in MEMORY_COLUMNS.items() if row.get(c) not in (None, "")}
    return SummaryRow(label, where, match["mode"], path, features, rps, connections, int(match["payload"]), duration,
                      quantiles, cpu, memory, (row.get("Source") or "").strip(), (row.get("Reporter") or "").strip())


def read_rows(paths: Sequence[str | Path], modes: Mapping[str, tuple[str, tuple[str, ...]]] = MODES
              ) -> tuple[list[SummaryRow], list[str]]:
    """Every row of the files whose mode is in ``modes``, and one note per row left out (another mode)."""
    rows: list[SummaryRow] = []
    skipped: list[str] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if not path.is_file():
            raise ModelError(f"{path}: not a file (expected a CSV of summary rows)")
        if path.resolve() in seen:
            raise ModelError(f"{path}: given twice")
        seen.add(path.resolve())
        with path.open(encoding="utf-8", newline="") as handle:
            for number, row in enumerate(csv.DictReader(handle), start=2):
                where = f"{path}:{number}"
                parsed = _row(row, where, modes)
                if parsed is None:
                    skipped.append(f"{where}: mode of {row.get('Labels')!r} not modelled")
                else:
                    rows.append(parsed)
    ids = [r.id for r in rows]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ModelError(f"{dup}: the same run (label) appears twice in the rows")
    if not rows:
        raise ModelError(f"{', '.join(str(p) for p in paths)}: no row of a modelled mode ({', '.join(modes)})")
    return rows, skipped
