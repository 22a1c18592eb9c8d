"""fortio's result JSON (today's 1.6x format and the old 1.3.x one), with its per-request access log when given.

A :class:`FortioResult` keeps the latency histogram exactly as fortio recorded it (bucket edges in seconds; fortio
replaces the first bucket's start by the minimum and the last bucket's end by the maximum) together with everything
fortio says about how the run was made. A result missing that provenance is refused: a number we cannot explain is
not fitted. Raw per-request samples from ``-access-log-file`` are attached when present (raw samples beat buckets;
the log's reader is :mod:`meshsim.calibrate.measure.fortio_access_log`).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from meshsim.calibrate.measure.fortio_access_log import read_access_log
from meshsim.errors import ModelError
from meshsim.yamlio import input_file_problem

# Keys without which a result cannot say how it was made (present in fortio 1.3.1 and 1.6x alike).
PROVENANCE_KEYS = ("Labels", "StartTime", "RequestedQPS", "ActualQPS", "NumThreads", "URL", "Version", "RetCodes")
# A fortio result is a few hundred KB: a bigger file is refused before it is parsed (the access log's caps are in
# fortio_access_log).
MAX_RESULT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Bucket:
    """One histogram bucket: ``count`` requests took between ``start`` and ``end`` seconds."""

    start: float
    end: float
    count: int


@dataclass(frozen=True)
class FortioResult:
    """A fortio run: histogram, optional raw samples and the provenance fortio recorded."""

    path: str
    labels: str
    start_time: str
    version: str
    url: str
    run_type: str
    requested_rps: float | None  # None: fortio ran at max speed (-qps 0 / "max")
    actual_rps: float
    duration_s: float
    num_threads: int
    ret_codes: Mapping[str, int]
    uniform: bool | None  # None: the format (1.3.x) did not record it
    jitter: bool | None
    nocatchup: bool | None
    payload_bytes: int | None
    resolution_s: float | None
    socket_count: int | None
    count: int
    min_s: float
    max_s: float
    mean_s: float
    buckets: tuple[Bucket, ...]
    samples: np.ndarray | None = field(default=None, compare=False)
    access_log: str | None = None
    warmup: str | None = None  # None: the version's default warm-up; "sequential" / "none" (-exactly) as recorded

    @property
    def ok_count(self) -> int:
        return sum(n for code, n in self.ret_codes.items() if code.isdigit() and 200 <= int(code) < 300)

    @property
    def total_calls(self) -> int:
        return sum(self.ret_codes.values())

    def provenance(self) -> dict[str, Any]:
        """What fortio recorded about the run (for manifests, model files and reports)."""
        return {
            "labels": self.labels, "start_time": self.start_time, "fortio_version": self.version, "url": self.url,
            "requested_rps": self.requested_rps, "actual_rps": round(self.actual_rps, 3),
            "num_threads": self.num_threads, "uniform": self.uniform, "jitter": self.jitter,
            "nocatchup": self.nocatchup, "ret_codes": dict(self.ret_codes), "payload_bytes": self.payload_bytes,
            "count": self.count, "raw_samples": self.samples is not None,
        }


def _fail(path: str, problem: str) -> ModelError:
    return ModelError(f"{path}: {problem}")


def _rps(value: Any, path: str) -> float | None:
    """RequestedQPS is a number in some files, a string ("1000", "max") in others."""
    if isinstance(value, bool):
        raise _fail(path, f"RequestedQPS: expected a number, got {value!r}")
    if isinstance(value, str):
        if value.strip().lower() in ("max", "", "-1", "0"):
            return None
        try:
            value = float(value)
        except ValueError:
            raise _fail(path, f"RequestedQPS: not a number: {value!r}") from None
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(path, f"RequestedQPS: expected a number, got {value!r}")
    return float(value) if value > 0 else None


def _finite(value: Any, path: str, key: str, *, integer: bool = False) -> Any:
    """A JSON number (not a string, not a bool) that is finite and >= 0; ``integer``: a whole number."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise _fail(path, f"{key}: expected {kind}, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise _fail(path, f"{key}: expected a finite {kind.split()[-1]} >= 0, got {value!r}")
    return value


def _duration_s(data: Mapping[str, Any]) -> float:
    actual = data.get("ActualDuration")
    return float(actual) / 1e9 if isinstance(actual, (int, float)) else float("nan")


def _payload_bytes(data: Mapping[str, Any], url: str) -> int | None:
    """Request payload (-payload-size / -payload) if recorded; response size asked with ?size= otherwise."""
    payload = data.get("Payload")
    if isinstance(payload, str) and payload:
        try:
            return len(base64.b64decode(payload, validate=True))
        except (binascii.Error, ValueError):
            return len(payload.encode())
    if "size=" in url:
        try:
            return int(url.split("size=", 1)[1].split("&", 1)[0])
        except ValueError:
            return None
    return None


def _buckets(hist: Any, path: str) -> tuple[tuple[Bucket, ...], int, float, float, float]:
    if not isinstance(hist, Mapping):
        raise _fail(path, "DurationHistogram: missing (no latency histogram in this result)")
    data = hist.get("Data")
    count = hist.get("Count")
    if not isinstance(count, int) or count <= 0:
        raise _fail(path, f"DurationHistogram.Count: zero or missing ({count!r}): the run recorded no requests")
    if not isinstance(data, list) or not data:
        raise _fail(path, "DurationHistogram.Data: missing or empty")
    buckets = []
    for i, b in enumerate(data):
        try:
            start, end, n = float(b["Start"]), float(b["End"]), int(b["Count"])
        except (KeyError, TypeError, ValueError, OverflowError):
            raise _fail(path, f"DurationHistogram.Data[{i}]: needs numeric Start, End and Count") from None
        if not (0 <= start <= end < math.inf) or n < 0:
            raise _fail(path, f"DurationHistogram.Data[{i}]: bad bucket [{start}, {end}] count {n}")
        if buckets and start < buckets[-1].end - 1e-12:
            raise _fail(path, f"DurationHistogram.Data[{i}]: buckets overlap or are out of order")
        buckets.append(Bucket(start, end, n))
    total = sum(b.count for b in buckets)
    if total != count:
        raise _fail(path, f"DurationHistogram: bucket counts sum to {total}, Count says {count}")
    stats = {key: float(_finite(hist[key], path, f"DurationHistogram.{key}")) if key in hist else None
             for key in ("Avg", "Min", "Max")}
    mean = stats["Avg"] if stats["Avg"] is not None else sum(0.5 * (b.start + b.end) * b.count for b in buckets) / count
    lo = stats["Min"] if stats["Min"] is not None else buckets[0].start
    hi = stats["Max"] if stats["Max"] is not None else buckets[-1].end
    return tuple(buckets), count, lo, hi, mean


def parse_result(data: Any, path: str) -> FortioResult:
    """Validate a parsed fortio result; every error names ``path`` and the key."""
    if not isinstance(data, Mapping):
        raise _fail(path, "not a fortio result (top level is not a JSON object)")
    missing = [k for k in PROVENANCE_KEYS if k not in data]
    if missing:
        raise _fail(path, f"{missing[0]}: missing; a result without its provenance is not used")
    buckets, count, lo, hi, mean = _buckets(data.get("DurationHistogram"), path)
    ret_codes = data["RetCodes"]
    if not isinstance(ret_codes, Mapping):
        raise _fail(path, "RetCodes: expected a mapping of status code to count")
    codes = {str(k): int(_finite(v, path, f"RetCodes.{k}", integer=True)) for k, v in ret_codes.items()}
    url = str(data["URL"])
    return FortioResult(
        path=path,
        labels=str(data["Labels"]),
        start_time=str(data["StartTime"]),
        version=str(data["Version"]),
        url=url,
        run_type=str(data.get("RunType", "HTTP")),
        requested_rps=_rps(data["RequestedQPS"], path),
        actual_rps=float(_finite(data["ActualQPS"], path, "ActualQPS")),
        duration_s=_duration_s(data),
        num_threads=int(_finite(data["NumThreads"], path, "NumThreads", integer=True)),
        ret_codes=codes,
        uniform=data.get("Uniform"),
        jitter=data.get("Jitter"),
        nocatchup=data.get("NoCatchUp"),
        payload_bytes=_payload_bytes(data, url),
        resolution_s=float(data["Resolution"]) if isinstance(data.get("Resolution"), (int, float)) else None,
        socket_count=int(data["SocketCount"]) if isinstance(data.get("SocketCount"), int) else None,
        count=count,
        min_s=lo,
        max_s=hi,
        mean_s=mean,
        buckets=buckets,
        warmup=_warmup(data),
    )


def _warmup(data: Mapping[str, Any]) -> str | None:
    """The warm-up fortio did, where its JSON says (meshsim/fortio_warmup.py): -exactly skips it."""
    exactly = data.get("Exactly")
    if isinstance(exactly, int) and not isinstance(exactly, bool) and exactly > 0:
        return "none"
    return "sequential" if data.get("SequentialWarmup") is True else None


def read_result(path: str | Path, access_log: str | Path | None = None) -> FortioResult:
    """Read a fortio result JSON file (and its access log when given)."""
    where = str(path)
    problem = input_file_problem(Path(path))
    if problem:
        raise _fail(where, problem)
    try:
        if Path(path).stat().st_size > MAX_RESULT_BYTES:
            raise _fail(where, f"larger than {MAX_RESULT_BYTES} bytes: not a fortio result")
        raw = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(where, f"cannot read fortio result ({exc})") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _fail(where, f"not valid JSON (truncated?): {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise _fail(where, "not a fortio result (JSON nested too deeply)") from None
    result = parse_result(data, where)
    if access_log is not None:
        samples = read_access_log(access_log)
        result = _with_samples(result, samples, str(access_log))
    return result


def _with_samples(result: FortioResult, samples: np.ndarray, log_path: str) -> FortioResult:
    from dataclasses import replace

    return replace(result, samples=samples, access_log=log_path)
