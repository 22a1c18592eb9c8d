"""fortio's per-request access log (``-access-log-file``): JSON lines, one per request, plain or gzipped.

Read in blocks of whole lines. A block whose every line is one fortio writes (Go's encoder: one key order, ASCII) is
parsed by one regular expression; a block with any other line is read line by line with the JSON parser, which also
names the line that is wrong. The shipped measurements hold 2.6 million lines: parsed one by one, they were 18 s of
the Dash app's start-up; by blocks, 4.5 s (17.8 s line by line, measured side by side on one VM).
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from meshsim.errors import ModelError

# Size caps, checked while reading (streaming), so that a hostile file cannot exhaust memory: an access log holds
# ~130 bytes per request, so 256 MiB is two million requests, far beyond any probe we run (the shipped logs are
# under 1 MB). A 400 KB gzip bomb that expands to 400 MB stops at the cap.
MAX_ACCESS_LOG_BYTES = 256 * 1024 * 1024
MAX_LOG_LINE = 64 * 1024  # one access-log entry is ~130 characters
BLOCK_BYTES = 4 * 1024 * 1024  # decompressed bytes read at a time
# A line exactly as fortio writes it: latency in seconds, non-negative; details printable ASCII without quote or
# backslash (an HTTP status or an error text), bounded so that a matched line is never over MAX_LOG_LINE.
FORTIO_LINE = re.compile(
    rb'^\{"latency":(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?),"timestamp":-?\d+,"thread":\d+,"iter":\d+,'
    rb'"ok":(true|false),"details":"[ !#-\[\]-~]{0,4096}"\}\r?$', re.MULTILINE)


def _fail(path: str, problem: str) -> ModelError:
    return ModelError(f"{path}: {problem}")


def read_access_log(path: str | Path) -> np.ndarray:
    """Latencies (seconds) of the successful requests in a fortio ``-access-log-file`` (JSON lines)."""
    where = str(path)
    parts: list[np.ndarray] = []
    try:
        for first_line, block in _blocks(Path(path), where):
            parts.append(_block_latencies(block, where, first_line))
    except (OSError, UnicodeDecodeError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise _fail(where, f"cannot read access log ({type(exc).__name__}: {exc})") from None
    values = np.concatenate(parts) if parts else np.empty(0)
    if not values.size:
        raise _fail(where, "no successful requests in the access log")
    return values


def _blocks(path: Path, where: str) -> Iterator[tuple[int, bytes]]:
    """(number of the block's first line, the block): whole lines, the last one possibly without its newline."""
    raw = gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")
    with raw:
        read, line, carry = 0, 1, b""
        while chunk := raw.read(BLOCK_BYTES):
            read += len(chunk)
            if read > MAX_ACCESS_LOG_BYTES:
                raise _fail(where, f"access log larger than {MAX_ACCESS_LOG_BYTES} bytes (decompressed): not read")
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            block, carry = data[:cut], data[cut:]
            if len(carry) > MAX_LOG_LINE:  # one endless line is no bomb either
                raise _fail(where, f"a line longer than {MAX_LOG_LINE} characters: not a fortio access log")
            if block:
                yield line, block
                line += block.count(b"\n")
        if carry:
            yield line, carry


def _block_latencies(block: bytes, where: str, first_line: int) -> np.ndarray:
    lines = block.count(b"\n") + (not block.endswith(b"\n"))
    found = FORTIO_LINE.findall(block)
    if len(found) == lines:
        latency = np.array([value for value, _ in found]).astype(np.float64)
        if np.isfinite(latency).all():
            return latency[np.array([ok == b"true" for _, ok in found], dtype=bool)]
    return latencies_by_line(block, where, first_line)


def latencies_by_line(block: bytes, where: str, first_line: int) -> np.ndarray:
    """The successful requests' latencies in ``block``, each line through the JSON parser; an error names its line
    (``first_line`` is the block's first)."""
    values: list[float] = []
    for i, line in enumerate(block.split(b"\n"), first_line):
        if len(line) > MAX_LOG_LINE:
            raise _fail(where, f"a line longer than {MAX_LOG_LINE} characters: not a fortio access log")
        text = line.decode("utf-8")
        if text.strip():
            latency, ok = _log_entry(text, where, i)
            if ok:
                values.append(latency)
    return np.array(values, dtype=np.float64)


def _log_entry(line: str, where: str, i: int) -> tuple[float, bool]:
    try:
        entry = json.loads(line)
        latency = float(entry["latency"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, RecursionError):
        raise _fail(where, f"line {i}: not a fortio access-log entry (needs JSON with 'latency')") from None
    if not math.isfinite(latency) or latency < 0:
        raise _fail(where, f"line {i}: latency must be a finite number >= 0, got {entry['latency']!r}")
    return latency, bool(entry.get("ok", True))
