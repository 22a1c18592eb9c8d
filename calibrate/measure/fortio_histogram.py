"""fortio's histogram, reproduced: bucket edges for a given ``-r`` and a result JSON written from samples.

Used to check the fitting code on data with known truth (parameter recovery) and by anything that needs to hand
fortio-shaped results to the calibration. Edges in units of ``-r``: 0..11 by 1, 12..20 by 2, 25..50 by 5, 60..100
by 10, 120..200 by 20, 250..500 by 50, 600..1000 by 100, then 2000, 3000, 4000, 5000, 7500, 10000, 20000, 30000,
40000, 50000, 75000, 100000; values above the last edge share one overflow bucket. Only non-empty buckets are
listed; the first starts at the minimum and the last ends at the maximum, as fortio writes them.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np

_UNITS = (list(range(0, 12)) + list(range(12, 21, 2)) + list(range(25, 51, 5)) + list(range(60, 101, 10))
          + list(range(120, 201, 20)) + list(range(250, 501, 50)) + list(range(600, 1001, 100))
          + [2000, 3000, 4000, 5000, 7500, 10000, 20000, 30000, 40000, 50000, 75000, 100000])


def bucket_edges(resolution_s: float) -> np.ndarray:
    """fortio's bucket edges in seconds for ``-r resolution_s``."""
    return np.asarray(_UNITS, dtype=float) * resolution_s


def histogram_data(samples_s: np.ndarray, resolution_s: float) -> list[dict[str, float | int]]:
    x = np.sort(np.asarray(samples_s, dtype=float))
    edges = bucket_edges(resolution_s)
    idx = np.searchsorted(edges, x, side="right")  # bucket i holds [edges[i-1], edges[i])
    data = []
    cum = 0
    for i in np.unique(idx):
        count = int(np.sum(idx == i))
        start = edges[i - 1] if i >= 1 else 0.0
        end = edges[i] if i < edges.size else x[-1]
        cum += count
        data.append({"Start": float(start), "End": float(end), "Percent": 100.0 * cum / x.size, "Count": count})
    data[0]["Start"] = float(x[0])
    data[-1]["End"] = float(x[-1])
    return data


def result_json(
    samples_s: np.ndarray,
    resolution_s: float,
    *,
    requested_rps: float,
    actual_rps: float | None = None,
    connections: int = 1,
    labels: str = "synthetic",
    url: str = "http://127.0.0.1:8080/echo?size=1024",
    ret_codes: dict[str, int] | None = None,
    start_time: str | None = None,
) -> dict[str, Any]:
    """A fortio 1.6x-shaped result for the given latencies (seconds)."""
    x = np.asarray(samples_s, dtype=float)
    rps = actual_rps if actual_rps is not None else requested_rps
    return {
        "RunType": "HTTP",
        "Labels": labels,
        "StartTime": start_time or dt.datetime.now(dt.timezone.utc).isoformat(),
        "RequestedQPS": f"{requested_rps:g}",
        "RequestedDuration": f"{x.size / rps:g}s",
        "ActualQPS": rps,
        "ActualDuration": int(x.size / rps * 1e9),
        "NumThreads": connections,
        "Version": "meshsim-synthetic (fortio 1.68 layout)",
        "DurationHistogram": {
            "Count": int(x.size), "Min": float(x.min()), "Max": float(x.max()), "Sum": float(x.sum()),
            "Avg": float(x.mean()), "StdDev": float(x.std()), "Data": histogram_data(x, resolution_s),
        },
        "Jitter": False, "Uniform": False, "NoCatchUp": False,
        "RetCodes": ret_codes or {"200": int(x.size)},
        "URL": url,
        "NumConnections": connections,
        "Resolution": resolution_s,
        "SocketCount": connections,
    }
