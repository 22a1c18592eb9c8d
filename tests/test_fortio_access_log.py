"""The access-log reader by blocks gives exactly what parsing every line as JSON gives, wherever blocks are cut.

fortio's own lines go through one regular expression per block; any other line sends its block through the JSON
parser line by line. The reference here is that JSON reading of the whole file, line by line.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from meshsim.calibrate.measure import fortio_access_log
from meshsim.calibrate.measure.fortio_access_log import read_access_log
from meshsim.errors import ModelError

ROOT = Path(__file__).resolve().parent.parent


def by_json(text: str) -> np.ndarray:
    entries = [json.loads(line) for line in text.splitlines() if line.strip()]
    return np.array([float(e["latency"]) for e in entries if e.get("ok", True)], dtype=float)


def fortio_line(latency: float, ok: bool, i: int) -> str:
    # Go's encoder: shortest round-trip digits, exponent form for small values (1e-07)
    value = json.dumps(latency)
    return (f'{{"latency":{value},"timestamp":{1795764325032282718 + i},"thread":{i % 7},"iter":{i},'
            f'"ok":{"true" if ok else "false"},"details":"{200 if ok else 503}"}}')


LATENCY = st.floats(min_value=0.0, max_value=30.0, allow_nan=False) | st.sampled_from([1e-07, 2.5e-06, 0.0])
LINE = st.one_of(
    st.tuples(st.just("fortio"), LATENCY, st.booleans()),
    st.tuples(st.just("other"), LATENCY, st.booleans()),  # valid JSON in another layout: the slow path
    st.tuples(st.just("blank"), st.just(0.0), st.just(True)),
)


def written(tmp_path: Path, kinds: list[tuple[str, float, bool]], gz: bool) -> tuple[Path, str]:
    lines = []
    for i, (kind, latency, ok) in enumerate(kinds):
        if kind == "fortio":
            lines.append(fortio_line(latency, ok, i))
        elif kind == "other":
            lines.append(json.dumps({"ok": ok, "latency": latency}, indent=None, separators=(", ", ": ")))
        else:
            lines.append("   ")
    text = "\n".join(lines) + ("\n" if len(kinds) % 2 else "")  # with and without the last newline
    path = tmp_path / ("access.jsonl.gz" if gz else "access.jsonl")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path, text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(LINE, min_size=1, max_size=60), block=st.integers(min_value=150, max_value=2000),
       gz=st.booleans())
def test_blocks_read_what_json_reads_line_by_line(tmp_path: Path, kinds, block: int, gz: bool) -> None:
    path, text = written(tmp_path, kinds, gz)
    expected = by_json(text)
    with mock.patch.object(fortio_access_log, "BLOCK_BYTES", block):
        if not expected.size:
            with pytest.raises(ModelError, match="no successful requests"):
                read_access_log(path)
            return
        assert np.array_equal(read_access_log(path), expected)


def test_a_bad_line_in_a_later_block_is_named_by_its_number(tmp_path: Path) -> None:
    lines = [fortio_line(0.001 * i, True, i) for i in range(200)]
    lines[137] = '{"latency": -0.5, "ok": true}'
    (tmp_path / "access.jsonl").write_text("\n".join(lines) + "\n")
    with mock.patch.object(fortio_access_log, "BLOCK_BYTES", 1000):  # ~8 lines per block
        with pytest.raises(ModelError, match=r"line 138: latency must be a finite number >= 0, got -0.5"):
            read_access_log(tmp_path / "access.jsonl")
    lines[137] = fortio_line(0.001, True, 137).replace("0.001", "1e999")  # fortio's layout, not a finite number
    (tmp_path / "access.jsonl").write_text("\n".join(lines) + "\n")
    with mock.patch.object(fortio_access_log, "BLOCK_BYTES", 1000):
        with pytest.raises(ModelError, match=r"line 138: latency must be a finite number >= 0"):
            read_access_log(tmp_path / "access.jsonl")


def test_the_shipped_logs_read_alike_both_ways() -> None:
    """Real fortio logs (lab runs of 1.68.2): every line takes the fast path, and it gives the JSON parser's values."""
    logs = sorted((ROOT / "measurements").rglob("access.jsonl.gz"))[::40]
    assert len(logs) >= 10
    for log in logs:
        data = gzip.decompress(log.read_bytes())
        assert len(fortio_access_log.FORTIO_LINE.findall(data)) == data.count(b"\n"), log
        assert np.array_equal(read_access_log(log), by_json(data.decode())), log
